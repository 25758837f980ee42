// ungated: phase ungated (the source scheduler binds the proxy), and the losers of an election.

package elector

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
	"github.com/fleetlet/fleetlet/pkg/naming"
	"github.com/fleetlet/fleetlet/pkg/proxy"
	"github.com/fleetlet/fleetlet/pkg/target"
)

// watchdog looks after an ungated proxy: it deletes losing candidates seen
// late, and deletes a proxy that was pinned and ungated but is still
// unbound after UnboundTimeout (nothing waits forever; its controller makes
// a new one).
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
		return reconcile.Result{}, nil
	}
	left := r.opts.UnboundTimeout - r.clock.Since(rec.LastTransitionTime.Time)
	if left > 0 {
		return reconcile.Result{RequeueAfter: left}, nil
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
// It is best-effort: a loser in a target that does not answer never holds
// up the election (its events when the target answers again, or the
// garbage collector, finish it).
func (r *Reconciler) deleteLosers(ctx context.Context, pod *corev1.Pod, elected target.Key) {
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
		if err := deleteChaperon(ctx, other, &loser, pod.UID); err != nil {
			ctrl.LoggerFrom(ctx).V(1).Info("Deleting a losing candidate; again on its next event", "target", key.String(), "err", err.Error())
			continue
		}
		ctrl.LoggerFrom(ctx).V(2).Info("Deleted a losing candidate", "target", key.String())
		r.release(ctx, pod, other)
	}
}
