package fleet_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
	"github.com/fleetlet/fleetlet/pkg/proxy"
	"github.com/fleetlet/fleetlet/pkg/source/fleet"
	"github.com/fleetlet/fleetlet/pkg/testenv"
)

// condition returns a condition of a Target or ClusterTarget, nil if it or
// the object is missing.
func (f *fixture) condition(t *testing.T, key proxy.TargetKey, typ string) (*metav1.Condition, *v1alpha1.TargetStatus) {
	t.Helper()
	ctx := context.Background()
	if key.Namespace == "" {
		var ct v1alpha1.ClusterTarget
		if err := f.source.Get(ctx, client.ObjectKey{Name: key.Name}, &ct); err != nil {
			return nil, nil
		}
		return meta.FindStatusCondition(ct.Status.Conditions, typ), &ct.Status
	}
	var tg v1alpha1.Target
	if err := f.source.Get(ctx, client.ObjectKey{Namespace: key.Namespace, Name: key.Name}, &tg); err != nil {
		return nil, nil
	}
	return meta.FindStatusCondition(tg.Status.Conditions, typ), &tg.Status
}

// waitCondition waits for a condition with status and reason whose message
// mentions a string.
func (f *fixture) waitCondition(t *testing.T, key proxy.TargetKey, typ string, status metav1.ConditionStatus, reason, mentions string) *v1alpha1.TargetStatus {
	t.Helper()
	var last *metav1.Condition
	var st *v1alpha1.TargetStatus
	testenv.EventuallyTrue(t, waitTimeout, key.String()+" "+typ+"="+string(status)+"/"+reason, func(context.Context) bool {
		last, st = f.condition(t, key, typ)
		return last != nil && last.Status == status && last.Reason == reason && strings.Contains(last.Message, mentions)
	}, func() string { return "last: " + conditionString(last) })
	return st
}

func conditionString(c *metav1.Condition) string {
	if c == nil {
		return "none"
	}
	return string(c.Status) + "/" + c.Reason + ": " + c.Message
}

// changeSummary applies change to the target's ClusterSummary status now,
// and undo when the test ends (other tests share the target).
func changeSummary(t *testing.T, c client.Client, change, undo func(*v1alpha1.ClusterSummaryStatus)) {
	t.Helper()
	ensureSummary(t, c)
	ctx := context.Background()
	write := func(f func(*v1alpha1.ClusterSummaryStatus)) error {
		var cs v1alpha1.ClusterSummary
		if err := c.Get(ctx, client.ObjectKey{Name: v1alpha1.ClusterSummaryName}, &cs); err != nil {
			return err
		}
		f(&cs.Status)
		return c.Status().Update(ctx, &cs)
	}
	require.NoError(t, write(change))
	t.Cleanup(func() { _ = write(undo) })
}

// setSummary writes the target's ClusterSummary status fields the tests
// use, and clears them when the test ends.
func setSummary(t *testing.T, c client.Client, clusterID string, observed *metav1.Time) {
	t.Helper()
	changeSummary(t, c,
		func(s *v1alpha1.ClusterSummaryStatus) { s.ClusterID, s.ObservedTime = clusterID, observed },
		func(s *v1alpha1.ClusterSummaryStatus) { s.ClusterID, s.ObservedTime = "", nil })
}

