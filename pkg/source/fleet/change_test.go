package fleet

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
	"github.com/fleetlet/fleetlet/pkg/proxy"
)

func cpu(v string) corev1.ResourceList {
	return corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(v)}
}

// A summary's free devices are room: a DeviceClass served anew, or
// devices freed, bring back the proxies no cluster could take.
func TestFreeCountsDevices(t *testing.T) {
	withGPUs := func(devices, allocated int32) *v1alpha1.ClusterSummaryStatus {
		return &v1alpha1.ClusterSummaryStatus{Allocatable: cpu("4"), DevicesCounted: true,
			DeviceClasses: []v1alpha1.DeviceClassSummary{{Name: "gpu", Devices: devices, Allocated: allocated}}}
	}
	none := &v1alpha1.ClusterSummaryStatus{Allocatable: cpu("4"), DevicesCounted: true}
	for _, tc := range []struct {
		name          string
		before, after *v1alpha1.ClusterSummaryStatus
		roomGrew      bool
	}{
		{name: "a class served anew", before: none, after: withGPUs(3, 0), roomGrew: true},
		{name: "a device freed", before: withGPUs(3, 3), after: withGPUs(3, 2), roomGrew: true},
		{name: "a device taken", before: withGPUs(3, 2), after: withGPUs(3, 3)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := Change{Before: View{Present: true, Ready: true, Free: Free(tc.before)}, After: View{Present: true, Ready: true, Free: Free(tc.after)}}
			got := c.RoomGrew()
			assert.Falsef(t, got != tc.roomGrew, "RoomGrew() = %v, want %v", got, tc.roomGrew)
			assert.True(t, c.Any(), "Any() = false, want true")
		})
	}
}

func TestChange(t *testing.T) {
	ready := View{Present: true, Ready: true, Free: cpu("4")}
	with := func(f func(*View)) View { v := ready; f(&v); return v }
	for _, tc := range []struct {
		name                          string
		before, after                 View
		health, eligibility, roomGrew bool
	}{
		{name: "nothing", before: ready, after: ready},
		{name: "a probe saw pods start", before: ready, after: with(func(v *View) { v.Free = cpu("3") })},
		{name: "pods gone", before: ready, after: with(func(v *View) { v.Free = cpu("5") }), roomGrew: true},
		{name: "a resource appears", before: ready, after: with(func(v *View) {
			v.Free = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4"), "nvidia.com/gpu": resource.MustParse("1")}
		}), roomGrew: true},
		{name: "first summary", before: with(func(v *View) { v.Free = nil }), after: ready, roomGrew: true},
		{name: "registered", before: View{}, after: ready, health: true, eligibility: true, roomGrew: true},
		{name: "removed", before: ready, after: View{}, health: true, eligibility: true},
		{name: "not ready", before: ready, after: with(func(v *View) { v.Ready = false }), health: true, eligibility: true},
		{name: "reconnected", before: ready, after: with(func(v *View) { v.cluster = &Cluster{} }), health: true, eligibility: true},
		{name: "draining", before: ready, after: with(func(v *View) { v.Draining = true }), eligibility: true},
		{name: "summary stale", before: ready, after: with(func(v *View) { v.SummaryStale = true }), eligibility: true},
		{name: "candidate scheduler stopped", before: ready, after: with(func(v *View) { v.SchedulerDown = true }), eligibility: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := Change{Before: tc.before, After: tc.after}
			if got := c.Health(); got != tc.health {
				assert.Failf(t, "Health()", "Health() = %v, want %v", got, tc.health)
			}
			if got := c.Eligibility(); got != tc.eligibility {
				assert.Failf(t, "Eligibility()", "Eligibility() = %v, want %v", got, tc.eligibility)
			}
			if got := c.RoomGrew(); got != tc.roomGrew {
				assert.Failf(t, "RoomGrew()", "RoomGrew() = %v, want %v", got, tc.roomGrew)
			}
			if got, want := c.Any(), tc.name != "nothing"; got != want {
				assert.Failf(t, "Any()", "Any() = %v, want %v", got, want)
			}
		})
	}
}

