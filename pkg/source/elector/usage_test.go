package elector

import (
	"context"
	"sort"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
	"github.com/fleetlet/fleetlet/pkg/indexer"
	"github.com/fleetlet/fleetlet/pkg/podsums"
	"github.com/fleetlet/fleetlet/pkg/testenv"
)

func usagePod(uid, node, cpu string, phase corev1.PodPhase) *corev1.Pod {
	p := &corev1.Pod{}
	p.UID = types.UID(uid)
	p.Spec.NodeName = node
	p.Spec.Containers = []corev1.Container{{Name: "c", Resources: corev1.ResourceRequirements{Requests: rl("cpu", cpu)}}}
	p.Status.Phase = phase
	return p
}

// TestNodeUsage: the sums follow binding, resizing, finishing and deletion
// of pods, node by node, as a List by the active-pod index would count.
func TestNodeUsage(t *testing.T) {
	u := podsums.New[string]()
	h := &testenv.PodEvents{}
	require.NoError(t, u.Watch(h, keyed(takesRoom), nil))
	if _, _, ok := sumOf(u, "n1"); ok {
		require.FailNow(t, "usage read before the informer synced")
	}
	h.Synced = true
	expect := func(node, cpu string, pods int64) {
		t.Helper()
		got, n, ok := sumOf(u, node)
		require.Falsef(t, !ok || n != pods, "%s: %d pods (ok %v), want %d", node, n, ok, pods)
		want := rl("cpu", cpu)["cpu"]
		q := got["cpu"]
		require.Falsef(t, q.Cmp(want) != 0, "%s: cpu %s, want %s", node, q.String(), cpu)
	}
	a := usagePod("a", "", "100m", corev1.PodPending)
	h.OnAdd(a, false)
	expect("n1", "0", 0) // unbound: counted nowhere
	bound := usagePod("a", "n1", "100m", corev1.PodPending)
	h.OnUpdate(a, bound)
	h.OnAdd(usagePod("b", "n1", "250m", corev1.PodRunning), false)
	h.OnAdd(usagePod("c", "n2", "1", corev1.PodRunning), false)
	expect("n1", "350m", 2)
	expect("n2", "1", 1)
	h.OnUpdate(bound, bound) // a resync changes nothing
	expect("n1", "350m", 2)
	h.OnUpdate(bound, usagePod("a", "n1", "200m", corev1.PodRunning)) // resized
	expect("n1", "450m", 2)
	h.OnUpdate(bound, usagePod("a", "n1", "200m", corev1.PodSucceeded)) // finished
	expect("n1", "250m", 1)
	h.OnDelete(toolscache.DeletedFinalStateUnknown{Key: "ns/b", Obj: usagePod("b", "n1", "250m", corev1.PodRunning)})
	expect("n1", "0", 0)
	h.OnDelete(usagePod("c", "n2", "1", corev1.PodRunning))
	expect("n2", "0", 0)
	assert.Empty(t, u.Select(func(string) bool { return true }), "sums kept after every pod went")
}

func TestFitsNode(t *testing.T) {
	alloc := rl("cpu", "1", "pods", "3")
	for _, tc := range []struct {
		name     string
		used     corev1.ResourceList
		active   int64
		requests corev1.ResourceList
		want     bool
	}{
		{"room", rl("cpu", "500m"), 1, rl("cpu", "500m"), true},
		{"exactly full after", rl("cpu", "900m"), 2, rl("cpu", "100m"), true},
		{"cpu short", rl("cpu", "901m"), 1, rl("cpu", "100m"), false},
		{"no pod slot", rl("cpu", "0"), 3, rl("cpu", "1m"), false},
		{"a resource the node lacks", nil, 0, rl("nvidia.com/gpu", "1"), false},
		{"pods asked for are slots, not a resource", nil, 0, rl("pods", "1"), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := fitsNode(alloc, tc.used, tc.active, tc.requests)
			assert.Falsef(t, got != tc.want, "fitsNode = %v, want %v", got, tc.want)
		})
	}
}

