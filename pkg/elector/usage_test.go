package elector

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
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
	u := newNodeUsage()
	if _, _, ok := u.of("n1"); ok {
		t.Fatal("usage read before the informer synced")
	}
	u.synced = func() bool { return true }
	h := u.handler()
	expect := func(node, cpu string, pods int64) {
		t.Helper()
		got, n, ok := u.of(node)
		if !ok || n != pods {
			t.Fatalf("%s: %d pods (ok %v), want %d", node, n, ok, pods)
		}
		want := rl("cpu", cpu)["cpu"]
		if q := got["cpu"]; q.Cmp(want) != 0 {
			t.Fatalf("%s: cpu %s, want %s", node, q.String(), cpu)
		}
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
	if len(u.pods) != 0 || len(u.nodes) != 0 {
		t.Errorf("kept %d pods and %d nodes after every pod went", len(u.pods), len(u.nodes))
	}
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
			if got := fitsNode(alloc, tc.used, tc.active, tc.requests); got != tc.want {
				t.Errorf("fitsNode = %v, want %v", got, tc.want)
			}
		})
	}
}
