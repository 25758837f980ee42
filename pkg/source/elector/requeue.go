// requeue: the passes that run for another reason than a proxy's own or
// its candidates' events, counted by why (fleetlet_elector_requeues_total):
// what a burst should see none of but the first few.

package elector

import (
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// Why a proxy runs again: a timer is named for what its pass waits for,
// an enqueue for the change that concerns the proxy.
const (
	requeueStaleCache       = "stale-cache"        // the cache has not seen our last write
	requeueInvalidSpec      = "invalid-spec"       // the sealed spec cannot be opened yet
	requeueAwaitingAnswers  = "awaiting-answers"   // an offer stands, other candidates still deciding
	requeueConflict         = "conflict"           // the record met a newer proxy
	requeueSafety           = "safety"             // candidates deciding: the slow resync after a lost event
	requeueNoCluster        = "no-cluster"         // no target can run it: tried again
	requeueNamespace        = "awaiting-namespace" // a namespace created for it in a target, the source not admitted there yet
	requeuePeers            = "peers"              // spread or anti-affinity over clusters allows no offer now
	requeuePreviousDelegate = "previous-delegate"  // a re-election waits for the old delegate to be gone
	requeueAwaitingBind     = "awaiting-bind"      // the marked winner not bound and started yet
	requeueAwaitingRoom     = "awaiting-room"      // elected, its virtual node shows no room for it yet
	requeueUnreachable      = "unreachable-target" // finalizing waits for a target out of reach (or not watched yet)
	requeueDelegateGoing    = "delegate-going"     // deleted, its delegate still going: the slow resync after a lost event
	requeueTargetNotReady   = "target-not-ready"   // its delegate's target not Ready
	requeueAwaitingSource   = "awaiting-source"    // ungated, the source scheduler has not bound it yet
	requeueTargetEligible   = "target-eligibility" // a target's health, drain or labels changed
	requeueTargetRoom       = "target-room"        // a target has more room, for proxies no cluster could take
	requeueNodeScheduling   = "node-scheduling"    // a virtual node cordoned, uncordoned or tainted
	requeueNodeAllocatable  = "node-allocatable"   // a virtual node's allocatable changed, for proxies headed there
	requeueClaims           = "claims"             // its claims cannot be placed now (missing, being deleted, apart)
	requeueAwaitingClaims   = "awaiting-claims"    // elected, its claims not bound to their mirror volumes in the source yet
	requeueGroup            = "group"              // its group has too few members reserved in one target yet, or backs off
	requeueAdmission        = "admission"          // waiting for a slot (--elections-in-flight): the backstop for a lost wake
)

// timers hold each proxy's pending timed requeue (types.NamespacedName to
// timer). The queue keeps one entry per proxy, at its earliest time, so a
// pass that comes sooner (an event) consumes the timer: only a pass that
// starts once the timer is due is the timer's.
type timers struct{ m sync.Map }

type timer struct {
	reason string
	due    time.Time
}

// requeueAfter is a pass's result that runs the proxy again after d,
// remembered as why.
func (r *Reconciler) requeueAfter(pod *corev1.Pod, reason string, d time.Duration) reconcile.Result {
	r.timers.m.Store(types.NamespacedName{Namespace: pod.Namespace, Name: pod.Name}, timer{reason: reason, due: r.clock.Now().Add(d)})
	return reconcile.Result{RequeueAfter: d}
}

// passStarts counts the pass for key as its timer's when the timer was
// due, and forgets the timer either way: this pass decides anew.
func (r *Reconciler) passStarts(key types.NamespacedName) {
	v, ok := r.timers.m.LoadAndDelete(key)
	if t, _ := v.(timer); ok && !r.clock.Now().Before(t.due) {
		requeuesTotal.WithLabelValues(t.reason).Inc()
	}
}

// requeued counts proxies enqueued by a change, by why, and returns them.
func requeued(reason string, reqs []reconcile.Request) []reconcile.Request {
	if len(reqs) > 0 {
		requeuesTotal.WithLabelValues(reason).Add(float64(len(reqs)))
	}
	return reqs
}
