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
	schedulingv1 "k8s.io/api/scheduling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
	"github.com/fleetlet/fleetlet/pkg/sandbox"
)

// enabledNamespace creates a namespace with a unique name, enabled for
// fleetlet in the source, in the source and in the given targets (labelled
// there for cluster-1's ClusterSource), and deletes it at the end.
func enabledNamespace(t *testing.T, prefix string, targets ...string) string {
	t.Helper()
	ctx := context.Background()
	name := fmt.Sprintf("%s-%d", prefix, time.Now().UnixNano()%1_000_000)
	for _, c := range append([]string{sandbox.SourceCluster}, targets...) {
		// Pod Security baseline, as a production cluster enforces on its
		// workload namespaces.
		labels := map[string]string{"source.multicluster.fleetlet.io/" + sandbox.SourceCluster: "true", podSecurityEnforce: "baseline"}
		if c == sandbox.SourceCluster {
			labels[v1alpha1.LabelEnabled] = "true"
		}
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
		_, err := kube(t, c).CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{})
		require.Falsef(t, err != nil && !apierrors.IsAlreadyExists(err), "creating namespace %s in %s: %v", name, c, err)
	}
	t.Cleanup(func() {
		for _, c := range sb.ClusterNames() {
			_ = kube(t, c).CoreV1().Namespaces().Delete(context.Background(), name, metav1.DeleteOptions{})
		}
	})
	return name
}

func podSpec(cpu string) corev1.PodSpec {
	return corev1.PodSpec{
		TerminationGracePeriodSeconds: ptr.To[int64](0),
		Containers: []corev1.Container{{Name: "main", Image: "registry.k8s.io/pause:3.10", Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse("64Mi")}}}},
	}
}

// delegatesOf lists, in every cluster, the live pods that stand for a proxy.
func delegatesOf(t *testing.T, ctx context.Context, proxy *corev1.Pod) map[string][]corev1.Pod {
	t.Helper()
	out := map[string][]corev1.Pod{}
	for _, c := range sb.ClusterNames() {
		pods, err := kube(t, c).CoreV1().Pods(proxy.Namespace).List(ctx, metav1.ListOptions{LabelSelector: v1alpha1.LabelParentUID + "=" + string(proxy.UID)})
		require.NoError(t, err)
		for _, p := range pods.Items {
			if p.DeletionTimestamp == nil {
				out[c] = append(out[c], p)
			}
		}
	}
	return out
}

// clusterOfNode is the target a virtual node stands for.
func clusterOfNode(node string) string { return strings.TrimPrefix(node, "fleetlet-") }

// waitBound waits until every pod matching the selector is bound to a
// virtual node and has exactly one delegate, bound, in that target; it
// returns the proxies.
func waitBound(t *testing.T, ns, selector string, n int, timeout time.Duration) []corev1.Pod {
	t.Helper()
	src := kube(t, sandbox.SourceCluster)
	var proxies []corev1.Pod
	eventually(t, timeout, fmt.Sprintf("%d proxies bound to virtual nodes", n), func(ctx context.Context) (bool, string) {
		list, err := src.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			return false, err.Error()
		}
		bound := 0
		for _, p := range list.Items {
			if strings.HasPrefix(p.Spec.NodeName, "fleetlet-") {
				bound++
			}
		}
		proxies = list.Items
		return bound == n && len(list.Items) == n, fmt.Sprintf("%d of %d bound", bound, len(list.Items))
	})
	ctx := context.Background()
	for i := range proxies {
		p := &proxies[i]
		// The invariant, at every moment: at most one bound pod (a
		// delegate) per proxy, in the cluster the proxy is bound to.
		want := clusterOfNode(p.Spec.NodeName)
		d := delegatesOf(t, ctx, p)
		boundIn := map[string]int{}
		for c, ps := range d {
			for _, dp := range ps {
				if dp.Spec.NodeName != "" {
					boundIn[c]++
				}
			}
		}
		assert.Falsef(t, len(boundIn) != 1 || boundIn[want] != 1, "proxy %s on %s has bound delegates %v, want exactly one in %s", p.Name, p.Spec.NodeName, names(d), want)
		c := electedCondition(p)
		assert.Falsef(t, c == nil || c.Status != corev1.ConditionTrue, "proxy %s bound without an Elected=True record: %+v", p.Name, c)
	}
	// And soon the losing candidates are gone everywhere.
	eventually(t, time.Minute, "the losing candidates to be gone", func(ctx context.Context) (bool, string) {
		for i := range proxies {
			d := delegatesOf(t, ctx, &proxies[i])
			total := 0
			for _, ps := range d {
				total += len(ps)
			}
			if total != 1 {
				return false, fmt.Sprintf("%s: %v", proxies[i].Name, names(d))
			}
		}
		return true, ""
	})
	return proxies
}

