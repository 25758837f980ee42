// freshness: when the cache's word that a chaperon's pod was never created
// can be taken without asking the API server.

package chaperon

import (
	"time"

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
// one only when it is behind a write of ours (the version a status write
// of ours replaced), or when the chaperon is older than this controller's
// lead (a manager before this one may have written it). A burst of new
// chaperons costs no read.
func (r *PodChaperonReconciler) cacheMayBeBehind(ch *v1alpha1.PodChaperon) bool {
	if r.writes.Stale(ch.UID, ch.ResourceVersion) {
		return true
	}
	since := r.leading.Load()
	return since == nil || !ch.CreationTimestamp.After(since.Add(takeoverMargin))
}
