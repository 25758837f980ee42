package summary

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
	"github.com/fleetlet/fleetlet/pkg/indexer"
	"github.com/fleetlet/fleetlet/pkg/testenv"
)

// convergeTimeout bounds every wait for the controller: it reacts to
// events, so a few seconds are plenty even on a loaded machine.
const convergeTimeout = 30 * time.Second

// testHeartbeat is the observedTime renewal period of the tests' controller.
const testHeartbeat = 2 * time.Second

// The summary names the cluster (its kube-system Namespace's UID), and its
// observedTime is renewed every heartbeat though nothing else changes, so
// that a source can tell a target whose fleetlet is down. Before: neither
// was there; a stopped fleetlet left a summary that looked current.
func TestClusterSummaryIdentityAndHeartbeat(t *testing.T) {
	testenv.Need(t, env)
	c := newClient(t)
	startManager(t)
	var ks corev1.Namespace
	require.NoError(t, c.Get(t.Context(), client.ObjectKey{Name: metav1.NamespaceSystem}, &ks))
	var first metav1.Time
	waitFor(t, "a summary with the cluster's identity and an observedTime", func() string {
		cs := &v1alpha1.ClusterSummary{}
		if err := c.Get(t.Context(), client.ObjectKey{Name: v1alpha1.ClusterSummaryName}, cs); err != nil {
			return err.Error()
		}
		if cs.Status.ClusterID != string(ks.UID) {
			return fmt.Sprintf("clusterID %q, want the kube-system UID %q", cs.Status.ClusterID, ks.UID)
		}
		if cs.Status.ObservedTime == nil {
			return "no observedTime"
		}
		first = *cs.Status.ObservedTime
		return ""
	})
	waitFor(t, "observedTime renewed", func() string {
		cs := &v1alpha1.ClusterSummary{}
		if err := c.Get(t.Context(), client.ObjectKey{Name: v1alpha1.ClusterSummaryName}, cs); err != nil {
			return err.Error()
		}
		if cs.Status.ObservedTime == nil || !cs.Status.ObservedTime.After(first.Time) {
			return fmt.Sprintf("observedTime %v, not after %v", cs.Status.ObservedTime, first)
		}
		return ""
	})
}

