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
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
	"github.com/fleetlet/fleetlet/pkg/sandbox"
)

// nodeAffinity sets a Deployment's node affinity.
func nodeAffinity(na *corev1.NodeAffinity) func(*appsv1.Deployment) {
	return func(d *appsv1.Deployment) {
		d.Spec.Template.Spec.Affinity = &corev1.Affinity{NodeAffinity: na}
	}
}

// cpu sets the CPU request of a Deployment's container.
func cpu(q string) func(*appsv1.Deployment) {
	return func(d *appsv1.Deployment) {
		d.Spec.Template.Spec.Containers[0].Resources.Requests[corev1.ResourceCPU] = resource.MustParse(q)
	}
}

// byCluster counts a Deployment's live proxies by the cluster of their
// virtual node.
func byCluster(t *testing.T, ctx context.Context, ns, selector string) map[string]int {
	t.Helper()
	out := map[string]int{}
	for node, ps := range proxiesOn(t, ctx, ns, selector) {
		out[clusterOfNode(node)] += len(ps)
	}
	return out
}

// A required node affinity on multicluster.fleetlet.io/cluster chooses the
// cluster, and is left out of the candidate (no real node carries that
// label: before, such a pod was unschedulable in every target); a term
// that no cluster meets gets Elected=False saying so.
func TestRequiredClusterAffinity(t *testing.T) {
	need(t)
	ns := enabledNamespace(t, "required", sb.ClusterNames()[1:]...)
	ctx := context.Background()
	west := sb.ClusterNames()[2]
	sel := deployment(t, ns, "pinned", 3, nodeAffinity(&corev1.NodeAffinity{
		RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
			MatchExpressions: []corev1.NodeSelectorRequirement{{Key: v1alpha1.LabelCluster, Operator: corev1.NodeSelectorOpIn, Values: []string{west}}},
		}}},
	}))
	waitDeploymentRunning(t, ns, "pinned", 3, 2*time.Minute)
	got := byCluster(t, ctx, ns, sel)
	assert.Equalf(t, 3, got[west], "replicas by cluster %v, want 3 in %s", got, west)
	var pcs v1alpha1.PodChaperonList
	require.NoError(t, ctrlClient(t, west).List(ctx, &pcs, client.InNamespace(ns)))
	for _, pc := range pcs.Items {
		for _, term := range pc.Spec.Template.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
			for _, r := range term.MatchExpressions {
				assert.NotEqualf(t, v1alpha1.LabelCluster, r.Key, "the candidate %s carries the cluster-level requirement %v", pc.Name, r)
			}
		}
	}

	deployment(t, ns, "nowhere", 1, nodeAffinity(&corev1.NodeAffinity{
		RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
			MatchExpressions: []corev1.NodeSelectorRequirement{{Key: v1alpha1.LabelCluster, Operator: corev1.NodeSelectorOpIn, Values: []string{"cluster-9"}}},
		}}},
	}))
	src := kube(t, sandbox.SourceCluster)
	eventually(t, time.Minute, "Elected=False naming the node affinity", func(ctx context.Context) (bool, string) {
		pods, err := src.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=nowhere"})
		if err != nil || len(pods.Items) != 1 {
			return false, fmt.Sprintf("%v %v", err, pods)
		}
		c := electedCondition(&pods.Items[0])
		return c != nil && c.Status == corev1.ConditionFalse && strings.Contains(c.Message, "no required node affinity term matches the cluster"), fmt.Sprintf("%+v", c)
	})
}

