package claims

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
)

// MirrorReaper deletes, in the source, a mirror volume whose claim is
// gone (the volume Released, as its reclaim policy Retain leaves it).
// Nothing is lost with it: it stands for the target's copy, which the
// garbage collector removes (Collector).
type MirrorReaper struct {
	Client client.Client
}

// SetupWithManager watches the mirror volumes only.
func (m *MirrorReaper) SetupWithManager(mgr ctrl.Manager) error {
	mirrors := predicate.NewPredicateFuncs(func(o client.Object) bool { return o.GetLabels()[v1alpha1.LabelClaimMirror] == "true" })
	return ctrl.NewControllerManagedBy(mgr).Named("claim-mirrors").
		For(&corev1.PersistentVolume{}, builder.WithPredicates(mirrors)).
		Complete(m)
}

// Reconcile deletes a Released mirror volume.
func (m *MirrorReaper) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	var pv corev1.PersistentVolume
	if err := m.Client.Get(ctx, req.NamespacedName, &pv); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if pv.Labels[v1alpha1.LabelClaimMirror] != "true" || pv.DeletionTimestamp != nil || pv.Status.Phase != corev1.VolumeReleased {
		return reconcile.Result{}, nil
	}
	ctrl.LoggerFrom(ctx).Info("Deleting the mirror volume of a deleted claim", "volume", pv.Name, "claim", pv.Spec.ClaimRef)
	err := m.Client.Delete(ctx, &pv, client.Preconditions{UID: ptr.To(pv.UID)})
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return reconcile.Result{}, nil
	}
	return reconcile.Result{}, err
}
