package fleet

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
	"github.com/fleetlet/fleetlet/pkg/proxy"
)

// News of a target about work under way goes before new proxies in a
// controller's queue, also for a proxy already queued as new: elections
// under way finish before new ones start. Before: in the order they came,
// so that in a burst a delegate admitted in its target waited behind every
// proxy created after it before its proxy was pinned, and its status
// copied back.
func TestChaperonNewsGoesBeforeNewProxies(t *testing.T) {
	q := priorityqueue.New[reconcile.Request]("test")
	defer q.ShutDown()
	req := func(name string) reconcile.Request {
		return reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "team", Name: name}}
	}
	chaperonOf := func(name string) *v1alpha1.PodChaperon {
		pc := &v1alpha1.PodChaperon{}
		pc.Annotations = map[string]string{v1alpha1.AnnotationParentNamespace: "team", v1alpha1.AnnotationParentName: name}
		return pc
	}
	h := &hub{}
	h.chaperons = append(h.chaperons, q)
	for _, name := range []string{"new-1", "new-2", "queued"} {
		q.Add(req(name))
	}
	h.chaperonChanged(proxy.TargetKey{Name: "c2"}, chaperonOf("admitted"))
	h.chaperonChanged(proxy.TargetKey{Name: "c2"}, chaperonOf("queued"))
	h.chaperonChanged(proxy.TargetKey{Name: "c2"}, &v1alpha1.PodChaperon{}) // no parent: nothing

	var order []string
	for range 4 {
		item, priority, _ := q.GetWithPriority()
		order = append(order, item.Name)
		if item.Name == "admitted" || item.Name == "queued" {
			assert.Equal(t, ProgressPriority, priority, item.Name)
		}
		q.Done(item)
	}
	assert.ElementsMatch(t, []string{"admitted", "queued"}, order[:2], "first out: %v", order)
	assert.ElementsMatch(t, []string{"new-1", "new-2"}, order[2:], "then: %v", order)
	assert.Zero(t, q.Len(), "left in the queue")
}