// A preference for a region with the bare key (Admiralty #201:
// topology.kubernetes.io/region, which every node of a cluster shares)
// ranks the clusters: every replica goes to the preferred cluster while it
// has room, and only the rest spills over to the next.
func TestPreferredClusterSpillsOver(t *testing.T) {
	need(t)
	ns := enabledNamespace(t, "prefer", sb.ClusterNames()[1:]...)
	ctx := context.Background()
	preferred := sb.ClusterNames()[1]
	// 15 CPUs of a 32-CPU node: two per node, six in a cluster of three.
	const replicas = 9
	// Pods that earlier scenarios left going (their namespaces are being
	// deleted) must not hold the preferred cluster's room, or the end
	// check that it is full would count them: each node has room for two.
	waited := eventually(t, 2*time.Minute, "every node of "+preferred+" with room for two replicas", func(ctx context.Context) (bool, string) {
		all, room := nodesWithRoom(t, ctx, preferred, resource.MustParse("0")), nodesWithRoom(t, ctx, preferred, resource.MustParse("30"))
		return len(room) == len(all), fmt.Sprintf("%v of %v", room, all)
	})
	t.Logf("waited %s for %s's room", waited.Round(time.Millisecond), preferred)
	sel := deployment(t, ns, "burst", replicas, notSource("burst"), cpu("15"), nodeAffinity(&corev1.NodeAffinity{
		PreferredDuringSchedulingIgnoredDuringExecution: []corev1.PreferredSchedulingTerm{{
			Weight:     100,
			Preference: corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "topology.kubernetes.io/region", Operator: corev1.NodeSelectorOpIn, Values: []string{preferred}}}},
		}},
	}))
	waitDeploymentRunning(t, ns, "burst", replicas, 3*time.Minute)
	got := byCluster(t, ctx, ns, sel)
	t.Logf("replicas by cluster: %v", got)
	// The preferred cluster took all it could: none of its nodes has room
	// for one more.
	room := nodesWithRoom(t, ctx, preferred, resource.MustParse("15"))
	assert.Falsef(t, got[preferred] == 0 || (got[preferred] < replicas && len(room) > 0), "%d of %d replicas in the preferred %s while its nodes %v have room for one more", got[preferred], replicas, preferred, room)
	assert.Equalf(t, replicas, got[preferred]+got[sb.ClusterNames()[2]], "replicas by cluster %v, want them all in %s and %s", got, preferred, sb.ClusterNames()[2])
}

// nodesWithRoom names a cluster's nodes with at least cpu unrequested.
func nodesWithRoom(t *testing.T, ctx context.Context, cluster string, cpu resource.Quantity) []string {
	t.Helper()
	k := kube(t, cluster)
	nodes, err := k.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	pods, err := k.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	used := map[string]int64{}
	for _, p := range pods.Items {
		if p.Spec.NodeName == "" || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		for _, c := range p.Spec.Containers {
			used[p.Spec.NodeName] += c.Resources.Requests.Cpu().MilliValue()
		}
	}
	var out []string
	for _, n := range nodes.Items {
		if n.Labels[v1alpha1.LabelNodeType] == v1alpha1.NodeTypeVirtualKubelet {
			continue
		}
		if n.Status.Allocatable.Cpu().MilliValue()-used[n.Name] >= cpu.MilliValue() {
			out = append(out, n.Name)
		}
	}
	return out
}

// A topology spread over multicluster.fleetlet.io/cluster (maxSkew 1,
// DoNotSchedule) spreads a 9-replica Deployment created at once 3/3/3: the
// choices of one burst are made one at a time, each counting the ones
// before it, not from a cache that has seen none of them.
func TestSpreadOverClusters(t *testing.T) {
	need(t)
	needWholeFleet(t)
	ns := enabledNamespace(t, "spread9", sb.ClusterNames()[1:]...)
	ctx := context.Background()
	const replicas = 9
	sel := deployment(t, ns, "even", replicas, spreadOverClusters("even"))
	waitDeploymentRunning(t, ns, "even", replicas, 3*time.Minute)
	assertEvenlySpread(t, byCluster(t, ctx, ns, sel), replicas)
}

// spreadOverClusters spreads a Deployment's replicas of app over
// multicluster.fleetlet.io/cluster, maxSkew 1, DoNotSchedule.
func spreadOverClusters(app string) func(*appsv1.Deployment) {
	return func(d *appsv1.Deployment) {
		d.Spec.Template.Spec.TopologySpreadConstraints = []corev1.TopologySpreadConstraint{{
			MaxSkew: 1, TopologyKey: v1alpha1.LabelCluster, WhenUnsatisfiable: corev1.DoNotSchedule,
			LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": app}},
		}}
	}
}

// assertEvenlySpread checks that replicas are spread evenly over every
// cluster of the sandbox.
func assertEvenlySpread(t *testing.T, got map[string]int, replicas int) {
	t.Helper()
	t.Logf("replicas by cluster: %v", got)
	for _, c := range sb.ClusterNames() {
		if got[c] != replicas/len(sb.ClusterNames()) {
			assert.Failf(t, "replicas not spread evenly", "replicas by cluster %v, want %d in each", got, replicas/len(sb.ClusterNames()))
			return
		}
	}
}