// A ClusterTarget <ns>-x and a Target x in namespace <ns> map to one virtual
// node name: the older (the one holding the name) keeps it; the newer is
// refused with NodeNameTaken naming the older and gets no node, and takes
// the name once the older is gone. Before: the newer was refused in a log
// line only and said Ready. The first attempt at this (877f361, reverted)
// failed 1 run in 6 because it ranked by creationTimestamp, which has
// one-second resolution, and broke ties by key ("ns-x" < "ns/x"): a
// ClusterTarget created within the second of the Target won the name the
// Target already held. Holding the name (status.virtualNodeName) now ranks
// first (TestClaimOrder pins the tie).
func TestNodeNameTakenRefusesTheNewer(t *testing.T) {
	f := start(t)
	ensureSummary(t, f.target)
	ctx := context.Background()
	f.putSecret(t, "c", testenv.Kubeconfig(t, targetEnv.Config, "default", ""))
	f.createTarget(t, "x", "c")
	f.waitReady(t, "x", metav1.ConditionTrue, v1alpha1.ReasonConnected)
	older := proxy.TargetKey{Namespace: f.ns, Name: "x"}

	ct := &v1alpha1.ClusterTarget{
		ObjectMeta: metav1.ObjectMeta{Name: f.ns + "-x"},
		Spec:       v1alpha1.TargetSpec{KubeconfigSecret: &v1alpha1.KubeconfigSecretReference{Name: "c", Namespace: f.ns}},
	}
	require.NoError(t, f.source.Create(ctx, ct))
	t.Cleanup(func() { forceDelete(t, f.source, ct) })
	newer := proxy.TargetKey{Name: ct.Name}
	st := f.waitCondition(t, newer, v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonNodeNameTaken, "Target "+f.ns+"/x")
	require.Empty(t, st.VirtualNodeName, "the refused ClusterTarget names a virtual node")
	if _, ok := f.nodes.get(proxy.TargetKey{Name: ct.Name}); ok {
		assert.Fail(t, "the refused ClusterTarget was given a virtual node")
	}
	if _, ok := f.registry.Get(newer); ok {
		assert.Fail(t, "the refused ClusterTarget is connected")
	}
	// Still so a few passes later: the older keeps its name and node.
	time.Sleep(2 * time.Second)
	if s, ok := f.nodes.get(proxy.TargetKey{Namespace: f.ns, Name: "x"}); !ok || !s.Ready {
		assert.Failf(t, "the older Target lost its node", "the older Target lost its node: %+v %t", s, ok)
	}
	f.waitReady(t, "x", metav1.ConditionTrue, v1alpha1.ReasonConnected)

	require.NoError(t, f.source.Delete(ctx, &v1alpha1.Target{ObjectMeta: metav1.ObjectMeta{Namespace: older.Namespace, Name: older.Name}}))
	st = f.waitCondition(t, newer, v1alpha1.ConditionReady, metav1.ConditionTrue, v1alpha1.ReasonConnected, "")
	require.Equal(t, proxy.NodeName(proxy.TargetKey{Name: ct.Name}), st.VirtualNodeName)
}

// Two Targets that reach one cluster (the same ClusterSummary clusterID):
// the one registered first stays Ready, the newer is refused with
// DuplicateCluster naming it — its Health NotReady, so nothing elects
// there — and takes over once the first is gone. Before: both were Ready
// and both saw the same chaperons (the loser loop of one deleted the
// other's elected chaperon on every pass).
func TestSameClusterRefusesTheNewer(t *testing.T) {
	f := start(t)
	setSummary(t, f.target, "cluster-uid-1", nil)
	ctx := context.Background()
	f.putSecret(t, "c", testenv.Kubeconfig(t, targetEnv.Config, "default", ""))
	f.createTarget(t, "first", "c")
	f.waitReady(t, "first", metav1.ConditionTrue, v1alpha1.ReasonConnected)

	f.createTarget(t, "second", "c")
	second := proxy.TargetKey{Namespace: f.ns, Name: "second"}
	f.waitCondition(t, second, v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonDuplicateCluster, "Target "+f.ns+"/first")
	cl, ok := f.registry.Get(second)
	require.True(t, ok, "the refused Target keeps its connection (its probes keep its identity known)")
	require.False(t, cl.Health().Ready, "the refused Target's Health is Ready")
	if s, ok := f.nodes.get(proxy.TargetKey{Namespace: f.ns, Name: "second"}); ok && s.Ready {
		assert.Fail(t, "the refused Target's virtual node is Ready")
	}
	time.Sleep(2 * time.Second)
	f.waitReady(t, "first", metav1.ConditionTrue, v1alpha1.ReasonConnected)

	require.NoError(t, f.source.Delete(ctx, &v1alpha1.Target{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "first"}}))
	f.waitCondition(t, second, v1alpha1.ConditionReady, metav1.ConditionTrue, v1alpha1.ReasonConnected, "")
}

// A target whose ClusterSummary stops being renewed (its fleetlet is down)
// gets SummaryStale=True and no new election (Cluster.SummaryStale), while
// it stays Ready and its virtual node too: a fleetlet outage never evicts
// what runs there. Renewed again, it turns SummaryStale=False. Before: the
// source could not tell, and kept electing there.
func TestStaleSummary(t *testing.T) {
	f := start(t, func(o *fleet.Options) { o.SummaryStaleAfter = 2 * time.Second })
	now := metav1.NewTime(time.Now().Add(-time.Hour)).Rfc3339Copy()
	setSummary(t, f.target, "", &now)
	f.putSecret(t, "c", testenv.Kubeconfig(t, targetEnv.Config, "default", ""))
	f.createTarget(t, "quiet", "c")
	key := proxy.TargetKey{Namespace: f.ns, Name: "quiet"}
	f.waitCondition(t, key, v1alpha1.ConditionSummaryStale, metav1.ConditionTrue, v1alpha1.ReasonSummaryNotRenewed, "no new election")
	f.waitReady(t, "quiet", metav1.ConditionTrue, v1alpha1.ReasonConnected)
	cl, ok := f.registry.Get(key)
	require.True(t, ok)
	require.True(t, cl.SummaryStale())
	require.True(t, cl.Health().Ready, "a stale summary made the target NotReady")
	s, ok := f.nodes.get(proxy.TargetKey{Namespace: f.ns, Name: "quiet"})
	require.True(t, ok && s.Ready, "the virtual node of a target whose fleetlet is down is not Ready: %+v", s)

	// Renewed every second, as the target's fleetlet would.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		for ctx.Err() == nil {
			var cs v1alpha1.ClusterSummary
			if f.target.Get(ctx, client.ObjectKey{Name: v1alpha1.ClusterSummaryName}, &cs) == nil {
				at := metav1.Now().Rfc3339Copy()
				cs.Status.ObservedTime = &at
				_ = f.target.Status().Update(ctx, &cs)
			}
			time.Sleep(time.Second)
		}
	}()
	f.waitCondition(t, key, v1alpha1.ConditionSummaryStale, metav1.ConditionFalse, v1alpha1.ReasonSummaryRenewed, "")
	require.False(t, cl.SummaryStale())
}

