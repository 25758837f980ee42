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
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
	"github.com/fleetlet/fleetlet/pkg/sandbox"
)

// proxiesOn lists the live proxies of ns bound to a virtual node, by node.
func proxiesOn(t *testing.T, ctx context.Context, ns, selector string) map[string][]corev1.Pod {
	t.Helper()
	list, err := kube(t, sandbox.SourceCluster).CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
	require.NoError(t, err)
	out := map[string][]corev1.Pod{}
	for _, p := range list.Items {
		if p.DeletionTimestamp == nil {
			out[p.Spec.NodeName] = append(out[p.Spec.NodeName], p)
		}
	}
	return out
}

// delegatesIn counts this source's pods in namespace ns of a cluster.
func delegatesIn(t *testing.T, ctx context.Context, cluster, ns string) []string {
	t.Helper()
	var out []string
	for _, l := range remoteLeftovers(t, ctx, ns) {
		if strings.HasPrefix(l, cluster+": pod/") {
			out = append(out, l)
		}
	}
	return out
}

// oneAtATime gives the pods labelled app=<app> a PodDisruptionBudget of
// maxUnavailable 1, and waits until it allows one disruption with all n
// healthy.
func oneAtATime(t *testing.T, ns, app string, n int32) {
	t.Helper()
	src := kube(t, sandbox.SourceCluster)
	pdb := &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: app, Namespace: ns},
		Spec: policyv1.PodDisruptionBudgetSpec{
			MaxUnavailable: ptr.To(intstr.FromInt32(1)),
			Selector:       &metav1.LabelSelector{MatchLabels: map[string]string{"app": app}},
		},
	}
	_, err := src.PolicyV1().PodDisruptionBudgets(ns).Create(context.Background(), pdb, metav1.CreateOptions{})
	require.NoError(t, err)
	eventually(t, time.Minute, "the PDB to allow one disruption", func(ctx context.Context) (bool, string) {
		p, err := src.PolicyV1().PodDisruptionBudgets(ns).Get(ctx, app, metav1.GetOptions{})
		return err == nil && p.Status.DisruptionsAllowed == 1 && p.Status.CurrentHealthy == n, fmt.Sprintf("%+v", p.Status)
	})
}

// notSource keeps a Deployment's pods out of cluster-1 (the source, a self
// target), so that a scenario can take a target away from them.
func notSource(name string) func(*appsv1.Deployment) {
	return func(d *appsv1.Deployment) {
		if d.Spec.Template.Annotations == nil {
			d.Spec.Template.Annotations = map[string]string{}
		}
		d.Spec.Template.Annotations[v1alpha1.AnnotationClusterSelector] = "topology.kubernetes.io/region in (cluster-2,cluster-3)"
	}
}

// busiest is the virtual node with the most proxies of the selector.
func busiest(t *testing.T, ctx context.Context, ns, selector string) string {
	t.Helper()
	best, n := "", 0
	for node, ps := range proxiesOn(t, ctx, ns, selector) {
		if strings.HasPrefix(node, "fleetlet-") && len(ps) > n {
			best, n = node, len(ps)
		}
	}
	require.NotEmpty(t, best, "no proxy on any virtual node")
	return best
}