// A target that admits this source in the namespace late (the namespace
// made there without the label that admits it, labelled seconds later) is
// a domain of the spread all along: meanwhile no replica goes where the
// skew over it would grow past 1, and once it admits the source the
// Deployment spreads 3/3/3. Before: the domains were the targets that had
// a candidate, and the replicas of those first moments went to the others
// (4/5/0; a target's side binds the source's role in a new namespace a
// moment after it is made, seconds after its manager restarted).
func TestSpreadWaitsForATargetThatAdmitsLate(t *testing.T) {
	need(t)
	needWholeFleet(t)
	ctx := context.Background()
	late := sb.ClusterNames()[2]
	ns := enabledNamespace(t, "spread-late", sb.ClusterNames()[1])
	_, err := kube(t, late).CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: map[string]string{podSecurityEnforce: "baseline"}}}, metav1.CreateOptions{})
	require.NoError(t, err)
	const replicas = 9
	sel := deployment(t, ns, "even", replicas, spreadOverClusters("even"))
	for end := time.Now().Add(6 * time.Second); time.Now().Before(end); time.Sleep(500 * time.Millisecond) {
		got := byCluster(t, ctx, ns, sel)
		for c, n := range got {
			if c != "" && n > 1 { // "": not bound yet
				require.Failf(t, "spread broken", "%d replicas in %s while %s does not admit this source yet: %v", n, c, late, got)
			}
		}
	}
	// A replica that waits says which cluster holds it back.
	eventually(t, 30*time.Second, "a waiting replica's Elected=False naming "+late, func(ctx context.Context) (bool, string) {
		pods, err := kube(t, sandbox.SourceCluster).CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: sel})
		if err != nil {
			return false, err.Error()
		}
		last := "no replica Elected=False"
		for i := range pods.Items {
			if c := electedCondition(&pods.Items[i]); c != nil && c.Status == corev1.ConditionFalse {
				if strings.Contains(c.Message, late+" has 0") {
					return true, ""
				}
				last = c.Message
			}
		}
		return false, last
	})
	labelNamespace(t, late, ns, "source.multicluster.fleetlet.io/"+sandbox.SourceCluster)
	waitDeploymentRunning(t, ns, "even", replicas, 3*time.Minute)
	assertEvenlySpread(t, byCluster(t, ctx, ns, sel), replicas)
}

// A required pod anti-affinity over clusters puts one replica in each; the
// fourth of 4 over 3 clusters stays Pending, Elected=False naming the
// constraint.
func TestAntiAffinityOverClusters(t *testing.T) {
	need(t)
	needWholeFleet(t)
	ns := enabledNamespace(t, "apart", sb.ClusterNames()[1:]...)
	sel := deployment(t, ns, "apart", 4, func(d *appsv1.Deployment) {
		d.Spec.Template.Spec.Affinity = &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{
			RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
				TopologyKey:   v1alpha1.LabelCluster,
				LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "apart"}},
			}},
		}}
	})
	src := kube(t, sandbox.SourceCluster)
	eventually(t, 2*time.Minute, "3 replicas Running, one per cluster, and the fourth refused naming the anti-affinity", func(ctx context.Context) (bool, string) {
		pods, err := src.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: sel})
		if err != nil {
			return false, err.Error()
		}
		running, refused := map[string]int{}, 0
		for _, p := range pods.Items {
			if p.Status.Phase == corev1.PodRunning && strings.HasPrefix(p.Spec.NodeName, "fleetlet-") {
				running[clusterOfNode(p.Spec.NodeName)]++
			}
			if c := electedCondition(&p); c != nil && c.Status == corev1.ConditionFalse && strings.Contains(c.Message, "pod anti-affinity over "+v1alpha1.LabelCluster) {
				refused++
			}
		}
		ok := refused == 1 && len(running) == 3
		for _, n := range running {
			ok = ok && n == 1
		}
		return ok, fmt.Sprintf("running by cluster %v, %d refused", running, refused)
	})
}

