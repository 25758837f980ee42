package fleet

import (
	"context"
	"sync"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
	"github.com/fleetlet/fleetlet/pkg/proxy"
)

// hub fans the registry's events out to the controllers watching them
// through ChaperonSource and TargetChangeSource.
type hub struct {
	mu        sync.RWMutex
	chaperons []chaperonWatch
	changes   []changeWatch
	// view reads a target's state now; last is what watchers were last
	// told of it.
	view func(proxy.TargetKey) View
	last map[proxy.TargetKey]View
}

// chaperonWatch is a ChaperonSource's queue and what it keeps (nil: all).
type chaperonWatch struct {
	queue workqueue.TypedInterface[reconcile.Request]
	keep  func(proxy.TargetKey, types.NamespacedName) bool
}

type changeWatch struct {
	ctx   context.Context
	queue workqueue.TypedInterface[reconcile.Request]
	proxy func(context.Context, Change) []reconcile.Request
}

// ProgressPriority is the priority at which news of a target about work
// under way (a chaperon or a pod it holds changed) is queued: above a new
// proxy's (0), so that elections under way finish (a candidate reserved, a
// delegate admitted, the proxy pinned, its delegate's status copied back)
// before new ones take the API servers' time. The feedback controller
// queues a bound proxy's own changes at it too.
const ProgressPriority = 10

// chaperonChanged enqueues, for every watcher that keeps it, the proxy a
// chaperon (or a pod it holds, whose parent annotations are the same) in
// target key stands for, at ProgressPriority.
func (h *hub) chaperonChanged(key proxy.TargetKey, pc *v1alpha1.PodChaperon) {
	ns, name := pc.Annotations[v1alpha1.AnnotationParentNamespace], pc.Annotations[v1alpha1.AnnotationParentName]
	if ns == "" || name == "" {
		return
	}
	req := reconcile.Request{NamespacedName: types.NamespacedName{Namespace: ns, Name: name}}
	h.mu.RLock()
	defer h.mu.RUnlock()
	for _, w := range h.chaperons {
		if w.keep == nil || w.keep(key, req.NamespacedName) {
			AddAt(w.queue, ProgressPriority, req)
		}
	}
}

// targetChanged tells every watcher what changed in the target since it
// was last told, when anything did, and enqueues the requests its map
// gives, at low priority (work on proxies already under way goes first),
// off the caller's goroutine (a map may list from a cache). A probe that
// changed nothing a watcher looks at enqueues nothing.
func (h *hub) targetChanged(key proxy.TargetKey) {
	h.mu.Lock()
	change := Change{Key: key, Before: h.last[key], After: h.view(key)}
	if change.After.Present {
		h.last[key] = change.After
	} else {
		delete(h.last, key)
	}
	watches := append([]changeWatch(nil), h.changes...)
	h.mu.Unlock()
	if !change.Any() {
		return
	}
	for _, w := range watches {
		go func() {
			if w.ctx.Err() != nil {
				return
			}
			AddAt(w.queue, handler.LowPriority, w.proxy(w.ctx, change)...)
		}()
	}
}

// AddAt adds requests at a priority to a controller's priority queue (any
// other queue takes them in order).
func AddAt(q workqueue.TypedInterface[reconcile.Request], priority int, reqs ...reconcile.Request) {
	if len(reqs) == 0 {
		return
	}
	if pq, ok := q.(priorityqueue.PriorityQueue[reconcile.Request]); ok {
		pq.AddWithOpts(priorityqueue.AddOpts{Priority: ptr.To(priority)}, reqs...)
		return
	}
	for _, req := range reqs {
		q.Add(req)
	}
}

// ChaperonSource is a source for a controller of proxies: every change of
// one of this source's PodChaperons in any target, or of a pod one holds,
// enqueues the proxy it stands for, at ProgressPriority, when keep (nil:
// always) says the news of that target concerns that proxy. keep is called
// on the caches' event goroutines: it reads caches, and bounds any wait.
// Targets' caches start on demand (Cluster.WatchChaperons); a cache
// delivers its chaperons once more when it has synced. Events from before
// the controller starts are not queued: its own first list of proxies
// covers them.
func (r *Registry) ChaperonSource(keep func(proxy.TargetKey, types.NamespacedName) bool) source.Source {
	return source.Func(func(_ context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
		r.hub.mu.Lock()
		defer r.hub.mu.Unlock()
		r.hub.chaperons = append(r.hub.chaperons, chaperonWatch{queue: q, keep: keep})
		return nil
	})
}

// TargetChangeSource is a source that enqueues, after a target's state
// changed (health, drain, summary, added or removed), the proxies proxiesOf
// says that change may concern.
func (r *Registry) TargetChangeSource(proxiesOf func(context.Context, Change) []reconcile.Request) source.Source {
	return source.Func(func(ctx context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
		r.hub.mu.Lock()
		defer r.hub.mu.Unlock()
		r.hub.changes = append(r.hub.changes, changeWatch{ctx: ctx, queue: q, proxy: proxiesOf})
		return nil
	})
}
