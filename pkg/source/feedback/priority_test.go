package feedback

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/fleetlet/fleetlet/pkg/source/fleet"
)

// A bound proxy's changes go in the feedback's queue at the targets'
// news priority, before new work: its status is what is left of an
// election under way. Its first list and resyncs go at low priority.
// Before: at a new object's priority (0), behind every piece of news of
// the targets.
func TestBoundProxyChangesGoAtProgressPriority(t *testing.T) {
	pod := func(name, rv string) *corev1.Pod {
		p := &corev1.Pod{}
		p.Namespace, p.Name, p.ResourceVersion = "team", name, rv
		return p
	}
	h := boundProxyEvents()
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		send func(q priorityqueue.PriorityQueue[reconcile.Request])
		want int
	}{
		{"created", func(q priorityqueue.PriorityQueue[reconcile.Request]) {
			h.Create(ctx, event.CreateEvent{Object: pod("p", "1")}, q)
		}, fleet.ProgressPriority},
		{"in the first list", func(q priorityqueue.PriorityQueue[reconcile.Request]) {
			h.Create(ctx, event.CreateEvent{Object: pod("p", "1"), IsInInitialList: true}, q)
		}, handler.LowPriority},
		{"bound", func(q priorityqueue.PriorityQueue[reconcile.Request]) {
			h.Update(ctx, event.UpdateEvent{ObjectOld: pod("p", "1"), ObjectNew: pod("p", "2")}, q)
		}, fleet.ProgressPriority},
		{"a resync", func(q priorityqueue.PriorityQueue[reconcile.Request]) {
			h.Update(ctx, event.UpdateEvent{ObjectOld: pod("p", "2"), ObjectNew: pod("p", "2")}, q)
		}, handler.LowPriority},
		{"deleted", func(q priorityqueue.PriorityQueue[reconcile.Request]) {
			h.Delete(ctx, event.DeleteEvent{Object: pod("p", "2")}, q)
		}, fleet.ProgressPriority},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := priorityqueue.New[reconcile.Request]("test")
			defer q.ShutDown()
			tc.send(q)
			item, priority, _ := q.GetWithPriority()
			assert.Equal(t, "p", item.Name)
			assert.Equal(t, tc.want, priority)
		})
	}
}
