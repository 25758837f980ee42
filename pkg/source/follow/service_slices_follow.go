package follow

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
)

// KindEndpointSlice is the kind of a global Service's slices in targets.
const KindEndpointSlice = "EndpointSlice"

// EnsureSlices makes this source's EndpointSlices for a Service's copy in
// a target exactly want (GlobalSlices): created, updated or deleted, each
// owned by the copy (so that they go with it). A slice of one of those
// names that is not this source's is a clash, left untouched.
func (f *Follower) EnsureSlices(ctx context.Context, target client.Client, targetName string, owner *corev1.Service, want []discoveryv1.EndpointSlice) error {
	err := f.ensureSlices(ctx, target, targetName, owner, want)
	f.countError(targetName, err)
	return err
}

func (f *Follower) ensureSlices(ctx context.Context, target client.Client, targetName string, owner *corev1.Service, want []discoveryv1.EndpointSlice) error {
	have, err := f.ownSlices(ctx, target, owner.Namespace, owner.Name)
	if err != nil {
		if r := unavailable(sliceItem(owner.Name), err); r != nil {
			return r
		}
		return err
	}
	ref := metav1.OwnerReference{APIVersion: "v1", Kind: KindService, Name: owner.Name, UID: owner.UID}
	var errs []error
	for i := range want {
		w := want[i].DeepCopy()
		w.OwnerReferences = []metav1.OwnerReference{ref}
		cur, ok := have[w.Name]
		delete(have, w.Name)
		switch {
		case !ok:
			err = target.Create(ctx, w)
			if apierrors.IsAlreadyExists(err) {
				err = &Refusal{Object: KindEndpointSlice + " " + w.Name, Reason: ReasonClash,
					Message: fmt.Sprintf("the target already has an EndpointSlice %s that is not this source's", w.Name)}
			} else if err == nil {
				f.addCount(targetName, KindEndpointSlice, w.Namespace, 1)
			}
		case cur.AddressType != w.AddressType:
			err = f.deleteSlice(ctx, target, targetName, &cur)
			if err == nil {
				err = target.Create(ctx, w)
				f.addCount(targetName, KindEndpointSlice, w.Namespace, 1)
			}
		case !sameSlice(&cur, w):
			next := cur.DeepCopy()
			next.Labels, next.Annotations, next.OwnerReferences = w.Labels, w.Annotations, w.OwnerReferences
			next.Ports, next.Endpoints = w.Ports, w.Endpoints
			err = target.Update(ctx, next)
		}
		if err != nil {
			errs = append(errs, err)
		}
	}
	for name := range have {
		s := have[name]
		if err := f.deleteSlice(ctx, target, targetName, &s); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		var refusal *Refusal
		if errors.As(err, &refusal) {
			return refusal
		}
		if r := unavailable(sliceItem(owner.Name), err); r != nil {
			return r
		}
		return fmt.Errorf("the EndpointSlices of Service %s in %s: %w", klog.KObj(owner), targetName, err)
	}
	return nil
}

// RemoveSlices deletes this source's EndpointSlices of a Service in a
// target.
func (f *Follower) RemoveSlices(ctx context.Context, target client.Client, targetName, namespace, service string) error {
	have, err := f.ownSlices(ctx, target, namespace, service)
	if err != nil {
		f.countError(targetName, err)
		return err
	}
	var errs []error
	for name := range have {
		s := have[name]
		errs = append(errs, f.deleteSlice(ctx, target, targetName, &s))
	}
	err = errors.Join(errs...)
	f.countError(targetName, err)
	return err
}

// ownSlices are this source's EndpointSlices of a Service in a target, by
// name.
func (f *Follower) ownSlices(ctx context.Context, target client.Client, namespace, service string) (map[string]discoveryv1.EndpointSlice, error) {
	var list discoveryv1.EndpointSliceList
	if err := target.List(ctx, &list, client.InNamespace(namespace), client.MatchingLabels{
		discoveryv1.LabelServiceName: service,
		discoveryv1.LabelManagedBy:   v1alpha1.EndpointSliceManagedBy,
		v1alpha1.LabelParentCluster:  f.opts.SourceName,
	}); err != nil {
		return nil, fmt.Errorf("listing the EndpointSlices of Service %s/%s: %w", namespace, service, err)
	}
	out := make(map[string]discoveryv1.EndpointSlice, len(list.Items))
	for _, s := range list.Items {
		out[s.Name] = s
	}
	return out, nil
}

func (f *Follower) deleteSlice(ctx context.Context, target client.Client, targetName string, s *discoveryv1.EndpointSlice) error {
	err := target.Delete(ctx, s, client.Preconditions{UID: ptr.To(s.UID)})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err == nil {
		f.addCount(targetName, KindEndpointSlice, s.Namespace, -1)
	}
	return err
}

// sameSlice reports whether a slice already holds want's content.
func sameSlice(cur, want *discoveryv1.EndpointSlice) bool {
	return equality.Semantic.DeepEqual(cur.Endpoints, want.Endpoints) && equality.Semantic.DeepEqual(cur.Ports, want.Ports) &&
		equality.Semantic.DeepEqual(cur.Labels, want.Labels) && equality.Semantic.DeepEqual(cur.OwnerReferences, want.OwnerReferences)
}

// sliceItem names a Service's slices in refusals.
func sliceItem(service string) item {
	return item{gvk: discoveryv1.SchemeGroupVersion.WithKind(KindEndpointSlice), name: service, what: "the EndpointSlices of Service " + service}
}
