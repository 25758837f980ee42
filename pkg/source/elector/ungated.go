// ungated: phase ungated (the source scheduler binds the proxy), and the losers of an election.

package elector

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
	"github.com/fleetlet/fleetlet/pkg/naming"
	"github.com/fleetlet/fleetlet/pkg/proxy"
	"github.com/fleetlet/fleetlet/pkg/source/fleet"
)

// watchdog looks after an ungated proxy: it deletes losing candidates seen
// late, passes what the user changes on a bound proxy to its delegate
// (syncDelegate), and deletes a proxy that was pinned and ungated but is
// still unbound after UnboundTimeout (nothing waits forever; its controller
// makes a new one).
func (r *Reconciler) watchdog(ctx context.Context, pod *corev1.Pod) (reconcile.Result, error) {
	rec := proxy.ElectedCondition(pod)
	if rec == nil || rec.Status != corev1.ConditionTrue {
		return reconcile.Result{}, nil
	}
	// A loser seen only now still goes (see deleteLosers).
	if record, err := proxy.ParseRecord(rec.Message); err == nil {
		r.deleteLosers(ctx, pod, keyOf(record))
	}
	if pod.Spec.NodeName != "" {
		return reconcile.Result{}, r.syncDelegate(ctx, pod, rec)
	}
	left := r.opts.UnboundTimeout - r.clock.Since(rec.LastTransitionTime.Time)
	if left > 0 {
		return r.requeueAfter(pod, requeueAwaitingSource, left), nil
	}
	r.recorder.Eventf(pod, nil, corev1.EventTypeWarning, EventUnboundDeleted, "Delete", "Pinned and ungated but still not bound after %s: deleting the proxy so that its controller makes a new one", r.opts.UnboundTimeout)
	err := r.client.Delete(ctx, pod, client.Preconditions{UID: ptr.To(pod.UID), ResourceVersion: ptr.To(pod.ResourceVersion)})
	return reconcile.Result{}, client.IgnoreNotFound(err)
}

// deleteLosers deletes the proxy's chaperons in every target but the
// elected one. It reads the targets' caches, which may show a candidate
// only after the proxy was ungated or bound (a cache behind under load, a
// create in flight when the manager restarted): that candidate's event
// brings the proxy back here whatever its phase, so no loser outlives an
// election.
//
// It is best-effort and never waits: each loser is deleted off the
// reconciler's goroutine, so a loser in a slow target or one that does not
// answer never holds up the election (its events when the target answers
// again, or the garbage collector, finish it).
func (r *Reconciler) deleteLosers(ctx context.Context, pod *corev1.Pod, elected proxy.TargetKey) {
	name := types.NamespacedName{Namespace: pod.Namespace, Name: naming.RemoteName(pod.Name, pod.UID)}
	for _, other := range r.registry.List() {
		key := other.Key()
		if key == elected || (key.Namespace != "" && key.Namespace != pod.Namespace) {
			continue
		}
		// From the cache only, never a request per target per pass: a
		// cache that has not synced yet delivers every chaperon it finds
		// as an event when it does, which brings the proxy back here.
		other.WatchChaperons(pod.Namespace)
		cached, synced := other.ChaperonCache(pod.Namespace)
		if !synced {
			continue
		}
		var loser v1alpha1.PodChaperon
		if err := cached.Get(ctx, name, &loser); err != nil ||
			loser.Labels[v1alpha1.LabelParentUID] != string(pod.UID) || loser.DeletionTimestamp != nil {
			continue
		}
		r.deleteLoser(ctx, pod, other, &loser)
	}
}

// loserDeleteTimeout bounds the deletion of one loser and the release of
// what it followed.
const loserDeleteTimeout = 30 * time.Second

// deleteLoser deletes a losing candidate off the reconciler's goroutine,
// once at a time per proxy and target, then releases what it followed
// there. Background propagation: a loser's pod was never bound (it waits
// at Permit for a mark that never comes) and the garbage collector
// deletes it after its chaperon. Measured with `make bench`, 1,000 pods:
// Foreground costs the garbage collector a finalizer patch and live reads
// of each loser (49.2 requests per pod against 46.0, and slower), while
// the candidate scheduler records the rejection of a waiting loser either
// way.
func (r *Reconciler) deleteLoser(ctx context.Context, pod *corev1.Pod, cl *fleet.Cluster, loser *v1alpha1.PodChaperon) {
	key := candidateKey{proxy: pod.UID, target: cl.Key()}
	if r.loserDeleted(loser.UID) {
		// Deleted already; the cache has not seen it go yet.
		return
	}
	if _, busy := r.deletingLosers.LoadOrStore(key, true); busy {
		return
	}
	log := ctrl.LoggerFrom(ctx).WithValues("target", cl.Key().String())
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), loserDeleteTimeout)
	loser = loser.DeepCopy()
	go func() {
		defer cancel()
		defer r.deletingLosers.Delete(key)
		r.forgetCreated(pod.UID, cl.Key())
		err := cl.Client().Delete(ctx, loser, client.PropagationPolicy(metav1.DeletePropagationBackground),
			client.Preconditions{UID: ptr.To(loser.UID)})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			log.V(1).Info("Deleting a losing candidate; again on its next event", "err", err.Error())
			return
		}
		log.V(2).Info("Deleted a losing candidate")
		r.noteLoserDeleted(loser.UID)
		r.release(ctx, pod, cl)
	}()
}

// candidateKey names one proxy's candidate in one target.
type candidateKey struct {
	proxy  types.UID
	target proxy.TargetKey
}

// deletedLoserMemory is how long a deleted loser is remembered, so that
// passes reading a cache that has not seen the deletion yet do not delete
// it again: far longer than a cache lags, short enough to keep the memory
// small.
const deletedLoserMemory = 2 * time.Minute

// noteLoserDeleted remembers a deleted loser, and forgets those deleted
// long ago.
func (r *Reconciler) noteLoserDeleted(uid types.UID) {
	now := r.clock.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.deletedLosers[uid] = now
	if len(r.deletedLosers)%256 == 0 {
		for k, at := range r.deletedLosers {
			if now.Sub(at) > deletedLoserMemory {
				delete(r.deletedLosers, k)
			}
		}
	}
}

// loserDeleted tells whether a loser was deleted lately.
func (r *Reconciler) loserDeleted(uid types.UID) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	at, ok := r.deletedLosers[uid]
	return ok && r.clock.Since(at) <= deletedLoserMemory
}
