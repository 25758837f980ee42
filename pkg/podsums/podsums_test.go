package podsums_test

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"

	"github.com/fleetlet/fleetlet/pkg/podsums"
	"github.com/fleetlet/fleetlet/pkg/testenv"
)

func pod(uid, node, cpu, gpu string) *corev1.Pod {
	p := &corev1.Pod{}
	p.UID = types.UID(uid)
	p.Spec.NodeName = node
	req := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu)}
	if gpu != "" {
		req["example.com/gpu"] = resource.MustParse(gpu)
	}
	p.Spec.Containers = []corev1.Container{{Name: "c", Resources: corev1.ResourceRequirements{Requests: req}}}
	return p
}

// onNode counts a pod on its node, with its first container's requests.
func onNode(p *corev1.Pod) (string, corev1.ResourceList, bool) {
	if p.Spec.NodeName == "" {
		return "", nil, false
	}
	return p.Spec.NodeName, p.Spec.Containers[0].Resources.Requests.DeepCopy(), true
}

// walk sums the pods as a List of every pod on each node would.
func walk(pods map[types.UID]*corev1.Pod) map[string]podsums.Sum {
	out := map[string]podsums.Sum{}
	for _, p := range pods {
		node, req, ok := onNode(p)
		if !ok {
			continue
		}
		sum := out[node]
		if sum.Requests == nil {
			sum.Requests = corev1.ResourceList{}
		}
		sum.Pods++
		for name, q := range req {
			total := sum.Requests[name]
			total.Add(q)
			sum.Requests[name] = total
		}
		out[node] = sum
	}
	for node, sum := range out {
		for name, q := range sum.Requests {
			if q.IsZero() {
				delete(sum.Requests, name)
			}
		}
		out[node] = sum
	}
	return out
}

func equalSums(t *testing.T, step int, want, got map[string]podsums.Sum) {
	t.Helper()
	require.Lenf(t, got, len(want), "step %d: keys %v, want %v", step, got, want)
	for node, w := range want {
		g := got[node]
		require.Equalf(t, w.Pods, g.Pods, "step %d: %s pods", step, node)
		require.Lenf(t, g.Requests, len(w.Requests), "step %d: %s requests %v, want %v", step, node, g.Requests, w.Requests)
		for name, q := range w.Requests {
			have := g.Requests[name]
			require.Zerof(t, q.Cmp(have), "step %d: %s %s is %s, want %s", step, node, name, have.String(), q.String())
		}
	}
}

// The sums kept by events are what a walk of the same pods gives, at every
// step of a random run of creations, bindings, moves, resizes, unbindings
// and deletions (tombstones too); a resource no pod requests any more is
// not listed as 0, and a key no pod counts under is gone.
func TestSumsFollowEvents(t *testing.T) {
	sums := podsums.New[string]()
	events := &testenv.PodEvents{Synced: true}
	changes := 0
	require.NoError(t, sums.Watch(events, onNode, func() { changes++ }))
	require.True(t, sums.Synced())
	rnd := rand.New(rand.NewPCG(3, 4))
	pods := map[types.UID]*corev1.Pod{}
	nodes := []string{"", "n1", "n2", "n3"}
	cpus := []string{"100m", "250m", "1", "1500m"}
	for step := range 3000 {
		uid := types.UID(fmt.Sprint(rnd.IntN(50)))
		old, had := pods[uid]
		switch {
		case had && rnd.IntN(5) == 0:
			delete(pods, uid)
			if rnd.IntN(2) == 0 {
				events.OnDelete(old)
			} else {
				events.OnDelete(toolscache.DeletedFinalStateUnknown{Key: string(uid), Obj: old})
			}
		default:
			gpu := ""
			if rnd.IntN(4) == 0 {
				gpu = "1"
			}
			p := pod(string(uid), nodes[rnd.IntN(len(nodes))], cpus[rnd.IntN(len(cpus))], gpu)
			pods[uid] = p
			if had {
				events.OnUpdate(old, p)
			} else {
				events.OnAdd(p, false)
			}
		}
		equalSums(t, step, walk(pods), sums.Select(func(string) bool { return true }))
	}
	assert.Greater(t, changes, 1000, "changes told")
	for uid, p := range pods {
		events.OnDelete(p)
		delete(pods, uid)
	}
	assert.Empty(t, sums.Select(func(string) bool { return true }), "sums left once every pod went")
}

// Set says where the pod counted before and whether anything changed; the
// same pod set again the same way changes nothing, and tells no one.
func TestSetAndRemoveTellWhatChanged(t *testing.T) {
	sums := podsums.New[string]()
	cpu := func(v string) corev1.ResourceList {
		return corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(v)}
	}
	before, changed := sums.Set("a", "n1", cpu("1"))
	assert.Equal(t, "", before)
	assert.True(t, changed)
	before, changed = sums.Set("a", "n1", cpu("1"))
	assert.Equal(t, "n1", before)
	assert.False(t, changed, "the same pod, the same way")
	before, changed = sums.Set("a", "n2", cpu("1"))
	assert.Equal(t, "n1", before)
	assert.True(t, changed)
	assert.True(t, sums.Has("a", "n2"))
	assert.False(t, sums.Has("a", "n1"))
	assert.Zero(t, sums.Of("n1").Pods)
	before, removed := sums.Remove("a")
	assert.Equal(t, "n2", before)
	assert.True(t, removed)
	_, removed = sums.Remove("a")
	assert.False(t, removed, "removed twice")

	changes := 0
	events := &testenv.PodEvents{}
	require.NoError(t, sums.Watch(events, onNode, func() { changes++ }))
	p := pod("b", "n1", "1", "")
	events.OnAdd(p, false)
	events.OnUpdate(p, p) // a resync
	ready := p.DeepCopy()
	ready.Status.Phase = corev1.PodRunning
	events.OnUpdate(p, ready)
	assert.Equal(t, 1, changes, "changes told for an add, a resync and a status change")
	events.OnDelete(ready)
	events.OnDelete(ready)
	assert.Equal(t, 2, changes, "changes told once deleted twice")
}

// Watched sums are not synced before their informer's handler has seen the
// first list; a read is a copy.
func TestSyncedAndCopies(t *testing.T) {
	sums := podsums.New[string]()
	assert.False(t, sums.Synced(), "synced before watching")
	events := &testenv.PodEvents{}
	require.NoError(t, sums.Watch(events, onNode, nil))
	assert.False(t, sums.Synced(), "synced before the informer")
	events.Synced = true
	assert.True(t, sums.Synced())

	events.OnAdd(pod("a", "n1", "2", ""), false)
	got := sums.Of("n1")
	got.Requests[corev1.ResourceCPU] = resource.MustParse("9")
	q := sums.Of("n1").Requests[corev1.ResourceCPU]
	assert.Equal(t, "2", q.String(), "Of is a copy")
	sel := sums.Select(func(n string) bool { return n == "n1" })
	sel["n1"].Requests[corev1.ResourceCPU] = resource.MustParse("9")
	q = sums.Of("n1").Requests[corev1.ResourceCPU]
	assert.Equal(t, "2", q.String(), "Select is a copy")
	assert.Empty(t, sums.Select(func(n string) bool { return n == "n2" }))
}