// TestClusterSummaryController runs the controller in a manager against a
// real kube-apiserver and follows the ClusterSummary through the life of a
// small cluster. The steps share state, so they run in order.
func TestClusterSummaryController(t *testing.T) {
	testenv.Need(t, env)
	ctx := t.Context()
	c := newClient(t)
	mgrClient := startManager(t)
	ns := createNamespace(t, c)

	step := func(name string, f func(t *testing.T)) {
		if !t.Run(name, f) {
			t.FailNow()
		}
	}
	zero := resources("cpu", "0", "memory", "0", "pods", "0")

	step("an empty cluster gets an empty, Ready summary", func(t *testing.T) {
		waitForSummary(t, c, v1alpha1.ClusterSummaryStatus{Requested: zero})
	})

	createNode(t, c, makeNode("n1").
		capacity("cpu", "4", "memory", "8Gi", "pods", "110").
		allocatable("cpu", "3800m", "memory", "7Gi", "pods", "110").
		label("topology.kubernetes.io/region", "r1").label("topology.kubernetes.io/zone", "z1").obj())
	createNode(t, c, makeNode("n2").
		capacity("cpu", "2", "memory", "4Gi", "pods", "110").
		label("topology.kubernetes.io/region", "r1").label("topology.kubernetes.io/zone", "z2").obj())
	bothNodes := v1alpha1.ClusterSummaryStatus{
		NodeCount:   2,
		Capacity:    resources("cpu", "6", "memory", "12Gi", "pods", "220"),
		Allocatable: resources("cpu", "5800m", "memory", "11Gi", "pods", "220"),
		Requested:   zero,
		LargestFree: resources("cpu", "3800m", "memory", "7Gi", "pods", "110"),
		Labels:      map[string]string{"topology.kubernetes.io/region": "r1"},
	}
	step("nodes are summed", func(t *testing.T) {
		waitForSummary(t, c, bothNodes)
	})

	web := createPod(t, c, makePod("web", "n1").container("cpu", "500m", "memory", "1Gi").obj(), ns)
	createPod(t, c, makePod("delegate-a", "n2").source("src-a").
		sidecar("cpu", "100m").container("cpu", "200m", "memory", "256Mi").obj(), ns)
	createPod(t, c, makePod("delegate-b", "n1").source("src-b").
		init("cpu", "1").container("cpu", "100m").obj(), ns)
	createPod(t, c, makePod("unbound", "").container("cpu", "2").obj(), ns)
	withPods := bothNodes
	withPods.Requested = resources("cpu", "1800m", "memory", "1280Mi", "pods", "3")
	// n1 has 2300m, 6Gi and 108 pods free; n2 1700m, 3840Mi and 109.
	withPods.LargestFree = resources("cpu", "2300m", "memory", "6Gi", "pods", "109")
	withPods.RequestedBySource = map[string]corev1.ResourceList{
		"src-a": resources("cpu", "300m", "memory", "256Mi", "pods", "1"),
		"src-b": resources("cpu", "1", "memory", "0", "pods", "1"),
	}
	step("bound pods are requested, by source too", func(t *testing.T) {
		waitForSummary(t, c, withPods)
	})

	step("a write happens only when something changed", func(t *testing.T) {
		// Once the manager's cache holds what the API server holds, a
		// reconcile changes nothing: not even the condition's time.
		before := getSummary(t, c)
		waitFor(t, "the manager's cache to catch up", func() string {
			cached := &v1alpha1.ClusterSummary{}
			if err := mgrClient.Get(ctx, client.ObjectKeyFromObject(before), cached); err != nil {
				return err.Error()
			}
			if cached.ResourceVersion != before.ResourceVersion {
				return fmt.Sprintf("cached resourceVersion %s, want %s", cached.ResourceVersion, before.ResourceVersion)
			}
			return ""
		})
		counted := &writeCounter{Client: mgrClient}
		r := &ClusterSummaryReconciler{Client: counted, devices: true}
		for range 3 {
			_, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: types.NamespacedName{Name: v1alpha1.ClusterSummaryName}})
			require.NoError(t, err)
		}
		// A server-side apply of the same status would leave the
		// resourceVersion alone: count the requests too.
		if n := counted.writes.Load(); n != 0 {
			assert.Failf(t, "writes with nothing changed", "%d writes with nothing changed, want none", n)
		}
		if after := getSummary(t, c); after.ResourceVersion != before.ResourceVersion {
			assert.Failf(t, "resourceVersion changed", "resourceVersion went from %s to %s with nothing changed; managed fields now:\n%v",
				before.ResourceVersion, after.ResourceVersion, after.ManagedFields)
		}
	})

	patchNode(t, c, "n2", func(n *corev1.Node) { n.Spec.Unschedulable = true })
	cordoned := v1alpha1.ClusterSummaryStatus{
		NodeCount:   1,
		Capacity:    resources("cpu", "4", "memory", "8Gi", "pods", "110"),
		Allocatable: resources("cpu", "3800m", "memory", "7Gi", "pods", "110"),
		Requested:   resources("cpu", "1500m", "memory", "1Gi", "pods", "2"),
		LargestFree: resources("cpu", "2300m", "memory", "6Gi", "pods", "108"),
		RequestedBySource: map[string]corev1.ResourceList{
			"src-b": resources("cpu", "1", "memory", "0", "pods", "1"),
		},
		Labels: map[string]string{
			corev1.LabelHostname:            "n1",
			"topology.kubernetes.io/region": "r1",
			"topology.kubernetes.io/zone":   "z1",
		},
	}
	step("a cordoned node and its pods leave the summary", func(t *testing.T) {
		waitForSummary(t, c, cordoned)
	})

	setPodPhase(t, c, web, corev1.PodSucceeded)
	finished := cordoned
	finished.Requested = resources("cpu", "1", "memory", "0", "pods", "1")
	finished.LargestFree = resources("cpu", "2800m", "memory", "7Gi", "pods", "109")
	step("a finished pod no longer requests anything", func(t *testing.T) {
		waitForSummary(t, c, finished)
	})

	// A virtual node with a proxy pod, and a real node that is not Ready:
	// neither may count. Uncordoning n2 afterwards gives the controller
	// something to show, so that the wait cannot pass before it has seen
	// the two new nodes.
	createNode(t, c, makeNode("fleetlet-source-1").virtual().
		capacity("cpu", "1000", "memory", "1Ti", "pods", "10000").obj())
	createPod(t, c, makePod("proxy", "fleetlet-source-1").source("src-a").container("cpu", "1").obj(), ns)
	createNode(t, c, makeNode("n3").ready(corev1.ConditionFalse).
		capacity("cpu", "64", "memory", "256Gi", "pods", "110").label("topology.kubernetes.io/region", "r1").obj())
	createPod(t, c, makePod("on-n3", "n3").container("cpu", "1").obj(), ns)
	patchNode(t, c, "n2", func(n *corev1.Node) { n.Spec.Unschedulable = false })
	realNodes := bothNodes
	realNodes.Requested = resources("cpu", "1300m", "memory", "256Mi", "pods", "2")
	realNodes.LargestFree = resources("cpu", "2800m", "memory", "7Gi", "pods", "109")
	realNodes.RequestedBySource = map[string]corev1.ResourceList{
		"src-a": resources("cpu", "300m", "memory", "256Mi", "pods", "1"),
		"src-b": resources("cpu", "1", "memory", "0", "pods", "1"),
	}
	step("virtual and not-ready nodes are excluded, with their pods", func(t *testing.T) {
		waitForSummary(t, c, realNodes)
	})

	step("changed by someone else, the summary is put right", func(t *testing.T) {
		cs := getSummary(t, c)
		patch := client.MergeFrom(cs.DeepCopy())
		cs.Status.NodeCount = 42
		cs.Status.Labels["tampered"] = "yes"
		cs.Status.RequestedBySource["intruder"] = resources("cpu", "1")
		require.NoError(t, c.Status().Patch(ctx, cs, patch, client.FieldOwner("kubectl-edit")))
		waitForSummary(t, c, realNodes)
	})

	step("a deleted summary comes back", func(t *testing.T) {
		old := getSummary(t, c)
		require.NoError(t, c.Delete(ctx, old))
		got := waitForSummary(t, c, realNodes)
		assert.Falsef(t, got.UID == old.UID, "ClusterSummary still has UID %s after deletion", old.UID)
	})

	// Devices: two on n1, one on n3 (not Ready), one of n1's allocated.
	for _, obj := range []client.Object{
		deviceClass("gpu.example.com", `device.driver == "gpu.example.com"`),
		named(slice("gpu.example.com", "n1", 1, "a0", "a1"), "n1-gpus"),
		named(slice("gpu.example.com", "n3", 1, "a2"), "n3-gpus"),
	} {
		require.NoError(t, c.Create(ctx, obj))
	}
	claim := &resourcev1.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "gpu", Namespace: ns},
		Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{Requests: []resourcev1.DeviceRequest{
			{Name: "r", Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: "gpu.example.com"}}}}},
	}
	require.NoError(t, c.Create(ctx, claim))
	claim.Status = allocatedClaim("gpu.example.com", "n1", "a1").Status
	require.NoError(t, c.Status().Update(ctx, claim))
	withDevices := realNodes
	withDevices.DeviceClasses = []v1alpha1.DeviceClassSummary{{Name: "gpu.example.com", Devices: 2, Allocated: 1}}
	step("devices are counted per class, on schedulable nodes", func(t *testing.T) {
		waitForSummary(t, c, withDevices)
	})
	require.NoError(t, c.Delete(ctx, deviceClass("gpu.example.com", "")))
	step("the last class gone, no class is served", func(t *testing.T) {
		waitForSummary(t, c, realNodes)
	})
}