// A virtual node whose Target is gone — deleted while no manager ran — is
// deleted when the registry starts; a node whose Target exists, and a node
// without fleetlet's target annotation, are left. Before: such a node
// stayed for good, with its proxies.
func TestOrphanNodesCollectedAtStart(t *testing.T) {
	testenv.Need(t, sourceEnv)
	src, err := client.New(sourceEnv.Config, client.Options{Scheme: testenv.Scheme()})
	require.NoError(t, err)
	ctx := context.Background()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "orphans-"}}
	require.NoError(t, src.Create(ctx, ns))
	live := &v1alpha1.Target{ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "live"},
		Spec: v1alpha1.TargetSpec{KubeconfigSecret: &v1alpha1.KubeconfigSecretReference{Name: "none"}}}
	require.NoError(t, src.Create(ctx, live))
	t.Cleanup(func() { forceDelete(t, src, live) })
	node := func(key proxy.TargetKey, annotate bool) proxy.TargetKey {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: proxy.NodeName(key), Labels: map[string]string{v1alpha1.LabelNodeType: v1alpha1.NodeTypeVirtualKubelet}}}
		if annotate {
			n.Annotations = map[string]string{v1alpha1.AnnotationTarget: key.String()}
		}
		require.NoError(t, src.Create(ctx, n))
		t.Cleanup(func() { _ = src.Delete(context.Background(), n) })
		return key
	}
	gone := node(proxy.TargetKey{Namespace: ns.Name, Name: "gone"}, true)
	goneCluster := node(proxy.TargetKey{Name: ns.Name + "-gone-cluster"}, true)
	kept := node(proxy.TargetKey{Namespace: ns.Name, Name: "live"}, true)
	unannotated := node(proxy.TargetKey{Namespace: ns.Name, Name: "foreign"}, false)

	f := start(t)
	testenv.EventuallyTrue(t, waitTimeout, "the nodes of the deleted targets removed", func(context.Context) bool {
		f.nodes.mu.Lock()
		defer f.nodes.mu.Unlock()
		return f.nodes.removed[gone] > 0 && f.nodes.removed[goneCluster] > 0
	})
	f.nodes.mu.Lock()
	defer f.nodes.mu.Unlock()
	require.Zero(t, f.nodes.removed[kept], "the node of a live Target was removed")
	require.Zero(t, f.nodes.removed[unannotated], "a node without fleetlet's target annotation was removed")
}

// forceDelete deletes a Target or ClusterTarget, drain finalizer and all.
func forceDelete(t *testing.T, c client.Client, obj client.Object) {
	t.Helper()
	ctx := context.Background()
	if err := c.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
		return
	}
	obj.SetFinalizers(nil)
	_ = c.Update(ctx, obj)
	_ = c.Delete(ctx, obj)
}

