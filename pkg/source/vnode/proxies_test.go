package vnode

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
	clocktesting "k8s.io/utils/clock/testing"
)

// newTestTracker returns a tracker whose informers are never started: tests
// fill their stores directly, and record the nodes it reports as changed.
func newTestTracker(t *testing.T, clk *clocktesting.FakeClock) (*proxyTracker, *[]string) {
	t.Helper()
	var changed []string
	tr, err := newProxyTracker(fake.NewClientset(), clk, func(n string) { changed = append(changed, n) }, nil)
	require.NoError(t, err)
	return tr, &changed
}

func stripped(t *testing.T, p *corev1.Pod) *corev1.Pod {
	t.Helper()
	out, err := stripPod(p)
	require.NoError(t, err)
	return out.(*corev1.Pod)
}

func TestTrackerRequests(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	tr, _ := newTestTracker(t, clk)
	const node = "fleetlet-c"
	unbound := tr.pinned.GetIndexer()
	for _, p := range []*corev1.Pod{
		newPod("pinned").container("c", rl("cpu", "1", "memory", "1Gi")).pinnedTo(node).obj(),
		newPod("pinned-elsewhere").container("c", rl("cpu", "2")).pinnedTo("fleetlet-other").obj(),
		// Pinned by hostname but not a proxy (no finalizer): not counted.
		func() *corev1.Pod {
			p := newPod("not-a-proxy").container("c", rl("cpu", "4")).obj()
			p.Spec.NodeSelector = map[string]string{"kubernetes.io/hostname": node}
			return p
		}(),
		newPod("unpinned").container("c", rl("cpu", "8")).obj(),
	} {
		require.NoError(t, unbound.Add(stripped(t, p)))
	}
	bound := cache.NewStore(cache.MetaNamespaceKeyFunc)
	// Any pod bound to the node counts: the scheduler counts them all.
	require.NoError(t, bound.Add(stripped(t, newPod("bound").container("c", rl("cpu", "250m")).boundTo(node).obj())))

	tr.bound[node] = bound
	got := tr.requests(node)
	assert.Empty(t, cmp.Diff(rl("cpu", "1250m", "memory", "1Gi", "pods", "2"), got, quantityEqual), "requests (-want,+got)")
}

// A pinned proxy that leaves the unbound pods (it was bound) counts until
// the node's bound pods show it, however the two watches are ordered.
func TestTrackerHandoff(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	tr, changed := newTestTracker(t, clk)
	const node = "fleetlet-c"
	p := stripped(t, newPod("p").container("c", rl("cpu", "1")).pinnedTo(node).obj())
	bound := cache.NewStore(cache.MetaNamespaceKeyFunc)
	tr.bound[node] = bound
	want := rl("cpu", "1", "memory", "0", "pods", "1")

	tr.unpinned(p)
	assert.Empty(t, cmp.Diff([]string{node}, *changed), "nodes changed (-want,+got)")
	assert.Empty(t, cmp.Diff(want, tr.requests(node), quantityEqual), "requests between the watches (-want,+got)")
	b := p.DeepCopy()
	b.Spec.NodeName = node
	require.NoError(t, bound.Add(b))
	assert.Empty(t, cmp.Diff(want, tr.requests(node), quantityEqual), "requests once bound (-want,+got), counted twice?")

	// A pod that never shows up as bound (it finished first) stops counting
	// after handoffTTL.
	q := stripped(t, newPod("q").container("c", rl("cpu", "2")).pinnedTo(node).obj())
	tr.unpinned(q)
	clk.Step(handoffTTL + time.Second)
	assert.Empty(t, cmp.Diff(want, tr.requests(node), quantityEqual), "requests after the handoff expired (-want,+got)")

	// A pinned pod deleted while unbound is not handed off.
	r := stripped(t, newPod("r").container("c", rl("cpu", "4")).pinnedTo(node).obj())
	r.DeletionTimestamp = &metav1.Time{Time: clk.Now()}
	tr.unpinned(cache.DeletedFinalStateUnknown{Key: "ns/r", Obj: r})
	assert.Empty(t, cmp.Diff(want, tr.requests(node), quantityEqual), "requests after a pinned pod was deleted (-want,+got)")
}

// The bound pods' watch may also be first: then there is nothing to hand
// off, and a pod that finishes stops counting at once.
func TestTrackerBoundFirst(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	tr, _ := newTestTracker(t, clk)
	const node = "fleetlet-c"
	bound := cache.NewStore(cache.MetaNamespaceKeyFunc)
	tr.bound[node] = bound
	zero := rl("cpu", "0", "memory", "0", "pods", "0")

	p := stripped(t, newPod("p").container("c", rl("cpu", "1")).pinnedTo(node).obj())
	b := p.DeepCopy()
	b.Spec.NodeName = node
	require.NoError(t, bound.Add(b))
	tr.boundChanged(node, b)
	tr.unpinned(p)
	require.NoError(t, bound.Delete(b))
	tr.boundChanged(node, b)
	assert.Empty(t, cmp.Diff(zero, tr.requests(node), quantityEqual), "requests after the pod finished (-want,+got)")

	// Handed off, then bound and finished: not counted either.
	q := stripped(t, newPod("q").container("c", rl("cpu", "1")).pinnedTo(node).obj())
	tr.unpinned(q)
	bq := q.DeepCopy()
	bq.Spec.NodeName = node
	tr.boundChanged(node, bq)
	tr.boundChanged(node, cache.DeletedFinalStateUnknown{Key: "ns/q", Obj: bq})
	assert.Empty(t, cmp.Diff(zero, tr.requests(node), quantityEqual), "requests after a handed-off pod finished (-want,+got)")
}

func TestStripPodKeepsRequests(t *testing.T) {
	p := newPod("p").
		initContainer("sidecar", rl("cpu", "100m"), true).
		container("c", rl("cpu", "1", "memory", "1Gi")).
		overhead(rl("cpu", "10m")).
		allocated("c", rl("cpu", "2")).
		pinnedTo("fleetlet-c").obj()
	p.Annotations = map[string]string{"multicluster.fleetlet.io/source-spec": "{...}"}
	p.Spec.NodeSelector["type"] = "virtual-kubelet"
	p.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "A", Value: "b"}}
	s := stripped(t, p)
	for _, bound := range []bool{false, true} {
		assert.Empty(t, cmp.Diff(ProxyRequests([]*corev1.Pod{p}, bound), ProxyRequests([]*corev1.Pod{s}, bound), quantityEqual), "bound=%v: requests changed by stripping (-want,+got)", bound)
	}
	assert.Equal(t, "fleetlet-c", pinnedNode(s), "pinned node after stripping")
	assert.Falsef(t, len(s.Annotations) != 0 || s.Spec.Containers[0].Env != nil || len(s.Spec.NodeSelector) != 1, "stripped pod keeps what it does not need: %+v", s)
}