func named[T client.Object](obj T, name string) T {
	obj.SetName(name)
	return obj
}

// newClient returns a client that reads from the API server directly.
func newClient(t *testing.T) client.Client {
	t.Helper()
	c, err := client.New(env.Config, client.Options{Scheme: scheme})
	require.NoError(t, err)
	return c
}

// startManager runs a manager with the ClusterSummary controller until the
// test ends, and returns its (cached) client.
func startManager(t *testing.T) client.Client {
	t.Helper()
	return startManagerWith(t, types.NamespacedName{})
}

// startManagerWith runs the controller, reading the candidate scheduler's
// Lease lease (none: an empty Name), for the rest of the test.
func startManagerWith(t *testing.T, lease types.NamespacedName) client.Client {
	t.Helper()
	mgr := testenv.NewManager(t, env.Config, testenv.ManagerOptions{Verbosity: 1})
	// What logs through controller-runtime's global logger goes to the
	// test too.
	ctrl.SetLogger(mgr.GetLogger())
	ctx := mgr.Context()
	require.NoError(t, indexer.Register(ctx, mgr.GetFieldIndexer(), indexer.ActivePodNodeName))
	require.NoError(t, (&ClusterSummaryReconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Heartbeat: testHeartbeat, SchedulerLease: lease}).SetupWithManager(ctx, mgr))
	mgr.Run()
	return mgr.GetClient()
}