// Draining a virtual node is a blue/green cluster upgrade: its proxies are
// evicted through the Eviction API (a PodDisruptionBudget respected),
// their delegates go, and the Deployment comes back in the other clusters.
func TestDrainMovesWorkloadsElsewhere(t *testing.T) {
	need(t)
	ns := enabledNamespace(t, "drain", sb.ClusterNames()[1:]...)
	ctx := context.Background()
	src := kube(t, sandbox.SourceCluster)
	sel := deployment(t, ns, "drainee", 12, notSource("drainee"))
	waitDeploymentRunning(t, ns, "drainee", 12, 3*time.Minute)
	oneAtATime(t, ns, "drainee", 12)
	node := busiest(t, ctx, ns, sel)
	drained := clusterOfNode(node)
	t.Cleanup(func() { _, _ = kubectl(t, "--context", sandbox.SourceCluster, "uncordon", node) })
	start := time.Now()
	// Only this scenario's pods: other scenarios' namespaces may still be
	// going away (drain refuses their bare pods without --force).
	out, err := kubectl(t, "--context", sandbox.SourceCluster, "drain", node, "--ignore-daemonsets", "--pod-selector="+sel, "--timeout=3m")
	require.NoErrorf(t, err, "kubectl drain %s\n%s", node, out)
	t.Logf("kubectl drain %s took %s", node, time.Since(start).Round(100*time.Millisecond))
	assert.Containsf(t, out, "evicted", "kubectl drain evicted nothing:\n%s", out)
	proxies := waitDeploymentRunning(t, ns, "drainee", 12, 2*time.Minute)
	for _, p := range proxies {
		assert.NotEqualf(t, node, p.Spec.NodeName, "proxy %s is still on the drained node", p.Name)
	}
	eventually(t, time.Minute, "no delegate left in "+drained, func(ctx context.Context) (bool, string) {
		d := delegatesIn(t, ctx, drained, ns)
		return len(d) == 0, fmt.Sprint(d)
	})
	// The PDB held: the Deployment never had more than one replica down
	// at once, which the disruption controller records as never going
	// below 11 healthy while it evicted.
	p, err := src.PolicyV1().PodDisruptionBudgets(ns).Get(ctx, "drainee", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equalf(t, int32(12), p.Status.CurrentHealthy, "PDB status after the drain: %+v", p.Status)

	// A pod that only the cordoned cluster may run waits, saying why, and
	// is elected there as soon as the node is uncordoned (the elector
	// watches virtual nodes; it does not wait for its next retry).
	late := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "late", Namespace: ns,
			Annotations: map[string]string{v1alpha1.AnnotationClusterSelector: "topology.kubernetes.io/region=" + drained}},
		Spec: podSpec("100m"),
	}
	_, err = src.CoreV1().Pods(ns).Create(ctx, late, metav1.CreateOptions{})
	require.NoError(t, err)
	eventually(t, time.Minute, "the pod to wait for the cordoned cluster", func(ctx context.Context) (bool, string) {
		p, err := src.CoreV1().Pods(ns).Get(ctx, "late", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		c := electedCondition(p)
		return c != nil && c.Status == corev1.ConditionFalse && strings.Contains(c.Message, "cordoned"), fmt.Sprintf("%+v", c)
	})
	out, err = kubectl(t, "--context", sandbox.SourceCluster, "uncordon", node)
	require.NoErrorf(t, err, "uncordon\n%s", out)
	took := eventually(t, 30*time.Second, "the waiting pod to run on the uncordoned node", func(ctx context.Context) (bool, string) {
		p, err := src.CoreV1().Pods(ns).Get(ctx, "late", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return p.Spec.NodeName == node && p.Status.Phase == corev1.PodRunning, string(p.Status.Phase) + " on " + p.Spec.NodeName
	})
	t.Logf("running %s after the uncordon", took.Round(100*time.Millisecond))
}

// A fleetlet outage is not a cluster failure: with the manager stopped for
// longer than the unreachable toleration, the virtual nodes go Unknown and
// are tainted, but no proxy is evicted and no delegate restarted; when the
// manager returns, the same pods run on.
func TestManagerOutageEvictsNothing(t *testing.T) {
	need(t)
	ns := enabledNamespace(t, "mgr-outage", sb.ClusterNames()[1:]...)
	ctx := context.Background()
	sel := deployment(t, ns, "web", 6)
	before := waitDeploymentRunning(t, ns, "web", 6, 3*time.Minute)
	// The delegate is the pod in the cluster of the proxy's node: a
	// loser's candidate elsewhere may not be gone yet (taking any
	// cluster's made this test fail now and then).
	delegatesBefore := map[types.UID]types.UID{}
	for i := range before {
		p := &before[i]
		ds := delegatesOf(t, ctx, p)[clusterOfNode(p.Spec.NodeName)]
		require.Lenf(t, ds, 1, "proxy %s on %s: %d pods there, want its delegate", p.Name, p.Spec.NodeName, len(ds))
		delegatesBefore[p.UID] = ds[0].UID
	}

	stopped := time.Now()
	require.NoError(t, sb.StopComponent(ctx, sandbox.SourceCluster, sandbox.ComponentManager))
	restarted := false
	t.Cleanup(func() {
		if !restarted {
			_ = sb.StartComponent(context.Background(), sandbox.SourceCluster, sandbox.ComponentManager)
		}
	})
	var tainted time.Time
	for _, c := range sb.ClusterNames() {
		eventually(t, 2*time.Minute, "fleetlet-"+c+" Unknown and tainted unreachable", func(ctx context.Context) (bool, string) {
			n, err := virtualNode(t, ctx, c)
			if err != nil {
				return false, err.Error()
			}
			r := readyCondition(n)
			for _, taint := range n.Spec.Taints {
				if taint.Key == corev1.TaintNodeUnreachable && taint.Effect == corev1.TaintEffectNoExecute {
					return r.Status == corev1.ConditionUnknown, fmt.Sprintf("%+v", r)
				}
			}
			return false, fmt.Sprintf("%+v, taints %v", r, n.Spec.Taints)
		})
	}
	tainted = time.Now()
	t.Logf("every virtual node Unknown and tainted %s after the manager stopped", tainted.Sub(stopped).Round(100*time.Millisecond))
	// Past the default unreachable toleration (which the proxies do not
	// have: theirs is unbounded) nothing has been evicted.
	time.Sleep(time.Duration(sandbox.DefaultTolerationSeconds+10) * time.Second)
	for node, ps := range proxiesOn(t, ctx, ns, sel) {
		for _, p := range ps {
			_, ok := delegatesBefore[p.UID]
			assert.Truef(t, ok, "proxy %s on %s is new: something was evicted", p.Name, node)
		}
	}
	require.NotEmpty(t, proxiesOn(t, ctx, ns, sel), "no proxy left")

	back := time.Now()
	require.NoError(t, sb.StartComponent(ctx, sandbox.SourceCluster, sandbox.ComponentManager))
	restarted = true
	for _, c := range sb.ClusterNames() {
		waitVirtualNodeReady(t, c, "after the manager is back", 2*time.Minute)
	}
	t.Logf("every virtual node Ready %s after the manager was restarted", time.Since(back).Round(100*time.Millisecond))
	after := waitDeploymentRunning(t, ns, "web", 6, time.Minute)
	for i := range after {
		p := &after[i]
		want, ok := delegatesBefore[p.UID]
		if !assert.Truef(t, ok, "proxy %s was replaced during the outage", p.Name) {
			continue
		}
		d := delegatesOf(t, ctx, p)
		got := d[clusterOfNode(p.Spec.NodeName)]
		assert.Falsef(t, len(got) != 1 || got[0].UID != want, "proxy %s: delegate changed or doubled: %v", p.Name, names(d))
	}
}

// A target outage is a node failure: its virtual node goes NotReady, the
// proxies there are evicted after their not-ready toleration and the
// Deployment's replicas come back in the other clusters; the evicted
// proxies stay Terminating until their delegates are confirmed gone, which
// happens when the target returns — leaving no stale delegate there.
func TestTargetOutageMovesReplicas(t *testing.T) {
	need(t)
	ns := enabledNamespace(t, "tgt-outage", sb.ClusterNames()[1:]...)
	ctx := context.Background()
	src := kube(t, sandbox.SourceCluster)
	sel := deployment(t, ns, "web", 9, notSource("web"), func(d *appsv1.Deployment) {
		s := &d.Spec.Template.Spec
		s.Tolerations = append(s.Tolerations, corev1.Toleration{
			Key: corev1.TaintNodeNotReady, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To[int64](5),
		})
	})
	waitDeploymentRunning(t, ns, "web", 9, 3*time.Minute)
	node := busiest(t, ctx, ns, sel)
	down := clusterOfNode(node)
	on3 := proxiesOn(t, ctx, ns, sel)[node]
	// A StatefulSet's pod in the same cluster: it must never run twice.
	watchOneCopy(t, ns)
	singleDB(t, ctx, ns, down)
	var db0 *corev1.Pod
	eventually(t, 2*time.Minute, "db-0 Running in "+down, func(ctx context.Context) (bool, string) {
		p, err := src.CoreV1().Pods(ns).Get(ctx, "db-0", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		db0 = p
		return p.Status.Phase == corev1.PodRunning && p.Spec.NodeName == node, string(p.Status.Phase) + " on " + p.Spec.NodeName
	})

	require.NoError(t, sb.Stop(ctx, down))
	restarted := false
	t.Cleanup(func() {
		if !restarted {
			_ = sb.Start(context.Background(), down)
		}
	})
	// Replicas come back elsewhere while the evicted proxies wait.
	eventually(t, 3*time.Minute, "9 Running replicas outside "+down, func(ctx context.Context) (bool, string) {
		by := proxiesOn(t, ctx, ns, sel)
		running := 0
		for n, ps := range by {
			if n == node {
				continue
			}
			for _, p := range ps {
				if p.Status.Phase == corev1.PodRunning {
					running++
				}
			}
		}
		return running == 9 && len(by[node]) == 0, fmt.Sprintf("%d running elsewhere, %d live on %s", running, len(by[node]), node)
	})
	// The StatefulSet waits: db-0 is evicted but stays Terminating, so no
	// second db-0 exists while its delegate may still run.
	eventually(t, time.Minute, "db-0 evicted and waiting", func(ctx context.Context) (bool, string) {
		p, err := src.CoreV1().Pods(ns).Get(ctx, "db-0", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		require.Equal(t, db0.UID, p.UID, "a second db-0 was created while the first one's delegate could not be confirmed gone")
		return p.DeletionTimestamp != nil, "not evicted yet"
	})
	for _, p := range on3 {
		got, err := src.CoreV1().Pods(ns).Get(ctx, p.Name, metav1.GetOptions{})
		if !assert.NoErrorf(t, err, "evicted proxy %s is gone while its target is down (its delegate cannot be confirmed gone)", p.Name) {
			continue
		}
		assert.NotNilf(t, got.DeletionTimestamp, "proxy %s on the failed target was not evicted", p.Name)
	}

	require.NoError(t, sb.Start(ctx, down))
	restarted = true
	eventually(t, 3*time.Minute, "the evicted proxies gone and no stale delegate in "+down, func(ctx context.Context) (bool, string) {
		left := 0
		for _, p := range on3 {
			if _, err := src.CoreV1().Pods(ns).Get(ctx, p.Name, metav1.GetOptions{}); err == nil {
				left++
			}
		}
		var stale []string
		for _, p := range on3 {
			for _, ps := range delegatesOf(t, ctx, &p) {
				for _, dp := range ps {
					stale = append(stale, dp.Name)
				}
			}
		}
		return left == 0 && len(stale) == 0, fmt.Sprintf("%d evicted proxies left; their delegates %v", left, stale)
	})
	waitDeploymentRunning(t, ns, "web", 9, time.Minute)
	eventually(t, 2*time.Minute, "a new db-0 Running with one delegate", func(ctx context.Context) (bool, string) {
		p, err := src.CoreV1().Pods(ns).Get(ctx, "db-0", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		if p.UID == db0.UID || p.Status.Phase != corev1.PodRunning {
			return false, fmt.Sprintf("uid %s phase %s", p.UID, p.Status.Phase)
		}
		d := delegatesOf(t, ctx, p)
		return len(d[down]) == 1 && len(d) == 1, fmt.Sprint(names(d))
	})
}

// With the source cluster down, a target keeps its workload alive: a
// delegate deleted there is recreated once the source's heartbeat has
// expired and the delay has passed. When the source returns nothing is
// doubled: exactly one delegate per proxy.
func TestSourceOutageTargetRecreatesDelegates(t *testing.T) {
	need(t)
	ns := enabledNamespace(t, "src-outage", sb.ClusterNames()[1:]...)
	ctx := context.Background()
	deployment(t, ns, "web", 4, notSource("web"))
	proxies := waitDeploymentRunning(t, ns, "web", 4, 3*time.Minute)
	victim := proxies[0]
	cluster := clusterOfNode(victim.Spec.NodeName)
	dp := delegatesOf(t, ctx, &victim)[cluster][0]

	require.NoError(t, sb.Stop(ctx, sandbox.SourceCluster))
	restarted := false
	t.Cleanup(func() {
		if !restarted {
			_ = sb.Start(context.Background(), sandbox.SourceCluster)
		}
	})
	tc := kube(t, cluster)
	require.NoError(t, tc.CoreV1().Pods(ns).Delete(ctx, dp.Name, metav1.DeleteOptions{}))
	deleted := time.Now()
	eventually(t, 2*time.Minute, "the deleted delegate recreated in "+cluster, func(ctx context.Context) (bool, string) {
		p, err := tc.CoreV1().Pods(ns).Get(ctx, dp.Name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return p.UID != dp.UID && p.Status.Phase == corev1.PodRunning, fmt.Sprintf("uid %s phase %s", p.UID, p.Status.Phase)
	})
	t.Logf("delegate recreated %s after it was deleted with the source down", time.Since(deleted).Round(100*time.Millisecond))

	require.NoError(t, sb.Start(ctx, sandbox.SourceCluster))
	restarted = true
	after := waitDeploymentRunning(t, ns, "web", 4, 2*time.Minute)
	eventually(t, time.Minute, "exactly one delegate per proxy", func(ctx context.Context) (bool, string) {
		total := 0
		for i := range after {
			d := delegatesOf(t, ctx, &after[i])
			n := 0
			for _, ps := range d {
				n += len(ps)
			}
			if n != 1 {
				return false, fmt.Sprintf("proxy %s: %v", after[i].Name, names(d))
			}
			total += n
		}
		var all int
		for _, c := range sb.ClusterNames() {
			all += len(delegatesIn(t, ctx, c, ns))
		}
		return all == total && total == 4, fmt.Sprintf("%d delegates in the targets for %d proxies", all, total)
	})
}

// singleDB creates a one-replica StatefulSet db in ns, its pod kept in one
// cluster and tolerating a NotReady node for 5 s only: db-0 must never
// run twice.
func singleDB(t *testing.T, ctx context.Context, ns, cluster string) {
	t.Helper()
	sts := &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: ns},
		Spec: appsv1.StatefulSetSpec{
			Replicas: ptr.To[int32](1),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "db"},
					Annotations: map[string]string{v1alpha1.AnnotationClusterSelector: "topology.kubernetes.io/region=" + cluster}},
				Spec: podSpec("100m"),
			},
		},
	}
	sts.Spec.Template.Spec.Tolerations = []corev1.Toleration{{Key: corev1.TaintNodeNotReady, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To[int64](5)}}
	_, err := kube(t, sandbox.SourceCluster).AppsV1().StatefulSets(ns).Create(ctx, sts, metav1.CreateOptions{})
	require.NoError(t, err)
}
