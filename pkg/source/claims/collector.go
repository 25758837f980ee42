package claims

import (
	"context"
	"errors"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
	"github.com/fleetlet/fleetlet/pkg/source/gc"
)

// ReasonClaimGone: a claim's copy whose source claim no longer exists, or
// was made again (another UID).
const ReasonClaimGone gc.Reason = "SourceClaimGone"

// Collector is the garbage collector's hook for claims: in each target
// namespace, it deletes this source's copy of a claim once the source
// claim is gone or was made again, confirmed from the source's API
// server, and the copy is older than MinAge. The target's own finalizers
// hold the deletion while a pod there still uses the claim.
type Collector struct {
	// Source reads the source's claims, uncached.
	Source client.Reader
	// MinAge keeps a copy younger than this (a claim being made).
	MinAge time.Duration
	// Now defaults to time.Now.
	Now func() time.Time
}

// Kind implements gc.Collector.
func (Collector) Kind() string { return "Claim" }

// Collect implements gc.Collector.
func (c Collector) Collect(ctx context.Context, s *gc.Scope) error {
	var list corev1.PersistentVolumeClaimList
	if err := s.Target.Client().List(ctx, &list, client.InNamespace(s.Namespace), s.OwnedSelector()); err != nil {
		return s.ListError(err)
	}
	s.Checked(len(list.Items))
	now := time.Now
	if c.Now != nil {
		now = c.Now
	}
	var errs []error
	for i := range list.Items {
		held := &list.Items[i]
		parent := held.Labels[v1alpha1.LabelParentUID]
		if parent == "" || held.DeletionTimestamp != nil || now().Sub(held.CreationTimestamp.Time) < c.MinAge {
			continue
		}
		var src corev1.PersistentVolumeClaim
		err := c.Source.Get(ctx, types.NamespacedName{Namespace: held.Annotations[v1alpha1.AnnotationParentNamespace], Name: held.Annotations[v1alpha1.AnnotationParentName]}, &src)
		switch {
		case apierrors.IsNotFound(err) || (err == nil && string(src.UID) != parent):
			errs = append(errs, s.Delete(ctx, held, ReasonClaimGone))
		case err != nil:
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