// A refused registration never had a node nor an election: it gets no
// drain finalizer, and deleting it evicts nothing and ends at once. Before:
// a ClusterTarget refused as NodeNameTaken still got the drain finalizer,
// and its drain evicted every proxy on the other registration's node (the
// same name) and never ended; one refused as DuplicateCluster got a node
// and a finalizer, and its drain waited for it to turn Ready, for good.
func TestRefusedRegistrationsLeaveTheHolderAlone(t *testing.T) {
	f := start(t)
	setSummary(t, f.target, "cluster-uid-refused", nil)
	ctx := context.Background()
	f.putSecret(t, "c", testenv.Kubeconfig(t, targetEnv.Config, "default", ""))
	f.createTarget(t, "x", "c")
	f.waitReady(t, "x", metav1.ConditionTrue, v1alpha1.ReasonConnected)
	node := proxy.NodeName(proxy.TargetKey{Namespace: f.ns, Name: "x"})
	bound := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "bound"},
		Spec:       corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "app", Image: "busybox"}}},
	}
	require.NoError(t, f.source.Create(ctx, bound))

	ct := &v1alpha1.ClusterTarget{
		ObjectMeta: metav1.ObjectMeta{Name: f.ns + "-x"},
		Spec:       v1alpha1.TargetSpec{KubeconfigSecret: &v1alpha1.KubeconfigSecretReference{Name: "c", Namespace: f.ns}},
	}
	require.NoError(t, f.source.Create(ctx, ct))
	t.Cleanup(func() { forceDelete(t, f.source, ct) })
	f.waitCondition(t, proxy.TargetKey{Name: ct.Name}, v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonNodeNameTaken, "")

	f.createTarget(t, "dup", "c")
	dup := proxy.TargetKey{Namespace: f.ns, Name: "dup"}
	f.waitCondition(t, dup, v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonDuplicateCluster, "Target "+f.ns+"/x")
	_, ok := f.nodes.get(proxy.TargetKey{Namespace: f.ns, Name: "dup"})
	require.False(t, ok, "the Target refused as DuplicateCluster was given a virtual node")

	for _, obj := range []client.Object{
		&v1alpha1.ClusterTarget{ObjectMeta: metav1.ObjectMeta{Name: ct.Name}},
		&v1alpha1.Target{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "dup"}},
	} {
		require.NoError(t, f.source.Get(ctx, client.ObjectKeyFromObject(obj), obj))
		require.NotContains(t, obj.GetFinalizers(), v1alpha1.FinalizerDrain, "%s %s: a refused registration has the drain finalizer", obj.GetObjectKind().GroupVersionKind().Kind, obj.GetName())
		require.NoError(t, f.source.Delete(ctx, obj))
		testenv.EventuallyTrue(t, waitTimeout, obj.GetName()+" gone", func(ctx context.Context) bool {
			return apierrors.IsNotFound(f.source.Get(ctx, client.ObjectKeyFromObject(obj), obj))
		})
	}
	require.NoError(t, f.source.Get(ctx, client.ObjectKeyFromObject(bound), bound))
	require.Nil(t, bound.DeletionTimestamp, "a proxy on the holder's node was evicted")
	f.waitReady(t, "x", metav1.ConditionTrue, v1alpha1.ReasonConnected)
	s, ok := f.nodes.get(proxy.TargetKey{Namespace: f.ns, Name: "x"})
	require.True(t, ok && s.Ready, "the holder lost its node")
}

// setSchedulerCondition sets the CandidateSchedulerRunning condition of the
// target's ClusterSummary, as its fleetlet would, until the test ends.
func setSchedulerCondition(t *testing.T, c client.Client, status metav1.ConditionStatus, reason, msg string) {
	t.Helper()
	changeSummary(t, c,
		func(s *v1alpha1.ClusterSummaryStatus) {
			meta.SetStatusCondition(&s.Conditions, metav1.Condition{Type: v1alpha1.ConditionCandidateScheduler, Status: status, Reason: reason, Message: msg})
		},
		func(s *v1alpha1.ClusterSummaryStatus) {
			meta.RemoveStatusCondition(&s.Conditions, v1alpha1.ConditionCandidateScheduler)
		})
}

// A target whose ClusterSummary says its candidate scheduler does not run
// shows it (CandidateSchedulerRunning=False, the summary's reason and
// message) and takes no new election (Cluster.SchedulerDown), while it
// stays Ready; once the scheduler runs again, both turn back. Before: the
// source read nothing of it, and a target whose scheduler had stopped
// looked the emptiest and drew every new candidate, which waited there.
func TestSchedulerDownTakesNoElection(t *testing.T) {
	f := start(t)
	setSchedulerCondition(t, f.target, metav1.ConditionFalse, v1alpha1.ReasonLeaseExpired, "the candidate scheduler's Lease was not renewed")
	f.putSecret(t, "c", testenv.Kubeconfig(t, targetEnv.Config, "default", ""))
	f.createTarget(t, "nosched", "c")
	key := proxy.TargetKey{Namespace: f.ns, Name: "nosched"}
	f.waitCondition(t, key, v1alpha1.ConditionCandidateScheduler, metav1.ConditionFalse, v1alpha1.ReasonLeaseExpired, "not renewed")
	f.waitReady(t, "nosched", metav1.ConditionTrue, v1alpha1.ReasonConnected)
	cl, ok := f.registry.Get(key)
	require.True(t, ok)
	require.True(t, cl.SchedulerDown())

	setSchedulerCondition(t, f.target, metav1.ConditionTrue, v1alpha1.ReasonLeaseHeld, "the candidate scheduler holds its Lease")
	f.waitCondition(t, key, v1alpha1.ConditionCandidateScheduler, metav1.ConditionTrue, v1alpha1.ReasonLeaseHeld, "holds its Lease")
	require.False(t, cl.SchedulerDown())
}
