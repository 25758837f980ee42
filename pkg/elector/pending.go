// pending: a pod no cluster can run keeps pending candidates in the
// --pending-targets best targets only, until the next round.

package elector

import (
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"

	"github.com/fleetlet/fleetlet/pkg/target"
)

// trimmedRound is what one round that no cluster could take left out: the
// targets whose pending candidate was removed, and until when none is made
// there again. It is kept in memory only: it decides no phase, and after a
// restart the worst is one more round of candidates, trimmed again.
type trimmedRound struct {
	until   time.Time
	targets sets.Set[target.Key]
}

// keptOut says until when no candidate is made again in a target whose
// pending candidate was trimmed (false: make one). A target that was not
// eligible at the trim (cordoned, say) is not kept out: once eligible, it
// gets its candidate at once.
func (r *Reconciler) keptOut(uid types.UID, key target.Key) (time.Time, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	round, ok := r.trimmed[uid]
	if !ok {
		return time.Time{}, false
	}
	if !r.clock.Now().Before(round.until) {
		delete(r.trimmed, uid)
		return time.Time{}, false
	}
	return round.until, round.targets.Has(key)
}

// noteTrimmed records a target whose pending candidate was removed; the
// round lasts RetryInterval from its first trim.
func (r *Reconciler) noteTrimmed(uid types.UID, key target.Key) {
	r.mu.Lock()
	defer r.mu.Unlock()
	round, ok := r.trimmed[uid]
	if !ok || !r.clock.Now().Before(round.until) {
		round = trimmedRound{until: r.clock.Now().Add(r.opts.RetryInterval), targets: sets.New[target.Key]()}
		r.trimmed[uid] = round
	}
	round.targets.Insert(key)
}

// forget drops what the elector remembers of a proxy's election: it is
// decided, or the proxy is going.
func (r *Reconciler) forget(uid types.UID) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.trimmed, uid)
	delete(r.firstReservation, uid)
}