// A required pod affinity over clusters keeps a group in one cluster: a
// Deployment whose pods select themselves starts in some cluster and
// every replica of the same burst follows the first (the election counts
// the ones chosen just before); a second Deployment that selects the first
// goes where it runs; a third that selects pods running nowhere is
// refused, Elected=False naming the constraint.
func TestAffinityOverClusters(t *testing.T) {
	need(t)
	ns := enabledNamespace(t, "together", sb.ClusterNames()[1:]...)
	ctx := context.Background()
	affinity := func(app string) func(*appsv1.Deployment) {
		return func(d *appsv1.Deployment) {
			d.Spec.Template.Spec.Affinity = &corev1.Affinity{PodAffinity: &corev1.PodAffinity{
				RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
					TopologyKey:   v1alpha1.LabelCluster,
					LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": app}},
				}},
			}}
		}
	}
	group := deployment(t, ns, "group", 4, affinity("group"))
	waitDeploymentRunning(t, ns, "group", 4, 2*time.Minute)
	got := byCluster(t, ctx, ns, group)
	t.Logf("group by cluster: %v", got)
	require.Lenf(t, got, 1, "group by cluster %v, want all 4 in one", got)
	var home string
	for c := range got {
		home = c
	}
	follower := deployment(t, ns, "follower", 2, affinity("group"))
	waitDeploymentRunning(t, ns, "follower", 2, 2*time.Minute)
	followers := byCluster(t, ctx, ns, follower)
	assert.Equalf(t, 2, followers[home], "follower by cluster %v, want both in %s with the group", followers, home)
	orphan := deployment(t, ns, "orphan", 1, affinity("nobody"))
	src := kube(t, sandbox.SourceCluster)
	eventually(t, time.Minute, "the orphan refused, naming the pod affinity", func(ctx context.Context) (bool, string) {
		pods, err := src.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: orphan})
		if err != nil || len(pods.Items) != 1 {
			return false, fmt.Sprintf("%d pods, %v", len(pods.Items), err)
		}
		p := pods.Items[0]
		c := electedCondition(&p)
		if c == nil {
			return false, "no Elected condition, node " + p.Spec.NodeName
		}
		return c.Status == corev1.ConditionFalse && p.Spec.NodeName == "" &&
			strings.Contains(c.Message, "pod affinity over "+v1alpha1.LabelCluster+": no pod matching app=nobody"), c.Message
	})
}

// Target priorities give a fixed order: with cluster-3 above cluster-2
// above the source itself, a 9-replica burst fills cluster-3 first, spills
// the rest into cluster-2 only, and leaves the source, which has room, at
// the lowest priority, empty.
func TestTargetPrioritySpillsOverInOrder(t *testing.T) {
	need(t)
	ctx := context.Background()
	names := sb.ClusterNames()
	first, second, last := names[2], names[1], names[0]
	setPriority(t, first, 20)
	setPriority(t, second, 10)
	time.Sleep(time.Second) // the source's registry reads the change
	// Earlier scenarios' pods may still hold room in the two targets.
	eventually(t, 2*time.Minute, "room for two replicas on every node of "+first+" and "+second, func(ctx context.Context) (bool, string) {
		for _, c := range []string{first, second} {
			if room := nodesWithRoom(t, ctx, c, resource.MustParse("30")); len(room) < 3 {
				return false, fmt.Sprintf("%s: nodes with 30 CPUs free: %v", c, room)
			}
		}
		return true, ""
	})
	ns := enabledNamespace(t, "priority", names[1:]...)
	// 15 CPUs of a 32-CPU node: two per node, six in a cluster of three.
	// Scaled up one replica at a time: in a burst, a higher target may
	// answer no while losing candidates of other replicas still hold its
	// room (docs/design.md, "Cluster-level placement").
	const replicas = 9
	sel := deployment(t, ns, "ordered", 1, cpu("15"))
	for n := int32(1); n <= replicas; n++ {
		scale(t, ns, "ordered", n)
		waitDeploymentRunning(t, ns, "ordered", int(n), time.Minute)
	}
	got := byCluster(t, ctx, ns, sel)
	t.Logf("replicas by cluster: %v", got)
	room := nodesWithRoom(t, ctx, first, resource.MustParse("15"))
	assert.Falsef(t, got[first] == 0 || (got[first] < replicas && len(room) > 0), "%d of %d replicas in %s, the first priority, while its nodes %v have room for one more", got[first], replicas, first, room)
	assert.Falsef(t, got[last] != 0 || got[first]+got[second] != replicas, "replicas by cluster %v: want them all in %s then %s, none in %s (the lowest priority)", got, first, second, last)
}

// setPriority sets a ClusterTarget's spec.priority in the source, and
// takes it back at the end.
func setPriority(t *testing.T, target string, priority int32) {
	t.Helper()
	c := ctrlClient(t, sandbox.SourceCluster)
	set := func(p int32) error {
		var ct v1alpha1.ClusterTarget
		if err := c.Get(context.Background(), client.ObjectKey{Name: target}, &ct); err != nil {
			return err
		}
		patch := client.MergeFrom(ct.DeepCopy())
		ct.Spec.Priority = p
		return c.Patch(context.Background(), &ct, patch)
	}
	require.NoError(t, set(priority))
	t.Cleanup(func() {
		assert.NoErrorf(t, set(0), "resetting the priority of %s", target)
	})
}
