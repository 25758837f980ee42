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
	h.chaperons = append(h.chaperons, chaperonWatch{queue: q})
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

// A watcher's keep decides, per target and proxy, whether news reaches its
// queue; a watcher without keep hears everything.
func TestChaperonNewsKeptByWatcher(t *testing.T) {
	all := priorityqueue.New[reconcile.Request]("all")
	defer all.ShutDown()
	some := priorityqueue.New[reconcile.Request]("some")
	defer some.ShutDown()
	var asked []string
	keep := func(key proxy.TargetKey, nn types.NamespacedName) bool {
		asked = append(asked, key.Name+"/"+nn.Name)
		return key.Name == "c1" && nn.Name == "bound"
	}
	h := &hub{chaperons: []chaperonWatch{{queue: all}, {queue: some, keep: keep}}}
	pc := func(name string) *v1alpha1.PodChaperon {
		pc := &v1alpha1.PodChaperon{}
		pc.Annotations = map[string]string{v1alpha1.AnnotationParentNamespace: "team", v1alpha1.AnnotationParentName: name}
		return pc
	}
	h.chaperonChanged(proxy.TargetKey{Name: "c1"}, pc("bound"))
	h.chaperonChanged(proxy.TargetKey{Name: "c2"}, pc("bound"))
	h.chaperonChanged(proxy.TargetKey{Name: "c1"}, pc("pending"))

	assert.Equal(t, []string{"c1/bound", "c2/bound", "c1/pending"}, asked)
	assert.Equal(t, 2, all.Len(), "bound and pending")
	assert.Equal(t, 1, some.Len())
	item, priority, _ := some.GetWithPriority()
	assert.Equal(t, "bound", item.Name)
	assert.Equal(t, ProgressPriority, priority)
}
