package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
	"github.com/fleetlet/fleetlet/pkg/sandbox"
)

// The furnished sandbox runs, in every cluster's kube-system, DaemonSets
// that tolerate every taint (a kube-proxy that selects Linux nodes, a CNI
// agent that selects every node) and a CoreDNS, as production clusters do.
// fleetlet leaves them undisturbed: every DaemonSet is fully available,
// its pods on the source's virtual nodes acknowledged (NotRun, Ready) and
// never run anywhere, CoreDNS available, no system pod preempted or turned
// into a proxy. Before: the DaemonSets' pods on the virtual nodes stayed
// Pending for good and the DaemonSets never reported all pods ready.
func TestSystemWorkloadsUndisturbed(t *testing.T) {
	need(t)
	eventually(t, 2*time.Minute, "the system workloads of every cluster available and undisturbed", func(ctx context.Context) (bool, string) {
		problems := systemWorkloadProblems(ctx)
		return len(problems) == 0, strings.Join(problems, "; ")
	})
	pods, err := kube(t, sandbox.SourceCluster).CoreV1().Pods(metav1.NamespaceSystem).List(context.Background(), metav1.ListOptions{})
	require.NoError(t, err)
	acked := 0
	for _, p := range pods.Items {
		if strings.HasPrefix(p.Spec.NodeName, "fleetlet-") {
			acked++
			t.Logf("%s on %s: %s, %s", p.Name, p.Spec.NodeName, p.Status.Phase, conditionReason(p.Status.Conditions, v1alpha1.ConditionNotRun))
		}
	}
	want := 2 * len(sb.ClusterNames())
	assert.GreaterOrEqual(t, acked, want, "DaemonSet pods on the virtual nodes (both DaemonSets on each)")
}

func conditionReason(conds []corev1.PodCondition, typ corev1.PodConditionType) string {
	for _, c := range conds {
		if c.Type == typ {
			return string(c.Status) + "/" + c.Reason
		}
	}
	return "no " + string(typ)
}

// systemWorkloadProblems lists what is wrong with the furnished system
// workloads of every cluster; none when they are all available and
// undisturbed. The suite checks it again once every scenario has run.
func systemWorkloadProblems(ctx context.Context) []string {
	var problems []string
	for _, c := range sb.ClusterNames() {
		cs, err := sb.Client(c)
		if err != nil {
			return []string{err.Error()}
		}
		nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return []string{c + ": " + err.Error()}
		}
		for _, name := range []string{sandbox.FurnitureKubeProxy, sandbox.FurnitureCNIAgent} {
			ds, err := cs.AppsV1().DaemonSets(metav1.NamespaceSystem).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				problems = append(problems, fmt.Sprintf("%s: DaemonSet %s: %v", c, name, err))
				continue
			}
			if p := daemonSetProblem(ds, nodes.Items); p != "" {
				problems = append(problems, c+": "+p)
			}
		}
		dns, err := cs.AppsV1().Deployments(metav1.NamespaceSystem).Get(ctx, sandbox.FurnitureCoreDNS, metav1.GetOptions{})
		if err != nil {
			problems = append(problems, fmt.Sprintf("%s: CoreDNS: %v", c, err))
		} else if dns.Status.AvailableReplicas != *dns.Spec.Replicas {
			problems = append(problems, fmt.Sprintf("%s: CoreDNS %d/%d available", c, dns.Status.AvailableReplicas, *dns.Spec.Replicas))
		}
		pods, err := cs.CoreV1().Pods(metav1.NamespaceSystem).List(ctx, metav1.ListOptions{})
		if err != nil {
			return append(problems, c+": "+err.Error())
		}
		for _, p := range pods.Items {
			if _, proxy := p.Annotations[v1alpha1.AnnotationSourceSpec]; proxy {
				problems = append(problems, fmt.Sprintf("%s: system pod %s became a proxy", c, p.Name))
			}
			if strings.HasPrefix(p.Spec.NodeName, "fleetlet-") && conditionReason(p.Status.Conditions, v1alpha1.ConditionNotRun) != "True/"+v1alpha1.ReasonNotRunOnVirtualNode {
				problems = append(problems, fmt.Sprintf("%s: %s on virtual node %s not acknowledged (%s)", c, p.Name, p.Spec.NodeName, p.Status.Phase))
			}
		}
		events, err := cs.EventsV1().Events(metav1.NamespaceSystem).List(ctx, metav1.ListOptions{})
		if err != nil {
			return append(problems, c+": "+err.Error())
		}
		for _, e := range events.Items {
			if e.Reason == "Preempted" {
				problems = append(problems, fmt.Sprintf("%s: %s %s preempted: %s", c, e.Regarding.Kind, e.Regarding.Name, e.Note))
			}
		}
	}
	return problems
}

// daemonSetProblem says what keeps a DaemonSet from having one available,
// up-to-date pod on every node it selects ("" for nothing).
func daemonSetProblem(ds *appsv1.DaemonSet, nodes []corev1.Node) string {
	sel := labels.SelectorFromSet(ds.Spec.Template.Spec.NodeSelector)
	want := int32(0)
	for _, n := range nodes {
		if sel.Matches(labels.Set(n.Labels)) {
			want++
		}
	}
	s := ds.Status
	if s.DesiredNumberScheduled != want || s.NumberReady != want || s.NumberAvailable != want || s.UpdatedNumberScheduled != want || s.ObservedGeneration != ds.Generation {
		return fmt.Sprintf("DaemonSet %s: desired %d ready %d available %d updated %d, want %d (one per selected node)",
			ds.Name, s.DesiredNumberScheduled, s.NumberReady, s.NumberAvailable, s.UpdatedNumberScheduled, want)
	}
	return ""
}
