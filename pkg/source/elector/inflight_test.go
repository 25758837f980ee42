package elector

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
	"github.com/fleetlet/fleetlet/pkg/podsums"
	"github.com/fleetlet/fleetlet/pkg/proxy"
	"github.com/fleetlet/fleetlet/pkg/testenv"
)

// TestInflightIsKeptByEvents: what is in flight to a target is the
// requests of the gated proxies elected there, kept by the pod informer's
// events, so that reading it reads no pod. Before: each ranking listed the
// gated proxies elected to each target and summed their requests, a pass
// costing what was in flight (hundreds of proxies in a burst) for every
// target, on every pass that ranked: O(n²) over a burst, and 9 % of the
// source manager's live heap at the end of a 2,500-pod burst (the sums of
// 64 workers at once).
func TestInflightIsKeptByEvents(t *testing.T) {
	gated := func(name, cpu string, rec *proxy.Record) *corev1.Pod {
		p := usagePod(name, "", cpu, corev1.PodPending)
		p.Namespace, p.Name = "team", name
		p.Spec.SchedulingGates = []corev1.PodSchedulingGate{{Name: v1alpha1.SchedulingGateElection}}
		if rec != nil {
			p.Status.Conditions = []corev1.PodCondition{{Type: v1alpha1.ConditionElected, Status: corev1.ConditionTrue, Message: rec.Message()}}
		}
		return p
	}
	// No client: a read of the cache would panic.
	r := &Reconciler{inflightSums: podsums.New[string]()}
	h := &testenv.PodEvents{}
	require.NoError(t, r.inflightSums.Watch(h, keyed(electedTo), nil))
	assert.Nil(t, r.inflight("c2"), "before the informer synced")
	h.Synced = true

	a := gated("a", "1", &proxy.Record{TargetName: "c2", Chaperon: "a-1"})
	h.OnAdd(a, false)
	h.OnAdd(gated("b", "500m", &proxy.Record{TargetName: "c2", Chaperon: "b-1"}), false)
	h.OnAdd(gated("c", "2", &proxy.Record{TargetNamespace: "team", TargetName: "c2", Chaperon: "c-1"}), false)
	for i := range 300 {
		// Still electing: in flight nowhere.
		h.OnAdd(gated(fmt.Sprintf("electing-%d", i), "1", nil), false)
	}
	cpu := func(l corev1.ResourceList) string { q := l[corev1.ResourceCPU]; return q.String() }
	assert.Equal(t, "1500m", cpu(r.inflight("c2")), "in flight to c2")
	assert.Equal(t, "2", cpu(r.inflight("team/c2")), "in flight to team/c2")
	assert.Nil(t, r.inflight("c3"), "in flight to a target no proxy is elected to")

	// Ungated: its delegate is bound, the summary counts it.
	ungated := a.DeepCopy()
	ungated.Spec.SchedulingGates = nil
	h.OnUpdate(a, ungated)
	assert.Equal(t, "500m", cpu(r.inflight("c2")), "in flight to c2 once a is ungated")
	// Elected again elsewhere.
	b2 := gated("b", "500m", &proxy.Record{TargetName: "c3", Chaperon: "b-2"})
	h.OnUpdate(b2, b2)
	assert.Nil(t, r.inflight("c2"), "in flight to c2 once b is elected to c3")
	assert.Equal(t, "500m", cpu(r.inflight("c3")), "in flight to c3")
	h.OnDelete(b2)
	assert.Nil(t, r.inflight("c3"), "in flight to c3 once b is deleted")
	got := r.inflight("team/c2")
	got[corev1.ResourceCPU] = resource.MustParse("9")
	require.Equal(t, "2", cpu(r.inflight("team/c2")), "a read is a copy")
}
