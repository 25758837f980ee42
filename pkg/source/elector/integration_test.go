package elector_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
	"github.com/fleetlet/fleetlet/pkg/proxy"
	"github.com/fleetlet/fleetlet/pkg/source/elector"
	"github.com/fleetlet/fleetlet/pkg/testenv"
)

func pinnedTo(node string) func(*corev1.Pod) bool {
	return func(p *corev1.Pod) bool { return proxy.PinnedNode(p) == node }
}

func elected(p *corev1.Pod) bool { _, ok := proxy.Elected(p); return ok }

// Once pinned, a proxy is completed on that target or deleted (its
// controller makes a new one), never elected elsewhere: pinning it again
// would change a nodeSelector key, which the API server refuses forever.
// Before: the vanished candidate cleared the record and a new election ran
// for a proxy that could never be bound anywhere else.
func TestPinnedProxyWhoseDelegateVanishesIsDeleted(t *testing.T) {
	h, remote, local := start(t, elector.Options{})
	ctx := context.Background()
	h.allocatable(t, remote, "0", "100") // no CPU to spare: it stays gated
	p := h.proxy(t, "web-1")
	h.reserve(t, remote, p)
	h.unschedulable(t, local, p)
	h.bind(t, remote, p)
	h.admit(t, remote, p)
	h.waitProxy(t, p, "elected", elected)
	// Pinned but still gated, as an older manager left it (this one pins
	// only with the ungate, once the node has room).
	pin := fmt.Appendf(nil, `[{"op":"add","path":"/spec/nodeSelector/kubernetes.io~1hostname","value":%q}]`, nodeName(remote))
	require.NoError(t, h.source.Patch(ctx, h.get(t, p), client.RawPatch(types.JSONPatchType, pin)))
	h.waitProxy(t, p, "pinned to "+nodeName(remote), pinnedTo(nodeName(remote)))
	require.True(t, proxy.Gated(h.get(t, p)), "ungated without room for the pod")

	// The elected candidate vanishes in its target.
	require.NoError(t, h.target.Delete(ctx, &v1alpha1.PodChaperon{ObjectMeta: metav1.ObjectMeta{Namespace: p.Namespace, Name: chaperonKey(p).Name}}))
	h.collect(t, remote, p) // its finalizer, which the target's chaperon controller removes

	if got, present := h.waitProxyDeleted(t, p, "deleted"); present {
		assert.Equal(t, nodeName(remote), proxy.PinnedNode(got), "re-pinned")
	}
	h.waitEvent(t, p, elector.EventPinnedProxyDeleted)
}

// A proxy is never ungated without room on its virtual node, pods counted
// as well as resources (the source scheduler would otherwise fail to bind
// it, or preempt); one that never fits is deleted after UnboundTimeout,
// with an Event. Before: fits() ignored the pod count, and a proxy that did
// not fit was ungated anyway once BindTimeout had passed.
func TestNeverUngatedWithoutRoomForThePod(t *testing.T) {
	h, remote, local := start(t, elector.Options{UnboundTimeout: 4 * time.Second})
	h.allocatable(t, remote, "100", "0") // CPU to spare, no pod slot
	p := h.proxy(t, "web-1")
	h.reserve(t, remote, p)
	h.unschedulable(t, local, p)
	h.bind(t, remote, p)
	h.admit(t, remote, p)
	h.waitProxy(t, p, "elected", elected)

	assert.Never(t, func() bool { p := h.get(t, p); return !proxy.Gated(p) || proxy.PinnedNode(p) != "" }, 2*time.Second, 100*time.Millisecond,
		"ungated or pinned on a virtual node with no room for one more pod")
	if got, present := h.waitProxyDeleted(t, p, "deleted once UnboundTimeout passed"); present {
		assert.True(t, proxy.Gated(got), "ungated before it was deleted")
	}
	h.waitEvent(t, p, elector.EventUnboundDeleted)
}

// A candidate that is being deleted (a loser or a candidate of an earlier
// election whose pod is still going) is never elected: its pod is on its
// way out. Once it is gone, a new candidate there may win. Before: the
// Terminating chaperon was taken as this election's candidate, reservation
// and all.
func TestTerminatingChaperonIsNeverACandidate(t *testing.T) {
	h, remote, local := start(t, elector.Options{})
	ctx := context.Background()
	p := h.proxy(t, "web-1", "example.com/quota") // held by another controller's gate for now

	earlier := &v1alpha1.PodChaperon{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: p.Namespace, Name: chaperonKey(p).Name, Finalizers: []string{"example.com/hold"},
			Labels:      map[string]string{v1alpha1.LabelParentUID: string(p.UID), v1alpha1.LabelParentCluster: sourceName},
			Annotations: map[string]string{v1alpha1.AnnotationParentName: p.Name, v1alpha1.AnnotationParentNamespace: p.Namespace, v1alpha1.AnnotationReserved: "node-1"},
		},
		Spec: v1alpha1.PodChaperonSpec{Template: v1alpha1.PodChaperonTemplate{Spec: *p.Spec.DeepCopy()}},
	}
	require.NoError(t, h.target.Create(ctx, earlier))
	require.NoError(t, h.target.Delete(ctx, earlier))

	// The other controller lifts its gate.
	require.NoError(t, h.source.Patch(ctx, h.get(t, p), client.RawPatch("application/json-patch+json",
		[]byte(`[{"op":"test","path":"/spec/schedulingGates/0/name","value":"example.com/quota"},{"op":"remove","path":"/spec/schedulingGates/0"}]`))))
	h.unschedulable(t, local, p)
	assert.Never(t, func() bool { return elected(h.get(t, p)) }, 2*time.Second, 100*time.Millisecond,
		"a Terminating chaperon was elected")

	// It goes; a new candidate there is reserved and wins.
	require.NoError(t, h.target.Get(ctx, client.ObjectKeyFromObject(earlier), earlier))
	earlier.Finalizers = nil
	require.NoError(t, h.target.Update(ctx, earlier))
	h.reserve(t, remote, p)
	got := h.waitProxy(t, p, "elected", elected)
	r, _ := proxy.Elected(got)
	assert.Equal(t, remote.Name, r.TargetName)
}

// Back-pressure: with one election in flight per target, a second proxy
// gets no candidate anywhere until the first is elected, then gets its
// own and is elected in turn. Before the bound, every proxy of a burst
// had its candidates at once.
func TestElectionsInFlightAreBoundedPerTarget(t *testing.T) {
	h, remote, local := start(t, elector.Options{ElectionsInFlight: 1})
	p1, p2 := h.proxy(t, "first"), h.proxy(t, "second")
	hasCandidate := func(p *corev1.Pod) bool {
		_, inRemote := h.chaperon(t, remote, p)
		_, inLocal := h.chaperon(t, local, p)
		return inRemote || inLocal
	}
	var first, second *corev1.Pod
	testenv.EventuallyTrue(t, waitTimeout, "a candidate of one of them", func(context.Context) bool {
		switch {
		case hasCandidate(p1):
			first, second = p1, p2
		case hasCandidate(p2):
			first, second = p2, p1
		}
		return first != nil
	})
	assert.Never(t, func() bool { return hasCandidate(second) }, 3*time.Second, 100*time.Millisecond,
		"a second election in flight in targets bounded at one")

	h.reserve(t, remote, first)
	h.unschedulable(t, local, first)
	h.waitProxy(t, first, "elected", elected)
	h.reserve(t, remote, second)
	h.unschedulable(t, local, second)
	h.waitProxy(t, second, "elected in its turn", elected)
}
