package proxy

import (
	"sync"

	"k8s.io/apimachinery/pkg/types"
)

// Writes remembers, per object, the resourceVersion a controller last
// wrote over, so that a pass that reads the object from a cache that has
// not seen that write yet knows it: acting on the old version would repeat
// the write (a second patch, a conflict). The write's own watch event
// brings the object back once the cache has it. The zero value is ready.
type Writes struct {
	mu sync.Mutex
	// before is, by UID, the resourceVersion the last write replaced.
	before map[types.UID]string
}

// Wrote records a successful write over the version rv of the object uid.
func (w *Writes) Wrote(uid types.UID, rv string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.before == nil {
		w.before = map[types.UID]string{}
	}
	w.before[uid] = rv
}

// Stale tells whether rv is the version a write of ours already replaced.
// Any other version means the cache has moved past it: forgotten.
func (w *Writes) Stale(uid types.UID, rv string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	old, ok := w.before[uid]
	if !ok {
		return false
	}
	if old == rv {
		return true
	}
	delete(w.before, uid)
	return false
}

// Forget drops what is kept for uid (the object is gone).
func (w *Writes) Forget(uid types.UID) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.before, uid)
}
