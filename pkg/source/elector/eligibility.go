package elector

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"k8s.io/klog/v2"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
	"github.com/fleetlet/fleetlet/pkg/source/vnode"
)

// ParseClusterSelector reads the multicluster.fleetlet.io/cluster-selector
// annotation — a label selector over the labels a target's schedulable
// nodes share — and rewrites it over the virtual nodes' labels, where those
// labels are kept under target.multicluster.fleetlet.io/ (minus the
// target's excluded ones). A pod without the annotation selects every
// target.
func ParseClusterSelector(pod *corev1.Pod) (labels.Selector, error) {
	expr, ok := pod.Annotations[v1alpha1.AnnotationClusterSelector]
	if !ok {
		return labels.Everything(), nil
	}
	sel, err := labels.Parse(expr)
	if err != nil {
		return nil, fmt.Errorf("annotation %s=%q is not a label selector: %w", v1alpha1.AnnotationClusterSelector, expr, err)
	}
	reqs, _ := sel.Requirements()
	out := labels.NewSelector()
	for _, r := range reqs {
		key, ok := vnode.TargetLabelKey(r.Key())
		if !ok {
			return nil, fmt.Errorf("annotation %s: label key %q cannot be a shared node label", v1alpha1.AnnotationClusterSelector, r.Key())
		}
		nr, err := labels.NewRequirement(key, r.Operator(), r.ValuesUnsorted())
		if err != nil {
			return nil, err
		}
		out = out.Add(*nr)
	}
	return out, nil
}

// TargetView is what eligibility needs to know of one target.
type TargetView struct {
	// Key of the Target (Namespace set) or ClusterTarget.
	Namespace, Name string
	// Ready, Reason: the target's health.
	Ready  bool
	Reason string
	// Draining: the Target was deleted and is being emptied.
	Draining bool
	// SummaryStale: the target's fleetlet no longer renews its
	// ClusterSummary (it is down), so nothing there would run a new
	// candidate.
	SummaryStale bool
	// SchedulerDown: the target's ClusterSummary says its candidate
	// scheduler does not run, so no candidate there would be scheduled.
	SchedulerDown bool
	// Node is the target's virtual node in the source; nil if missing.
	Node *corev1.Node
}

// Eligible tells whether a target may get a candidate of the proxy, and if
// not, why (empty reason: not a target for this pod at all, nothing to
// report). The namespace check needs the target and is made by the caller.
func Eligible(proxy *corev1.Pod, t TargetView, clusters labels.Selector) (ok bool, reason string) {
	if t.Namespace != "" && t.Namespace != proxy.Namespace {
		return false, "" // a namespaced Target serves its own namespace only
	}
	if !t.Ready {
		return false, fmt.Sprintf("target not ready (%s)", t.Reason)
	}
	if t.Draining {
		return false, "the target is being disconnected"
	}
	if t.SummaryStale {
		return false, "the target's fleetlet does not renew its ClusterSummary (SummaryStale)"
	}
	if t.SchedulerDown {
		return false, "the target's candidate scheduler does not run (CandidateSchedulerRunning=False)"
	}
	if t.Node == nil {
		return false, "no virtual node yet"
	}
	if t.Node.Spec.Unschedulable {
		return false, "virtual node " + t.Node.Name + " is cordoned"
	}
	for _, taint := range t.Node.Spec.Taints {
		if taint.Effect != corev1.TaintEffectNoSchedule && taint.Effect != corev1.TaintEffectNoExecute {
			continue
		}
		if !corev1helpers.TolerationsTolerateTaint(klog.Background(), proxy.Spec.Tolerations, &taint, true) {
			return false, fmt.Sprintf("virtual node %s has a taint the pod does not tolerate: %s", t.Node.Name, taint.ToString())
		}
	}
	if !clusters.Matches(labels.Set(t.Node.Labels)) {
		return false, "cluster-selector does not match"
	}
	if ok, why := bindable(proxy, t.Node); !ok {
		return false, why
	}
	return true, ""
}

// bindable tells whether the source scheduler could bind the proxy, as it
// is, to the virtual node once pinned there: its own nodeSelector (the
// hostname pin aside) and required node affinity must match the virtual
// node. The webhook leaves only type=virtual-kubelet there, but another
// controller may add more to a gated pod (Kueue writes its flavor's node
// labels when it lifts its gate), and none of it can be taken back: a
// label the virtual nodes do not carry would leave the proxy pinned and
// never bound, so no candidate is made for it at all.
func bindable(proxy *corev1.Pod, node *corev1.Node) (bool, string) {
	p := &corev1.Pod{Spec: corev1.PodSpec{Affinity: proxy.Spec.Affinity, NodeSelector: maps.Clone(proxy.Spec.NodeSelector)}}
	delete(p.Spec.NodeSelector, corev1.LabelHostname)
	ok, err := nodeaffinity.GetRequiredNodeAffinity(p).Match(node)
	if err == nil && ok {
		return true, ""
	}
	var missing []string
	for _, k := range slices.Sorted(maps.Keys(p.Spec.NodeSelector)) {
		if v := p.Spec.NodeSelector[k]; node.Labels[k] != v {
			missing = append(missing, k+"="+v)
		}
	}
	what := "its required node affinity"
	if len(missing) > 0 {
		what = "nodeSelector " + strings.Join(missing, ",")
	}
	return false, fmt.Sprintf("the proxy's own %s (set after its creation, by a Kueue flavor for instance) does not match virtual node %s: "+
		"the proxy is bound to a virtual node, so only cluster-level labels can be added to it, not node-level ones", what, node.Name)
}