func createNamespace(t *testing.T, c client.Client) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "summary-"}}
	require.NoError(t, c.Create(t.Context(), ns))
	return ns.Name
}

// createNode creates node, then sets its status (capacity, allocatable,
// conditions) through the status subresource, as a kubelet does.
func createNode(t *testing.T, c client.Client, node *corev1.Node) {
	t.Helper()
	status := node.Status
	require.NoError(t, c.Create(t.Context(), node))
	node.Status = status
	require.NoErrorf(t, c.Status().Update(t.Context(), node), "setting the status of node %s", node.Name)
	t.Cleanup(func() {
		err := c.Delete(context.Background(), node)
		assert.Falsef(t, client.IgnoreNotFound(err) != nil, "deleting node %s: %v", node.Name, err)
	})
}

func patchNode(t *testing.T, c client.Client, name string, change func(*corev1.Node)) {
	t.Helper()
	node := &corev1.Node{}
	require.NoError(t, c.Get(t.Context(), client.ObjectKey{Name: name}, node))
	patch := client.MergeFrom(node.DeepCopy())
	change(node)
	require.NoErrorf(t, c.Patch(t.Context(), node, patch), "patching node %s", name)
}

func createPod(t *testing.T, c client.Client, pod *corev1.Pod, namespace string) *corev1.Pod {
	t.Helper()
	pod.Namespace = namespace
	pod.Status = corev1.PodStatus{}
	require.NoError(t, c.Create(t.Context(), pod))
	return pod
}

func setPodPhase(t *testing.T, c client.Client, pod *corev1.Pod, phase corev1.PodPhase) {
	t.Helper()
	patch := client.MergeFrom(pod.DeepCopy())
	pod.Status.Phase = phase
	require.NoErrorf(t, c.Status().Patch(t.Context(), pod, patch), "setting the phase of pod %s", pod.Name)
}

func getSummary(t *testing.T, c client.Client) *v1alpha1.ClusterSummary {
	t.Helper()
	cs := &v1alpha1.ClusterSummary{}
	require.NoError(t, c.Get(t.Context(), client.ObjectKey{Name: v1alpha1.ClusterSummaryName}, cs))
	return cs
}

