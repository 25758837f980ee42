package elector

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/fleetlet/fleetlet/pkg/proxy"
)

// admissionWithQueue is a ledger whose wakes land in a queue the test reads.
func admissionWithQueue(t *testing.T, limit int) (*admission, workqueue.TypedRateLimitingInterface[reconcile.Request]) {
	t.Helper()
	a := newAdmission(limit)
	q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[reconcile.Request]())
	t.Cleanup(q.ShutDown)
	require.NoError(t, a.source().Start(context.Background(), q))
	return a, q
}

// woken drains the queue.
func woken(q workqueue.TypedRateLimitingInterface[reconcile.Request]) []string {
	var out []string
	for q.Len() > 0 {
		r, _ := q.Get()
		out = append(out, r.Name)
		q.Done(r)
	}
	return out
}

func key(name string) types.NamespacedName { return types.NamespacedName{Namespace: "ns", Name: name} }

// ages: the proxies' creation times, in the order the tests name them.
var ages = map[string]int{"p1": 1, "p2": 2, "p3": 3, "p4": 4, "p5": 5, "p6": 6, "pa": 1, "pb": 2, "old": 3, "onlyA": 4, "new": 5, "older": 0}

func age(name string) time.Time {
	return time.Date(2026, 1, 1, 0, 0, ages[name], 0, time.UTC)
}

var (
	ta = proxy.TargetKey{Namespace: "fleet", Name: "a"}
	tb = proxy.TargetKey{Namespace: "fleet", Name: "b"}
	tc = proxy.TargetKey{Namespace: "fleet", Name: "c"}
)

// At most limit proxies hold a slot in a target; the others wait and are
// let in oldest first, each by the release that frees a slot for it.
func TestAdmissionBoundsElectionsPerTarget(t *testing.T) {
	a, q := admissionWithQueue(t, 2)
	both := []proxy.TargetKey{ta, tb}
	require.True(t, a.admit(key("p1"), age("p1"), both))
	require.True(t, a.admit(key("p2"), age("p2"), both))
	assert.False(t, a.admit(key("p3"), age("p3"), both), "a third election in flight in targets bounded at 2")
	assert.False(t, a.admit(key("p4"), age("p4"), both))
	assert.False(t, a.admit(key("p3"), age("p3"), both), "a waiter passing again before its turn")
	assert.Equal(t, 2, a.inFlight(ta))

	a.release(key("p1"))
	assert.Equal(t, []string{"p3"}, woken(q), "the oldest waiter, and only it")
	assert.True(t, a.holds(key("p3")), "woken with its slots taken for it")
	assert.True(t, a.admit(key("p3"), age("p3"), both))
	assert.False(t, a.admit(key("p4"), age("p4"), both))
	assert.Equal(t, 2, a.inFlight(tb))

	// Another target's slots are its own: a proxy that needs only c
	// goes in while a and b are full.
	assert.True(t, a.admit(key("p5"), age("p5"), []proxy.TargetKey{tc}))

	// A waiter gone (deleted) leaves the line; the next release goes on.
	a.release(key("p4"))
	a.release(key("p2"))
	assert.Empty(t, woken(q))
	assert.Equal(t, 1, a.inFlight(ta))
	assert.True(t, a.admit(key("p6"), age("p6"), both), "a free slot and nobody waiting")
}

// A proxy that holds slots gets a target it lacked (eligibility grew
// mid-election); a proxy older than every waiter, as a new leader's first
// passes meet the proxies a leader before it made candidates for, goes
// first whatever order the passes come in.
func TestAdmissionLineIsByAge(t *testing.T) {
	a, q := admissionWithQueue(t, 1)
	require.True(t, a.admit(key("p1"), age("p1"), []proxy.TargetKey{ta}))
	assert.True(t, a.admit(key("p1"), age("p1"), []proxy.TargetKey{ta, tb}), "eligibility grew mid-election")
	assert.Equal(t, 1, a.inFlight(tb))
	assert.False(t, a.admit(key("p2"), age("p2"), []proxy.TargetKey{ta}))
	assert.False(t, a.admit(key("older"), age("older"), []proxy.TargetKey{ta}), "the slot is held")
	a.release(key("p1"))
	assert.Equal(t, []string{"older"}, woken(q), "the oldest proxy, though it came last")
}

// A younger waiter never takes a slot an older one waits for, even one it
// could use alone: the older would otherwise wait for as long as younger
// ones keep coming.
func TestAdmissionNeverPassesAnOlderWaiter(t *testing.T) {
	a, q := admissionWithQueue(t, 1)
	require.True(t, a.admit(key("pa"), age("pa"), []proxy.TargetKey{ta}))
	require.True(t, a.admit(key("pb"), age("pb"), []proxy.TargetKey{tb}))
	assert.False(t, a.admit(key("old"), age("old"), []proxy.TargetKey{ta, tb}))
	assert.False(t, a.admit(key("onlyA"), age("onlyA"), []proxy.TargetKey{ta}))
	assert.True(t, a.admit(key("p6"), age("p6"), []proxy.TargetKey{tc}), "a target nobody waits for")
	a.release(key("pa"))
	assert.Empty(t, woken(q), "a's slot is the older waiter's, which still waits for b")
	assert.False(t, a.admit(key("onlyA"), age("onlyA"), []proxy.TargetKey{ta}))
	a.release(key("pb"))
	assert.Equal(t, []string{"old"}, woken(q))
	a.release(key("old"))
	assert.Equal(t, []string{"onlyA"}, woken(q))
	assert.False(t, a.admit(key("new"), age("new"), []proxy.TargetKey{ta}))
}

// No bound: everyone is let in and nothing is kept.
func TestAdmissionUnbounded(t *testing.T) {
	a, q := admissionWithQueue(t, -1)
	for _, n := range []string{"p1", "p2", "p3"} {
		assert.True(t, a.admit(key(n), age(n), []proxy.TargetKey{ta}))
	}
	a.release(key("p1"))
	assert.Empty(t, woken(q))
	assert.Zero(t, a.inFlight(ta))
}
