package follow

import (
	"context"
	"errors"
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
	"github.com/fleetlet/fleetlet/pkg/source/gc"
)

// Collectors returns the garbage collector's hooks for copies: one per
// kind (ConfigMap, Secret, ServiceAccount, then each other allowed Kind,
// resolved at each pass). Each drops from a copy the followers whose proxy
// is gone (judged by gc.Scope.Orphan: minimum age, confirmed uncached) and
// deletes a copy no one follows any more. A pass also sets
// fleetlet_follow_objects.
func (f *Follower) Collectors() []gc.Collector {
	out := []gc.Collector{
		collector{f: f, kind: KindConfigMap},
		collector{f: f, kind: KindSecret},
		collector{f: f, kind: KindServiceAccount},
		collector{f: f, kind: KindResourceClaimTemplate},
		collector{f: f, kind: KindResourceClaim},
	}
	kinds := make([]string, 0, len(f.allowed))
	for k := range f.allowed {
		if exactFields[schema.GroupKind{Kind: k}] == nil {
			kinds = append(kinds, k)
		}
	}
	slices.Sort(kinds)
	for _, k := range kinds {
		out = append(out, collector{f: f, kind: k})
	}
	return out
}

type collector struct {
	f    *Follower
	kind string
}

// Kind implements gc.Collector.
func (c collector) Kind() string { return "Followed" + c.kind }

// Collect implements gc.Collector.
func (c collector) Collect(ctx context.Context, s *gc.Scope) error {
	gvk := specGVK(c.kind)
	if exactFields[gvk.GroupKind()] == nil && gvk.Group != resourceV1.Group {
		var ok bool
		if gvk, ok = c.f.allowedGVK(c.kind); !ok {
			return nil
		}
	}
	cluster := s.Target.Key().String()
	list, err := c.f.listOwned(ctx, s.Target.Client(), gvk, s.Namespace)
	if err != nil {
		if skippable(gvk, err) {
			return nil
		}
		return s.ListError(err)
	}
	s.Checked(len(list))
	var errs []error
	kept := 0
	for i := range list {
		obj := &list[i]
		if !s.Owned(obj) {
			continue
		}
		if obj.GetDeletionTimestamp() != nil || obj.GetLabels()[v1alpha1.LabelParentUID] != "" {
			// Being deleted, or a claim kept with its pods (package
			// claims, which collects it): no follower's.
			continue
		}
		drop, empty, err := c.orphans(ctx, s, obj)
		if err != nil {
			errs = append(errs, err)
			kept++
			continue
		}
		if len(drop) == 0 && !empty {
			kept++
			continue
		}
		deleted, err := c.f.dropFollowers(ctx, s.Target.Client(), cluster, obj, drop, "its proxy pods are gone")
		if err != nil {
			errs = append(errs, err)
		}
		if !deleted {
			kept++
		}
	}
	c.f.setCount(cluster, gvk.Kind, s.Namespace, kept)
	return errors.Join(errs...)
}

// orphans judges each follower of a copy as the collector judges a
// chaperon: drop are the followers whose proxy is gone. empty is true for
// a copy with no follower at all that is old enough to go (a crash
// between creating it and recording a follower, say).
func (c collector) orphans(ctx context.Context, s *gc.Scope, obj *unstructured.Unstructured) (drop map[types.UID]bool, empty bool, err error) {
	fl := followersOf(obj)
	if len(fl) == 0 {
		reason, err := s.Orphan(ctx, stand(obj, "", ""))
		return nil, reason != "", err
	}
	drop = map[types.UID]bool{}
	for _, uid := range fl.uids() {
		reason, err := s.Orphan(ctx, stand(obj, uid, fl[uid]))
		if err != nil {
			return nil, false, err
		}
		if reason != "" {
			drop[uid] = true
		}
	}
	return drop, false, nil
}

// stand is a stand-in for a copy with one follower, as gc.Scope judges
// remote objects: parent UID label, parent name and namespace annotations,
// and the copy's age.
func stand(obj *unstructured.Unstructured, uid types.UID, name string) *metav1.PartialObjectMetadata {
	p := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{
		Namespace:         obj.GetNamespace(),
		Name:              obj.GetName(),
		UID:               obj.GetUID(),
		CreationTimestamp: obj.GetCreationTimestamp(),
		Labels:            map[string]string{v1alpha1.LabelParentCluster: obj.GetLabels()[v1alpha1.LabelParentCluster]},
		Annotations:       map[string]string{v1alpha1.AnnotationParentNamespace: obj.GetNamespace()},
	}}
	p.SetGroupVersionKind(obj.GroupVersionKind())
	if uid != "" {
		p.Labels[v1alpha1.LabelParentUID] = string(uid)
		p.Annotations[v1alpha1.AnnotationParentName] = name
	}
	return p
}