// waitForSummary waits until the ClusterSummary's status is want (the Ready
// condition aside) and Ready is True for its generation, and returns it.
func waitForSummary(t *testing.T, c client.Client, want v1alpha1.ClusterSummaryStatus) *v1alpha1.ClusterSummary {
	t.Helper()
	var got *v1alpha1.ClusterSummary
	waitFor(t, "the ClusterSummary", func() string {
		cs := &v1alpha1.ClusterSummary{}
		if err := c.Get(t.Context(), client.ObjectKey{Name: v1alpha1.ClusterSummaryName}, cs); err != nil {
			if apierrors.IsNotFound(err) {
				return "ClusterSummary not found"
			}
			require.NoError(t, err)
		}
		status := cs.Status.DeepCopy()
		status.Conditions = nil
		// The test's API server serves resource.k8s.io/v1.
		want.DevicesCounted = true
		// Checked on their own (TestClusterSummaryIdentityAndHeartbeat).
		status.ClusterID, status.ObservedTime = "", nil
		if diff := cmp.Diff(want, *status, quantityEqual); diff != "" {
			return fmt.Sprintf("status (-want,+got):\n%s", diff)
		}
		ready := meta.FindStatusCondition(cs.Status.Conditions, v1alpha1.ConditionReady)
		switch {
		case ready == nil:
			return "no Ready condition"
		case ready.Status != metav1.ConditionTrue || ready.Reason != ReasonSummarized:
			return fmt.Sprintf("Ready=%s reason %s, want True reason %s", ready.Status, ready.Reason, ReasonSummarized)
		case ready.ObservedGeneration != cs.Generation:
			return fmt.Sprintf("Ready observedGeneration %d, generation %d", ready.ObservedGeneration, cs.Generation)
		}
		if len(cs.Status.Conditions) != 1 {
			return fmt.Sprintf("conditions %v, want Ready only", cs.Status.Conditions)
		}
		got = cs
		return ""
	})
	return got
}

// waitFor calls check until it returns "" and fails the test with check's
// last answer after convergeTimeout.
func waitFor(t *testing.T, what string, check func() string) {
	t.Helper()
	deadline := time.Now().Add(convergeTimeout)
	for {
		last := check()
		if last == "" {
			return
		}
		require.Falsef(t, time.Now().After(deadline), "waited %v for %s: %s", convergeTimeout, what, last)
		select {
		case <-t.Context().Done():
			require.FailNowf(t, "test ended", "test ended waiting for %s: %s", what, last)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// writeCounter counts the writes made through a client, status included.
type writeCounter struct {
	client.Client
	writes atomic.Int32
}

func (c *writeCounter) Create(ctx context.Context, obj client.Object, opts ...client.CreateOption) error {
	c.writes.Add(1)
	return c.Client.Create(ctx, obj, opts...)
}

func (c *writeCounter) Update(ctx context.Context, obj client.Object, opts ...client.UpdateOption) error {
	c.writes.Add(1)
	return c.Client.Update(ctx, obj, opts...)
}

func (c *writeCounter) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
	c.writes.Add(1)
	return c.Client.Patch(ctx, obj, patch, opts...)
}

func (c *writeCounter) Apply(ctx context.Context, obj runtime.ApplyConfiguration, opts ...client.ApplyOption) error {
	c.writes.Add(1)
	return c.Client.Apply(ctx, obj, opts...)
}

func (c *writeCounter) Status() client.SubResourceWriter {
	return &statusWriteCounter{SubResourceWriter: c.Client.Status(), writes: &c.writes}
}

type statusWriteCounter struct {
	client.SubResourceWriter
	writes *atomic.Int32
}

func (c *statusWriteCounter) Update(ctx context.Context, obj client.Object, opts ...client.SubResourceUpdateOption) error {
	c.writes.Add(1)
	return c.SubResourceWriter.Update(ctx, obj, opts...)
}

func (c *statusWriteCounter) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
	c.writes.Add(1)
	return c.SubResourceWriter.Patch(ctx, obj, patch, opts...)
}

func (c *statusWriteCounter) Apply(ctx context.Context, obj runtime.ApplyConfiguration, opts ...client.SubResourceApplyOption) error {
	c.writes.Add(1)
	return c.SubResourceWriter.Apply(ctx, obj, opts...)
}
