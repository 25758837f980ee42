package vnode

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
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

// boundOf returns the bound pods of node (their informer never started).
func boundOf(t *testing.T, tr *proxyTracker, node string) *boundPods {
	t.Helper()
	b, err := tr.newBound(node)
	require.NoError(t, err)
	return b
}

func TestTrackerRequests(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	tr, _ := newTestTracker(t, clk)
	const node = "fleetlet-c"
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
		tr.pinnedChanged(nil, stripped(t, p))
	}
	b := boundOf(t, tr, node)
	// Any pod bound to the node counts: the scheduler counts them all.
	tr.boundSet(node, b, stripped(t, newPod("bound").container("c", rl("cpu", "250m")).boundTo(node).obj()))

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
	b := boundOf(t, tr, node)
	want := rl("cpu", "1", "memory", "0", "pods", "1")

	tr.pinnedChanged(nil, p)
	tr.unpinned(p)
	assert.Empty(t, cmp.Diff([]string{node, node}, *changed), "nodes changed (-want,+got)")
	assert.Empty(t, cmp.Diff(want, tr.requests(node), quantityEqual), "requests between the watches (-want,+got)")
	bp := p.DeepCopy()
	bp.Spec.NodeName = node
	tr.boundSet(node, b, bp)
	assert.Empty(t, cmp.Diff(want, tr.requests(node), quantityEqual), "requests once bound (-want,+got), counted twice?")

	// A pod that never shows up as bound (it finished first) stops counting
	// after handoffTTL.
	q := stripped(t, newPod("q").container("c", rl("cpu", "2")).pinnedTo(node).obj())
	tr.pinnedChanged(nil, q)
	tr.unpinned(q)
	clk.Step(handoffTTL + time.Second)
	assert.Empty(t, cmp.Diff(want, tr.requests(node), quantityEqual), "requests after the handoff expired (-want,+got)")

	// A pinned pod deleted while unbound is not handed off.
	r := stripped(t, newPod("r").container("c", rl("cpu", "4")).pinnedTo(node).obj())
	tr.pinnedChanged(nil, r)
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
	b := boundOf(t, tr, node)
	zero := rl("cpu", "0", "memory", "0", "pods", "0")

	p := stripped(t, newPod("p").container("c", rl("cpu", "1")).pinnedTo(node).obj())
	tr.pinnedChanged(nil, p)
	bp := p.DeepCopy()
	bp.Spec.NodeName = node
	tr.boundSet(node, b, bp)
	tr.unpinned(p)
	tr.boundGone(node, b, bp)
	assert.Empty(t, cmp.Diff(zero, tr.requests(node), quantityEqual), "requests after the pod finished (-want,+got)")

	// Handed off, then bound and finished: not counted either.
	q := stripped(t, newPod("q").container("c", rl("cpu", "1")).pinnedTo(node).obj())
	tr.pinnedChanged(nil, q)
	tr.unpinned(q)
	bq := q.DeepCopy()
	bq.Spec.NodeName = node
	tr.boundSet(node, b, bq)
	tr.boundGone(node, b, cache.DeletedFinalStateUnknown{Key: "ns/q", Obj: bq})
	assert.Empty(t, cmp.Diff(zero, tr.requests(node), quantityEqual), "requests after a handed-off pod finished (-want,+got)")
}

