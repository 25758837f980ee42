package follow

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// EnsureService creates or updates this source's copy of the Service src
// in its namespace of a target (ServiceCopy). A Service of that name this
// source did not create is a clash: a *Refusal, and that Service is left
// untouched; so is a target that does not let this source manage
// Services (ReasonForbidden). A copy whose headless-ness changed is
// recreated (a cluster IP never changes). Conflicts are retried. It
// returns the copy as the target holds it.
func (f *Follower) EnsureService(ctx context.Context, target client.Client, targetName string, src *corev1.Service) (*corev1.Service, error) {
	cp, err := f.ensureService(ctx, target, targetName, src)
	f.countError(targetName, err)
	return cp, err
}

func (f *Follower) ensureService(ctx context.Context, target client.Client, targetName string, src *corev1.Service) (*corev1.Service, error) {
	it := item{gvk: coreV1.WithKind(KindService), name: src.Name, what: KindService + " " + src.Name}
	want := ServiceCopy(src, f.opts.SourceName, Exposure{LoadBalancers: f.opts.ServiceLoadBalancers, NodePorts: f.opts.ServiceNodePorts})
	log := f.opts.Logger.WithValues("target", targetName, "kind", KindService, "object", klog.KObj(src))
	var cp *corev1.Service
	err := retry.OnError(conflictBackoff, retriable, func() error {
		var existing corev1.Service
		err := target.Get(ctx, types.NamespacedName{Namespace: src.Namespace, Name: src.Name}, &existing)
		switch {
		case apierrors.IsNotFound(err):
			log.V(1).Info("Creating a copy")
			created := want.DeepCopy()
			if err := target.Create(ctx, created); err != nil {
				return err
			}
			f.addCount(targetName, KindService, src.Namespace, 1)
			cp = created
			return nil
		case err != nil:
			return err
		case !f.owned(&existing):
			return f.clash(it, &existing)
		case existing.DeletionTimestamp != nil:
			return fmt.Errorf("the copy of Service %s in %s is being deleted; retrying later", klog.KObj(src), targetName)
		case headlessChanged(&existing, want):
			log.Info("Recreating a copy whose source changed its headless-ness")
			if err := deleteService(ctx, target, &existing); err != nil {
				return err
			}
			f.addCount(targetName, KindService, src.Namespace, -1)
			return apierrors.NewConflict(corev1.Resource("services"), src.Name, errors.New("recreating"))
		}
		next := keepAllocated(want, &existing)
		if upToDate(&existing, next) {
			cp = &existing
			return nil
		}
		updated := existing.DeepCopy()
		updated.Labels, updated.Annotations = next.Labels, next.Annotations
		for k, v := range existing.Annotations {
			if targetOwnedAnnotation(serviceGK, k) {
				updated.Annotations[k] = v
			}
		}
		updated.Spec = next.Spec
		log.V(1).Info("Updating a copy")
		if err := target.Update(ctx, updated); err != nil {
			return err
		}
		cp = updated
		return nil
	})
	if err != nil {
		var refusal *Refusal
		if errors.As(err, &refusal) {
			return nil, err
		}
		if r := unavailable(it, err); r != nil {
			return nil, r
		}
		return nil, fmt.Errorf("copying Service %s to %s: %w", klog.KObj(src), targetName, err)
	}
	return cp, nil
}

// RemoveService deletes this source's copy of a Service in a target, if
// there is one; a Service of that name that is not this source's is left
// alone. It reports whether a copy was deleted.
func (f *Follower) RemoveService(ctx context.Context, target client.Client, targetName, namespace, name string) (bool, error) {
	var existing corev1.Service
	err := target.Get(ctx, types.NamespacedName{Namespace: namespace, Name: name}, &existing)
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err == nil && (!f.owned(&existing) || existing.DeletionTimestamp != nil) {
		return false, nil
	}
	if err == nil {
		f.opts.Logger.Info("Deleting a Service copy no delegate there needs", "target", targetName, "object", klog.KObj(&existing))
		err = deleteService(ctx, target, &existing)
	}
	if err != nil {
		f.countError(targetName, err)
		return false, fmt.Errorf("removing the copy of Service %s/%s in %s: %w", namespace, name, targetName, err)
	}
	f.addCount(targetName, KindService, namespace, -1)
	return true, nil
}

// deleteService deletes exactly the copy read (see deleteCopy).
func deleteService(ctx context.Context, target client.Client, svc *corev1.Service) error {
	err := target.Delete(ctx, svc, client.Preconditions{UID: ptr.To(svc.UID), ResourceVersion: ptr.To(svc.ResourceVersion)})
	return client.IgnoreNotFound(err)
}
