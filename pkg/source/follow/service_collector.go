package follow

import (
	"context"
	"errors"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fleetlet/fleetlet/pkg/source/gc"
)

// ServiceCollector is the garbage collector's hook for Service copies:
// it deletes a copy whose Service no longer exists in the source (deleted
// while this source's manager was not running, say: the Service
// controller removes the others as their delegates come and go).
func (f *Follower) ServiceCollector() gc.Collector { return serviceCollector{f} }

type serviceCollector struct{ f *Follower }

// Kind implements gc.Collector.
func (serviceCollector) Kind() string { return "Followed" + KindService }

// Collect implements gc.Collector.
func (c serviceCollector) Collect(ctx context.Context, s *gc.Scope) error {
	var list corev1.ServiceList
	if err := s.Target.Client().List(ctx, &list, client.InNamespace(s.Namespace), s.OwnedSelector()); err != nil {
		return s.ListError(err)
	}
	s.Checked(len(list.Items))
	var errs []error
	kept := 0
	for i := range list.Items {
		cp := &list.Items[i]
		if !s.Owned(cp) || cp.DeletionTimestamp != nil {
			continue
		}
		gone, err := c.sourceGone(ctx, cp)
		if err == nil && gone {
			err = s.Delete(ctx, cp, gc.ReasonSourceGone)
		}
		if err != nil {
			errs = append(errs, err)
		}
		if err != nil || !gone {
			kept++
		}
	}
	c.f.setCount(s.Target.Key().String(), KindService, s.Namespace, kept)
	return errors.Join(errs...)
}

// sourceGone reports whether the Service a copy stands for is gone from
// the source: absent from the cache, and confirmed from the API server.
func (c serviceCollector) sourceGone(ctx context.Context, cp *corev1.Service) (bool, error) {
	key := types.NamespacedName{Namespace: cp.Namespace, Name: cp.Name}
	for _, r := range []client.Reader{c.f.opts.Source, c.f.opts.SourceAPI} {
		err := r.Get(ctx, key, &corev1.Service{})
		if err == nil {
			return false, nil
		}
		if !apierrors.IsNotFound(err) {
			return false, err
		}
	}
	return true, nil
}
