package services

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/fleetlet/fleetlet/pkg/proxy"
)

// ensuredFor is how long a copy written for one version of its Service is
// taken as still there without a read: a copy changed or deleted in the
// target by hand is repaired within that time once its proxies move.
const ensuredFor = time.Minute

// holding is what this controller knows a target holds of one Service.
type holding struct {
	// copy: the copy may be there; slices: fleetlet's EndpointSlices may.
	copy, slices bool
	// version is the Service's resourceVersion the copy (uid) was last
	// written or read up to date from, at ensured.
	version string
	uid     types.UID
	ensured time.Time
}

// heldCopies are, per Service and target, what may be there; a target
// without an entry for a Service (after a start, or a target that came
// since) is unknown, and is looked at.
type heldCopies struct {
	mu        sync.Mutex
	byService map[types.NamespacedName]map[proxy.TargetKey]holding
}

func (h *heldCopies) known(key types.NamespacedName) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	_, ok := h.byService[key]
	return ok
}

// get is what a target may hold of a Service; seen is false when it has
// not been looked at since the start or since it came.
func (h *heldCopies) get(key types.NamespacedName, tk proxy.TargetKey) (v holding, seen bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	v, seen = h.byService[key][tk]
	return v, seen
}

func (h *heldCopies) set(key types.NamespacedName, tk proxy.TargetKey, v holding) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.byService[key] == nil {
		h.byService[key] = map[proxy.TargetKey]holding{}
	}
	h.byService[key][tk] = v
}

func (h *heldCopies) forget(key types.NamespacedName) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.byService, key)
}

// fresh reports whether a copy was written or seen up to date for this
// version of its Service lately.
func (v holding) fresh(version string, now time.Time) bool {
	return v.copy && v.version == version && now.Sub(v.ensured) < ensuredFor
}