// TestUngatedProxiesTakeRoom: a proxy pinned and ungated but not bound yet
// takes its node's room at once, so that a second proxy never counts on
// room the first will bind into (the node's allocatable may not count the
// first yet); a gated one takes none; bound, it is counted once.
func TestUngatedProxiesTakeRoom(t *testing.T) {
	u := podsums.New[string]()
	h := &testenv.PodEvents{Synced: true}
	require.NoError(t, u.Watch(h, keyed(takesRoom), nil))
	proxyPod := func(uid string, gated bool, node string) *corev1.Pod {
		p := usagePod(uid, node, "600m", corev1.PodPending)
		p.Finalizers = []string{v1alpha1.FinalizerDelegate}
		p.Spec.NodeSelector = map[string]string{corev1.LabelHostname: "n1"}
		if gated {
			p.Spec.SchedulingGates = []corev1.PodSchedulingGate{{Name: v1alpha1.SchedulingGateElection}}
		}
		return p
	}
	gated, ungated, bound := proxyPod("p", true, ""), proxyPod("p", false, ""), proxyPod("p", false, "n1")
	h.OnAdd(gated, false)
	if _, n, _ := sumOf(u, "n1"); n != 0 {
		require.FailNowf(t, "a gated proxy takes room", "a gated proxy takes room: %d pods", n)
	}
	h.OnUpdate(gated, ungated)
	used, n, _ := sumOf(u, "n1")
	q := used[corev1.ResourceCPU]
	require.Falsef(t, n != 1 || q.Cmp(rl("cpu", "600m")["cpu"]) != 0, "an ungated proxy not bound yet: %d pods, cpu %s; want 1, 600m", n, q.String())
	// The node counts a second proxy Q (1 CPU free with it), not yet this
	// one: Q must not be ungated on room this one binds into.
	assert.False(t, fitsNode(rl("cpu", "1", "pods", "10"), used, n, rl("cpu", "600m")), "a second proxy fits on room an ungated one takes")
	h.OnUpdate(ungated, bound)
	if _, n, _ := sumOf(u, "n1"); n != 1 {
		require.FailNowf(t, "bound", "bound: %d pods, want it counted once", n)
	}
}

// TestHeadedProxiesThatFit: a virtual node's allocatable growing brings
// back the gated proxies headed there that wait for room and fit now, not
// every one headed there; before the usage is counted, all that wait for
// room. Before: every headed proxy on every change (5.8 passes per pod in a
// 1,000-pod burst), then every one that fit, those whose delegate was not
// admitted yet included (5.6 per pod in a 500-pod burst with
// --candidate-targets=1).
func TestHeadedProxiesThatFit(t *testing.T) {
	pinned := func(name, cpu string) *corev1.Pod {
		p := usagePod(name, "", cpu, corev1.PodPending)
		p.Namespace, p.Name = "team", name
		p.Finalizers = []string{v1alpha1.FinalizerDelegate}
		p.Spec.NodeSelector = map[string]string{corev1.LabelHostname: "fleetlet-t"}
		p.Spec.SchedulingGates = []corev1.PodSchedulingGate{{Name: v1alpha1.SchedulingGateElection}}
		return p
	}
	small, big, notAdmitted := pinned("small", "500m"), pinned("big", "2"), pinned("not-admitted", "100m")
	small.UID, big.UID, notAdmitted.UID = "small", "big", "not-admitted"
	c := fake.NewClientBuilder().WithObjects(small, big, notAdmitted).
		WithIndex(&corev1.Pod{}, indexer.HeadedProxy.Field, indexer.HeadedProxy.Extract).Build()
	r := &Reconciler{client: c, usage: podsums.New[string]()}
	events := &testenv.PodEvents{}
	require.NoError(t, r.usage.Watch(events, keyed(takesRoom), nil))
	// The last passes of small and big found no room; not-admitted's
	// delegate is not admitted yet: it waits for that, not for room.
	r.setAwaitingRoom(small.UID, true)
	r.setAwaitingRoom(big.UID, true)
	node := &corev1.Node{}
	node.Name = "fleetlet-t"
	node.Status.Allocatable = rl("cpu", "1", "pods", "10")
	names := func() []string {
		var out []string
		for _, req := range r.headedProxies(context.Background(), node) {
			out = append(out, req.Name)
		}
		sort.Strings(out)
		return out
	}
	if got := names(); strings.Join(got, ",") != "big,small" {
		require.FailNowf(t, "usage not counted yet", "usage not counted yet: %v, want both", got)
	}
	events.Synced = true
	if got := names(); strings.Join(got, ",") != "small" {
		require.FailNowf(t, "1 CPU allocatable", "1 CPU allocatable: %v, want only the proxy that fits", got)
	}
	r.setAwaitingRoom(small.UID, false)
	if got := names(); len(got) != 0 {
		require.FailNowf(t, "small ungated", "small ungated: %v, want none", got)
	}
}