// TestTargetChangedTellsOnlyChanges: a reconcile that changed nothing a
// watcher looks at (a probe every few seconds) enqueues nothing.
func TestTargetChangedTellsOnlyChanges(t *testing.T) {
	key := proxy.TargetKey{Name: "a"}
	view := View{Present: true, Ready: true, Free: cpu("4")}
	h := hub{view: func(proxy.TargetKey) View { return view }, last: map[proxy.TargetKey]View{}}
	q := workqueue.NewTyped[reconcile.Request]()
	defer q.ShutDown()
	changes := make(chan Change, 10)
	h.changes = append(h.changes, changeWatch{ctx: context.Background(), queue: q, proxy: func(_ context.Context, c Change) []reconcile.Request {
		changes <- c
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "p"}}}
	}})
	next := func() (Change, bool) {
		select {
		case c := <-changes:
			return c, true
		case <-time.After(200 * time.Millisecond):
			return Change{}, false
		}
	}

	h.targetChanged(key)
	if c, ok := next(); !ok || !c.Health() || c.Key != key {
		require.FailNowf(t, "registration: got", "registration: got %+v, %v; want a health change of %s", c, ok, key)
	}
	h.targetChanged(key)
	if c, ok := next(); ok {
		require.FailNowf(t, "nothing changed, yet the watcher was told", "nothing changed, yet the watcher was told %+v", c)
	}
	view.Free = cpu("3")
	h.targetChanged(key)
	if c, ok := next(); !ok || c.Eligibility() || c.RoomGrew() {
		require.FailNowf(t, "load moved: got", "load moved: got %+v, %v; want a change of free room only", c, ok)
	}
	view = View{}
	h.targetChanged(key)
	if c, ok := next(); !ok || !c.Health() || c.After.Present {
		require.FailNowf(t, "removal: got", "removal: got %+v, %v", c, ok)
	}
	_, kept := h.last[key]
	assert.False(t, kept, "a removed target's last view is still kept")
	assert.Falsef(t, q.Len() != 1, "queue holds %d requests, want the one proxy once", q.Len())
}

// TestReadinessTurnedBackIsAHealthChange: a target that went NotReady and
// back before its watchers looked again (the registry's reconcile of it
// queued behind others) is still a change of health. Before, the watchers
// saw Ready before and after and were told nothing, and a feedback pass
// that had left a proxy for the target's NotReady never ran again: ten
// targets' burst ended with proxies Pending whose delegates ran.
func TestReadinessTurnedBackIsAHealthChange(t *testing.T) {
	key := proxy.TargetKey{Name: "a"}
	c := &Cluster{key: key, opts: &Options{SummaryStaleAfter: time.Minute}, clock: clocktesting.NewFakeClock(time.Unix(1000, 0)), notify: func(proxy.TargetKey) {}}
	c.record(Health{Ready: true, Reason: v1alpha1.ReasonConnected}, nil)
	h := hub{view: func(proxy.TargetKey) View { return viewOf(c) }, last: map[proxy.TargetKey]View{}}
	q := workqueue.NewTyped[reconcile.Request]()
	defer q.ShutDown()
	changes := make(chan Change, 10)
	h.changes = append(h.changes, changeWatch{ctx: context.Background(), queue: q, proxy: func(_ context.Context, ch Change) []reconcile.Request {
		changes <- ch
		return nil
	}})
	h.targetChanged(key)
	require.True(t, (<-changes).Health(), "registration is a change of health")

	c.record(Health{Reason: v1alpha1.ReasonUnreachable}, nil)
	c.record(Health{Ready: true, Reason: v1alpha1.ReasonConnected}, nil)
	h.targetChanged(key) // one look after both
	select {
	case ch := <-changes:
		assert.True(t, ch.Health(), "Health() = false for a target that went NotReady and back: %+v", ch)
	case <-time.After(time.Second):
		assert.Fail(t, "the watchers were told nothing of a target that went NotReady and back")
	}
}
