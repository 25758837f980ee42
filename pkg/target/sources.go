package target

import (
	"context"
	"sync"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
)

// hub fans the registry's events out to the controllers watching them
// through ChaperonSource and TargetChangeSource.
type hub struct {
	mu        sync.RWMutex
	chaperons []workqueue.TypedInterface[reconcile.Request]
	changes   []changeWatch
}

type changeWatch struct {
	ctx   context.Context
	queue workqueue.TypedInterface[reconcile.Request]
	proxy func(context.Context, Key) []reconcile.Request
}

// chaperonChanged enqueues, for every watcher, the proxy a chaperon (or a
// pod it holds, whose parent annotations are the same) stands for.
func (h *hub) chaperonChanged(_ Key, pc *v1alpha1.PodChaperon) {
	ns, name := pc.Annotations[v1alpha1.AnnotationParentNamespace], pc.Annotations[v1alpha1.AnnotationParentName]
	if ns == "" || name == "" {
		return
	}
	req := reconcile.Request{NamespacedName: types.NamespacedName{Namespace: ns, Name: name}}
	h.mu.RLock()
	defer h.mu.RUnlock()
	for _, q := range h.chaperons {
		q.Add(req)
	}
}

// targetChanged enqueues, for every watcher, the requests its map gives for
// the target, off the caller's goroutine (a map may list from a cache).
func (h *hub) targetChanged(key Key) {
	h.mu.RLock()
	watches := append([]changeWatch(nil), h.changes...)
	h.mu.RUnlock()
	for _, w := range watches {
		go func() {
			if w.ctx.Err() != nil {
				return
			}
			for _, req := range w.proxy(w.ctx, key) {
				w.queue.Add(req)
			}
		}()
	}
}

// ChaperonSource is a source for a controller of proxies: every change of
// one of this source's PodChaperons in any target, or of a pod one holds,
// enqueues the proxy it stands for. Targets' caches start on demand
// (Cluster.WatchChaperons); a cache delivers its chaperons once more when it
// has synced. Events from before the controller starts are not queued: its
// own first list of proxies covers them.
func (r *Registry) ChaperonSource() source.Source {
	return source.Func(func(_ context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
		r.hub.mu.Lock()
		defer r.hub.mu.Unlock()
		r.hub.chaperons = append(r.hub.chaperons, q)
		return nil
	})
}

// TargetChangeSource is a source that enqueues, after a target's state
// changed (health, summary, added or removed), the proxies proxiesOf says
// that change may concern.
func (r *Registry) TargetChangeSource(proxiesOf func(context.Context, Key) []reconcile.Request) source.Source {
	return source.Func(func(ctx context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
		r.hub.mu.Lock()
		defer r.hub.mu.Unlock()
		r.hub.changes = append(r.hub.changes, changeWatch{ctx: ctx, queue: q, proxy: proxiesOf})
		return nil
	})
}
