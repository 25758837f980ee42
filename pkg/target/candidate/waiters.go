package candidate

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
)

// waiter is a candidate the plugin answered Wait at Permit.
type waiter struct {
	pod   types.NamespacedName
	ref   chaperonRef
	since time.Time
}

// waiters indexes the candidates waiting at Permit by pod and by chaperon,
// so that a chaperon event finds its candidate at once.
//
// A candidate is registered before Permit reads its chaperon, and stays
// registered until the plugin allows or rejects it, or Unreserve says the
// scheduler stopped waiting. Between Permit's answer and the framework's
// registration of the waiting pod there is a short window in which an event
// finds no waiting pod yet; the decision is then retried shortly (see
// Plugin.decideNext).
type waiters struct {
	mu         sync.Mutex
	byPod      map[types.UID]waiter
	byChaperon map[types.NamespacedName]sets.Set[types.UID]
}

func newWaiters() *waiters {
	return &waiters{byPod: map[types.UID]waiter{}, byChaperon: map[types.NamespacedName]sets.Set[types.UID]{}}
}

func (w *waiters) add(uid types.UID, wt waiter) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if old, ok := w.byPod[uid]; ok {
		w.unindex(uid, old)
	}
	w.byPod[uid] = wt
	s := w.byChaperon[wt.ref.key]
	if s == nil {
		s = sets.New[types.UID]()
		w.byChaperon[wt.ref.key] = s
	}
	s.Insert(uid)
	waitingPods.Set(float64(len(w.byPod)))
}

// remove unregisters a candidate; ok is false when it was not registered
// (someone else already ended its wait).
func (w *waiters) remove(uid types.UID) (waiter, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	wt, ok := w.byPod[uid]
	if !ok {
		return waiter{}, false
	}
	delete(w.byPod, uid)
	w.unindex(uid, wt)
	waitingPods.Set(float64(len(w.byPod)))
	return wt, true
}

func (w *waiters) unindex(uid types.UID, wt waiter) {
	if s := w.byChaperon[wt.ref.key]; s != nil {
		s.Delete(uid)
		if s.Len() == 0 {
			delete(w.byChaperon, wt.ref.key)
		}
	}
}

func (w *waiters) get(uid types.UID) (waiter, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	wt, ok := w.byPod[uid]
	return wt, ok
}

// forChaperon returns the candidates of a chaperon (normally one).
func (w *waiters) forChaperon(key types.NamespacedName) []types.UID {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.byChaperon[key].UnsortedList()
}

// all returns every registered candidate.
func (w *waiters) all() []types.UID {
	w.mu.Lock()
	defer w.mu.Unlock()
	uids := make([]types.UID, 0, len(w.byPod))
	for uid := range w.byPod {
		uids = append(uids, uid)
	}
	return uids
}

func (w *waiters) len() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.byPod)
}