func names(d map[string][]corev1.Pod) map[string][]string {
	out := map[string][]string{}
	for c, ps := range d {
		for _, p := range ps {
			out[c] = append(out[c], p.Name+"@"+p.Spec.NodeName)
		}
	}
	return out
}

func electedCondition(p *corev1.Pod) *corev1.PodCondition {
	for i := range p.Status.Conditions {
		if p.Status.Conditions[i].Type == v1alpha1.ConditionElected {
			return &p.Status.Conditions[i]
		}
	}
	return nil
}

// A Deployment in an enabled namespace: every replica becomes a proxy bound
// to a virtual node, with exactly one delegate, spread over the clusters.
func TestDeploymentSpreadsOverClusters(t *testing.T) {
	need(t)
	ns := enabledNamespace(t, "spread", sb.ClusterNames()[1:]...)
	ctx := context.Background()
	labels := map[string]string{"app": "web"}
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](30),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: podSpec("100m")},
		},
	}
	start := time.Now()
	_, err := kube(t, sandbox.SourceCluster).AppsV1().Deployments(ns).Create(ctx, d, metav1.CreateOptions{})
	require.NoError(t, err)
	proxies := waitBound(t, ns, "app=web", 30, 3*time.Minute)
	t.Logf("30 proxies bound in %s", time.Since(start).Round(100*time.Millisecond))
	perCluster := map[string]int{}
	for _, p := range proxies {
		perCluster[clusterOfNode(p.Spec.NodeName)]++
		assert.Emptyf(t, p.Spec.SchedulingGates, "bound proxy %s still has gates %v", p.Name, p.Spec.SchedulingGates)
	}
	assert.GreaterOrEqualf(t, len(perCluster), 2, "30 replicas all landed in %v: no spread", perCluster)
	t.Logf("replicas per cluster: %v", perCluster)

	// A burst never makes the source scheduler fail a proxy, or preempt
	// for one: each is ungated only once its virtual node has room.
	events, err := kube(t, sandbox.SourceCluster).EventsV1().Events(ns).List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	isProxy := map[string]bool{}
	for _, p := range proxies {
		isProxy[p.Name] = true
	}
	for _, e := range events.Items {
		// The self target's candidates are pods of this namespace too:
		// their scheduler's events are not the source scheduler's.
		assert.Falsef(t, e.Regarding.Kind == "Pod" && isProxy[e.Regarding.Name] && (e.Reason == "FailedScheduling" || e.Reason == "Preempted" || e.Reason == "Preempting"),
			"the source scheduler: %s %s: %s", e.Regarding.Name, e.Reason, e.Note)
	}

	// In cluster-1, a self target, the candidates are not proxies.
	if ds := kube(t, sandbox.SourceCluster); true {
		pods, err := ds.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: v1alpha1.LabelParentUID})
		require.NoError(t, err)
		for _, p := range pods.Items {
			for _, f := range p.Finalizers {
				assert.NotEqualf(t, v1alpha1.FinalizerDelegate, f, "delegate %s in cluster-1 was turned into a proxy", p.Name)
			}
			assert.NotContainsf(t, p.Labels, "app", "delegate %s in the self target kept label app: the source's Deployment would count it", p.Name)
		}
	}
}

// cluster-selector and nodeSelector reach the right cluster and node.
func TestPlacementConstraints(t *testing.T) {
	need(t)
	ns := enabledNamespace(t, "placement", sb.ClusterNames()[1:]...)
	ctx := context.Background()
	src := kube(t, sandbox.SourceCluster)

	bySelector := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "in-region-3", Namespace: ns, Labels: map[string]string{"case": "selector"},
		Annotations: map[string]string{v1alpha1.AnnotationClusterSelector: "topology.kubernetes.io/region=cluster-3"}}, Spec: podSpec("100m")}
	byZone := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "in-zone-2b", Namespace: ns, Labels: map[string]string{"case": "zone"}}, Spec: podSpec("100m")}
	byZone.Spec.NodeSelector = map[string]string{"topology.kubernetes.io/zone": "cluster-2-b"}
	for _, p := range []*corev1.Pod{bySelector, byZone} {
		_, err := src.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
		require.NoError(t, err)
	}
	sel := waitBound(t, ns, "case=selector", 1, 2*time.Minute)
	assert.Equal(t, "fleetlet-cluster-3", sel[0].Spec.NodeName, "where cluster-selector region=cluster-3 landed")
	zone := waitBound(t, ns, "case=zone", 1, 2*time.Minute)
	assert.Equal(t, "fleetlet-cluster-2", zone[0].Spec.NodeName, "where nodeSelector zone=cluster-2-b landed")
	d := delegatesOf(t, ctx, &zone[0])
	ps := d["cluster-2"]
	assert.Falsef(t, len(ps) != 1 || ps[0].Spec.NodeName != sandbox.NodeName("cluster-2", 2), "the delegate of the zone cluster-2-b pod runs on %v, want %s", names(d), sandbox.NodeName("cluster-2", 2))
}

