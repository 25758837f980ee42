// pending: a pod no cluster can run keeps pending candidates in the
// --pending-targets best targets only, until the next round.

package elector

import (
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/fleetlet/fleetlet/pkg/proxy"
)

// trimmedRound is what one round that no cluster could take left out: the
// targets whose pending candidate was removed, and until when none is made
// there again. It is kept in memory only: it decides no phase, and after a
// restart the worst is one more round of candidates, trimmed again.
type trimmedRound struct {
	until time.Time
	// why is, per target trimmed, what its candidate had answered: the
	// pod's Elected=False keeps saying it while the target is kept out.
	why map[proxy.TargetKey]string
}

// keptOut says until when no candidate is made again in a target whose
// pending candidate was trimmed, and what that candidate had answered
// (false: make one). A target that was not eligible at the trim (cordoned,
// say) is not kept out: once eligible, it gets its candidate at once.
func (r *Reconciler) keptOut(uid types.UID, key proxy.TargetKey) (until time.Time, why string, out bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	round, ok := r.trimmed[uid]
	if !ok {
		return time.Time{}, "", false
	}
	if !r.clock.Now().Before(round.until) {
		delete(r.trimmed, uid)
		return time.Time{}, "", false
	}
	why, out = round.why[key]
	return round.until, why, out
}

// noteTrimmed records a target whose pending candidate was removed, and
// what it had answered; the round lasts RetryInterval from its first trim.
func (r *Reconciler) noteTrimmed(uid types.UID, key proxy.TargetKey, why string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	round, ok := r.trimmed[uid]
	if !ok || !r.clock.Now().Before(round.until) {
		round = trimmedRound{until: r.clock.Now().Add(r.opts.RetryInterval), why: map[proxy.TargetKey]string{}}
		r.trimmed[uid] = round
	}
	round.why[key] = why
}

// forget drops what the elector remembers of a proxy's election: it is
// decided, or the proxy is going.
func (r *Reconciler) forget(uid types.UID) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.trimmed, uid)
	delete(r.firstReservation, uid)
	delete(r.awaitingRoom, uid)
}
