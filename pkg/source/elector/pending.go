// pending: a pod no cluster can run keeps pending candidates in the
// --pending-targets best targets only, until the next round or until room
// for it appears in a target left out.

package elector

import (
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
	"github.com/fleetlet/fleetlet/pkg/proxy"
	"github.com/fleetlet/fleetlet/pkg/source/fleet"
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
	// retried are the targets let back in this round because room for
	// the pod appeared there (untrim): once per target and round, so that
	// a target whose pods come and go does not make and trim a candidate
	// on each change.
	retried map[proxy.TargetKey]bool
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
		round = trimmedRound{until: r.clock.Now().Add(r.opts.RetryInterval), why: map[proxy.TargetKey]string{}, retried: map[proxy.TargetKey]bool{}}
		r.trimmed[uid] = round
	}
	round.why[key] = why
}

// untrim lets a trimmed target have a candidate again before the round is
// over, once per round: room that fits the pod appeared there (the losing
// candidates of a burst that held it went, say), so its answer may be
// another now. It tells whether the target was kept out and is no more.
func (r *Reconciler) untrim(uid types.UID, key proxy.TargetKey) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	round, ok := r.trimmed[uid]
	if !ok || !r.clock.Now().Before(round.until) {
		return false
	}
	if _, out := round.why[key]; !out || round.retried[key] {
		return false
	}
	delete(round.why, key)
	round.retried[key] = true
	return true
}

// roomFor tells whether a target's summary shows room for a pod of
// requests: every resource it asks for listed and free in all, a pod
// slot, and a node with room for it (largestFree). A resource the summary
// does not list is no room: no node there offers it, and a cluster
// autoscaler may be what brings it.
func roomFor(summary *v1alpha1.ClusterSummaryStatus, requests corev1.ResourceList) bool {
	free := fleet.Free(summary)
	if free == nil {
		return false
	}
	if slots, ok := free[corev1.ResourcePods]; ok && slots.Value() < 1 {
		return false
	}
	for name, want := range requests {
		if name == corev1.ResourcePods || want.IsZero() {
			continue
		}
		if have, ok := free[name]; !ok || want.Cmp(have) > 0 {
			return false
		}
	}
	return !noNodeFits(summary, requests)
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
