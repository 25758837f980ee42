// freshness: when the cache's word that a chaperon's pod was never created
// can be taken without asking the API server, and when a pass waits for the
// cache to show our own last status write.

package chaperon

import (
	"slices"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
)

// takeoverMargin is how long after this controller started to act a
// chaperon may still have been written by the manager that acted before it
// (its last writes in flight as it lost the lead).
const takeoverMargin = 30 * time.Second

// leadingSince records when this controller started to act.
func (r *PodChaperonReconciler) leadingSince(t time.Time) { r.leading.Store(&t) }

// cacheMayBeBehind reports whether the cached ch may lack a record of its
// pod's creation, so that the API server must be asked before a pod is
// created. Only this controller records a creation, so the cache can lack
// one only when it has not shown a status write of ours (no pass acts on
// it then, unless it waited past ownWriteMemory), or when the chaperon is
// older than this controller's lead: a manager before this one may have
// written it. A burst of new chaperons costs no read.
func (r *PodChaperonReconciler) cacheMayBeBehind(ch *v1alpha1.PodChaperon) bool {
	if r.writes.behind(ch.UID, ch.ResourceVersion) {
		return true
	}
	since := r.leading.Load()
	return since == nil || !ch.CreationTimestamp.After(since.Add(takeoverMargin))
}

// ownWriteMemory bounds how long a pass waits for the cache to show a
// status write of ours: a relist may skip its version, so that no event
// ever shows it; the cache has moved on long before.
const ownWriteMemory = 5 * time.Second

// ownWrites remembers, per chaperon, the version our last status write made
// until the cache shows it, and whether a pass waits for that.
//
// A pass that read the chaperon from a cache behind our own write would
// write its status again from the version before it, and a status write is
// locked on what it read (patchStatus): that write fails, and the API
// server must be asked. Before, that was a conflict and a read for about
// one chaperon in three. The cache's events come in order, so until the
// event of our version arrives every version the cache shows predates it;
// the pass waits for that event (the predicate lets it through) instead.
//
// The event of a write can come before the write's answer does, and a
// write that changes nothing makes no version: the versions the cache
// showed last are kept, and a write of one of them is not waited for.
type ownWrites struct {
	mu sync.Mutex
	m  map[types.UID]*ownWrite
	// shown are, per chaperon, the versions the cache showed last, the
	// newest last.
	shown map[types.UID][]string
}

// shownKept is how many versions are kept per chaperon in shown: far more
// than can come between a write and its answer.
const shownKept = 8

type ownWrite struct {
	// made is the resourceVersion our write made.
	made string
	at   time.Time
	// waiting: a pass waits for the cache to show made.
	waiting bool
}

// wrote records that a write of ours made version made of uid.
func (w *ownWrites) wrote(uid types.UID, made string, now time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if slices.Contains(w.shown[uid], made) {
		delete(w.m, uid) // the cache showed it already
		return
	}
	if w.m == nil {
		w.m = map[types.UID]*ownWrite{}
	}
	w.m[uid] = &ownWrite{made: made, at: now}
}

// behind tells whether the cache's version rv of uid predates our last
// write to it.
func (w *ownWrites) behind(uid types.UID, rv string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	e, ok := w.m[uid]
	return ok && e.made != rv
}

// wait is behind for at most ownWriteMemory after the write, and when it
// is, records that a pass waits for the event that shows our write (seen
// then reports it).
func (w *ownWrites) wait(uid types.UID, rv string, now time.Time) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	e, ok := w.m[uid]
	if !ok || e.made == rv || now.Sub(e.at) > ownWriteMemory {
		return false
	}
	e.waiting = true
	return true
}

// seen records that the cache shows version rv of uid (every update event
// calls it, in order): the write that made it is forgotten, and seen
// reports whether a pass waits for it.
func (w *ownWrites) seen(uid types.UID, rv string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.shown == nil {
		w.shown = map[types.UID][]string{}
	}
	shown := append(w.shown[uid], rv)
	w.shown[uid] = shown[max(0, len(shown)-shownKept):]
	e, ok := w.m[uid]
	if !ok || e.made != rv {
		return false
	}
	delete(w.m, uid)
	return e.waiting
}

// forget drops what is kept for uid (the chaperon is gone).
func (w *ownWrites) forget(uid types.UID) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.m, uid)
	delete(w.shown, uid)
}

// waitForOwnWrite is how long a pass that waits for the cache to show our
// write comes back without the event (a relist skipped it).
const waitForOwnWrite = time.Second

// createdPods remembers, per chaperon, when this controller created its pod,
// until the cache shows the pod: a candidate's creation is not recorded in
// its status (recordWaits), so a pass that runs before the pod's event
// would otherwise create it again (an AlreadyExists and a read).
type createdPods struct {
	mu sync.Mutex
	m  map[types.UID]time.Time
	// swept is when entries past ownWriteMemory were last dropped.
	swept time.Time
}

// created records that the pod of chaperon uid was created at now. Entries
// whose pod's event never came are dropped at most once per
// ownWriteMemory, not on every creation of a burst.
func (c *createdPods) created(uid types.UID, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[types.UID]time.Time{}
	}
	if now.Sub(c.swept) > ownWriteMemory {
		for k, at := range c.m {
			if now.Sub(at) > ownWriteMemory {
				delete(c.m, k)
			}
		}
		c.swept = now
	}
	c.m[uid] = now
}

// lately reports whether the pod of chaperon uid was created within
// ownWriteMemory of now and the cache has not shown it yet.
func (c *createdPods) lately(uid types.UID, now time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	at, ok := c.m[uid]
	return ok && now.Sub(at) <= ownWriteMemory
}

// shown forgets the creation of chaperon uid's pod: the cache shows the
// pod, or the chaperon is gone.
func (c *createdPods) shown(uid types.UID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.m, uid)
}
