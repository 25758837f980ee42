package follow

import (
	"slices"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
)

// clockSkew is how far the source API server's clock (a proxy's
// creationTimestamp) may be ahead of this process's.
const clockSkew = 5 * time.Second

// written remembers, per target and proxy, the copies Ensure may have made
// the proxy a follower of, so that Release reads those by name instead of
// listing every followed kind of the namespace in the target: for the
// usual pod, which needs no copy at all, Release then costs nothing.
//
// It knows every such copy only for a proxy created after the Follower
// was first used (and clockSkew): an older one may have been followed by
// another process (the manager before a restart, the previous leader),
// and is released by listing. A copy it misses all the same keeps a
// follower too many until the garbage collector drops it once the proxy
// is gone.
type written struct {
	mu sync.Mutex
	// since is the first use of the Follower; zero until then.
	since time.Time
	// copies are, per proxy and target, the copies written for it.
	copies map[types.UID]map[string][]copyRef
}

// copyRef names a copy in a target.
type copyRef struct {
	gvk             schema.GroupVersionKind
	namespace, name string
}

// used records the Follower's first use.
func (w *written) used(now time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.since.IsZero() {
		w.since = now
	}
}

// add remembers that the proxy may follow ref in target.
func (w *written) add(target string, proxy types.UID, ref copyRef) {
	w.mu.Lock()
	defer w.mu.Unlock()
	byTarget := w.copies[proxy]
	if byTarget == nil {
		if w.copies == nil {
			w.copies = map[types.UID]map[string][]copyRef{}
		}
		byTarget = map[string][]copyRef{}
		w.copies[proxy] = byTarget
	}
	if !slices.Contains(byTarget[target], ref) {
		byTarget[target] = append(byTarget[target], ref)
	}
}

// take returns, and forgets, the copies the proxy (created at created)
// may follow in target; known is false when this Follower cannot know
// them all.
func (w *written) take(target string, proxy types.UID, created time.Time) (refs []copyRef, known bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if byTarget := w.copies[proxy]; byTarget != nil {
		refs = byTarget[target]
		delete(byTarget, target)
		if len(byTarget) == 0 {
			delete(w.copies, proxy)
		}
	}
	// creationTimestamp is in whole seconds: created at or after the
	// next whole second is after since.
	known = !w.since.IsZero() && !created.Before(w.since.Add(clockSkew).Truncate(time.Second).Add(time.Second))
	return refs, known
}

// forget drops what is remembered for the proxy, in every target.
func (w *written) forget(proxy types.UID) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.copies, proxy)
}