// A pod no cluster can run stays gated, says why for each cluster, and keeps
// a pending candidate in at most one target.
func TestTooBigStaysGatedAndExplains(t *testing.T) {
	need(t)
	ns := enabledNamespace(t, "toobig", sb.ClusterNames()[1:]...)
	ctx := context.Background()
	src := kube(t, sandbox.SourceCluster)
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "huge", Namespace: ns}, Spec: podSpec("1000")}
	created, err := src.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
	require.NoError(t, err)
	var cond *corev1.PodCondition
	eventually(t, time.Minute, "Elected=False naming every cluster", func(ctx context.Context) (bool, string) {
		p, err := src.CoreV1().Pods(ns).Get(ctx, "huge", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		cond = electedCondition(p)
		if cond == nil || cond.Status != corev1.ConditionFalse {
			return false, fmt.Sprintf("%+v", cond)
		}
		for _, c := range sb.ClusterNames() {
			if !strings.Contains(cond.Message, c+":") {
				return false, cond.Message
			}
		}
		return strings.Contains(cond.Message, "Insufficient cpu"), cond.Message
	})
	t.Logf("Elected=False: %s", cond.Message)
	p, err := src.CoreV1().Pods(ns).Get(ctx, "huge", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Falsef(t, p.Spec.NodeName != "" || len(p.Spec.SchedulingGates) != 1 || p.Spec.SchedulingGates[0].Name != v1alpha1.SchedulingGateElection, "the huge pod was not kept gated: node %q gates %v", p.Spec.NodeName, p.Spec.SchedulingGates)
	eventually(t, time.Minute, "pending candidates in at most one target", func(ctx context.Context) (bool, string) {
		d := delegatesOf(t, ctx, created)
		return len(d) <= 1, fmt.Sprintf("candidates in %v", names(d))
	})
}

// A target without the namespace is skipped, not an error.
func TestTargetWithoutNamespaceIsSkipped(t *testing.T) {
	need(t)
	ns := enabledNamespace(t, "partial", "cluster-2") // not in cluster-3
	ctx := context.Background()
	src := kube(t, sandbox.SourceCluster)
	for i := range 6 {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("p-%d", i), Namespace: ns, Labels: map[string]string{"case": "partial"}}, Spec: podSpec("100m")}
		_, err := src.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
		require.NoError(t, err)
	}
	for _, p := range waitBound(t, ns, "case=partial", 6, 2*time.Minute) {
		assert.NotEqualf(t, "fleetlet-cluster-3", p.Spec.NodeName, "%s landed in cluster-3, which has no namespace %s", p.Name, ns)
	}
}

// A target whose cluster has a globalDefault PriorityClass that preempts
// still accepts candidates: they carry fleetlet-candidate explicitly.
func TestGlobalDefaultPriorityClassInTarget(t *testing.T) {
	need(t)
	ctx := context.Background()
	pc := &schedulingv1.PriorityClass{
		ObjectMeta:       metav1.ObjectMeta{Name: "e2e-global-default"},
		Value:            1000,
		GlobalDefault:    true,
		PreemptionPolicy: ptr.To(corev1.PreemptLowerPriority),
	}
	tgt := kube(t, "cluster-3")
	_, err := tgt.SchedulingV1().PriorityClasses().Create(ctx, pc, metav1.CreateOptions{})
	require.Falsef(t, err != nil && !apierrors.IsAlreadyExists(err), "creating PriorityClass %s in cluster-3: %v", pc.Name, err)
	t.Cleanup(func() {
		_ = tgt.SchedulingV1().PriorityClasses().Delete(context.Background(), pc.Name, metav1.DeleteOptions{})
	})
	ns := enabledNamespace(t, "prio", "cluster-3")
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: ns, Labels: map[string]string{"case": "prio"},
		Annotations: map[string]string{v1alpha1.AnnotationClusterSelector: "topology.kubernetes.io/region=cluster-3"}}, Spec: podSpec("100m")}
	_, err = kube(t, sandbox.SourceCluster).CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
	require.NoError(t, err)
	waitBound(t, ns, "case=prio", 1, 2*time.Minute)
}