// The sums kept by events are what walking the pods gives, through pods
// pinned, moved to another node, resized, bound, finished and deleted, in
// any order of the two watches.
func TestTrackerSumsFollowEvents(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	tr, _ := newTestTracker(t, clk)
	nodes := []string{"fleetlet-a", "fleetlet-b"}
	bound := map[string]*boundPods{}
	for _, n := range nodes {
		bound[n] = boundOf(t, tr, n)
	}
	rnd := rand.New(rand.NewPCG(1, 2))
	// The model: what each pod is now, unbound or bound.
	unbound := map[string]*corev1.Pod{}
	boundNow := map[string]*corev1.Pod{}
	gpu := corev1.ResourceName("example.com/gpu")
	for step := range 2000 {
		name := fmt.Sprintf("p%d", rnd.IntN(40))
		switch op := rnd.IntN(5); {
		case op <= 1 && boundNow[name] == nil: // created or changed while unbound
			b := newPod(name).container("c", rl("cpu", fmt.Sprintf("%dm", 100*(1+rnd.IntN(5)))))
			if rnd.IntN(4) == 0 {
				b = b.container("g", corev1.ResourceList{gpu: resource.MustParse("1")})
			}
			if n := rnd.IntN(3); n < len(nodes) {
				b = b.pinnedTo(nodes[n])
			}
			p := stripped(t, b.obj())
			old := unbound[name]
			unbound[name] = p
			if old == nil {
				tr.pinnedChanged(nil, p)
			} else {
				tr.pinnedChanged(old, p)
			}
		case op == 2 && unbound[name] != nil && pinnedNode(unbound[name]) != "": // bound
			p := unbound[name].DeepCopy()
			p.Spec.NodeName = pinnedNode(p)
			delete(unbound, name)
			boundNow[name] = p
			if rnd.IntN(2) == 0 {
				tr.unpinned(unboundOf(p))
				tr.boundSet(p.Spec.NodeName, bound[p.Spec.NodeName], p)
			} else {
				tr.boundSet(p.Spec.NodeName, bound[p.Spec.NodeName], p)
				tr.unpinned(unboundOf(p))
			}
		case op == 3 && boundNow[name] != nil: // finished
			p := boundNow[name]
			delete(boundNow, name)
			tr.boundGone(p.Spec.NodeName, bound[p.Spec.NodeName], p)
		case op == 4 && unbound[name] != nil: // deleted while unbound
			p := unbound[name].DeepCopy()
			p.DeletionTimestamp = &metav1.Time{Time: clk.Now()}
			delete(unbound, name)
			tr.unpinned(p)
		}
		for _, n := range nodes {
			var pinned, onNode []*corev1.Pod
			for _, p := range unbound {
				if pinnedNode(p) == n {
					pinned = append(pinned, p)
				}
			}
			for _, p := range boundNow {
				if p.Spec.NodeName == n {
					onNode = append(onNode, p)
				}
			}
			want := AddResources(ProxyRequests(pinned, false), ProxyRequests(onNode, true))
			require.Empty(t, cmp.Diff(want, tr.requests(n), quantityEqual), "step %d, node %s: requests (-walked,+kept)", step, n)
		}
	}
}

// unboundOf is a bound pod as the unbound pods' watch last showed it.
func unboundOf(p *corev1.Pod) *corev1.Pod {
	u := p.DeepCopy()
	u.Spec.NodeName = ""
	return u
}

// Reading a node's requests costs the same with a thousand pods on it as
// with none: the virtual node is rebuilt on every event of its pods, so a
// walk of them all made a burst quadratic.
func TestTrackerRequestsDoNotWalkThePods(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	tr, _ := newTestTracker(t, clk)
	const node = "fleetlet-c"
	b := boundOf(t, tr, node)
	for i := range 1000 {
		tr.pinnedChanged(nil, stripped(t, newPod(fmt.Sprintf("pinned-%d", i)).container("c", rl("cpu", "10m", "memory", "16Mi")).pinnedTo(node).obj()))
		tr.boundSet(node, b, stripped(t, newPod(fmt.Sprintf("bound-%d", i)).container("c", rl("cpu", "10m", "memory", "16Mi")).boundTo(node).obj()))
	}
	assert.Empty(t, cmp.Diff(rl("cpu", "20", "memory", "32000Mi", "pods", "2000"), tr.requests(node), quantityEqual), "requests (-want,+got)")
	allocs := testing.AllocsPerRun(20, func() { tr.requests(node) })
	assert.LessOrEqual(t, allocs, 100.0, "allocations to read the requests of 2,000 pods: a walk of the pods")
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
