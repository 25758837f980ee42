package main

import (
	"slices"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
	"github.com/fleetlet/fleetlet/pkg/target/chaperon"
)

// cacheOptions is what the manager's cache keeps: what cacheByObject
// allows, without managed fields (nothing reads who wrote which field, and
// they are a large part of each cached pod).
func (o *managerOptions) cacheOptions() cache.Options {
	return cache.Options{ByObject: o.cacheByObject(), DefaultTransform: cache.TransformStripManagedFields()}
}

// cacheByObject restricts what the manager's cache lists and watches: only
// the sources' heartbeat Leases; only fleetlet's mirror volumes; with --secret-namespaces, Secrets (their
// metadata: their data is never cached) only in those namespaces, so that
// the manager needs no right on Secrets anywhere else.
func (o *managerOptions) cacheByObject() map[client.Object]cache.ByObject {
	by := map[client.Object]cache.ByObject{
		&coordinationv1.Lease{}: chaperon.HeartbeatLeaseCache(),
		// Only fleetlet's mirror volumes (package claims).
		&corev1.PersistentVolume{}: {Label: labels.SelectorFromSet(labels.Set{v1alpha1.LabelClaimMirror: "true"})},
	}
	if namespaces := o.secretNamespacesWithOwn(); len(namespaces) > 0 {
		configs := make(map[string]cache.Config, len(namespaces))
		for _, ns := range namespaces {
			configs[ns] = cache.Config{}
		}
		by[&corev1.Secret{}] = cache.ByObject{Namespaces: configs}
	}
	return by
}

// secretNamespacesWithOwn is --secret-namespaces and the manager's own
// namespace (its webhook certificate and seal key Secrets), sorted; nil
// when Secrets are read in every namespace.
func (o *managerOptions) secretNamespacesWithOwn() []string {
	if len(o.secretNamespaces) == 0 {
		return nil
	}
	out := append([]string{o.namespace}, o.secretNamespaces...)
	slices.Sort(out)
	return slices.Compact(out)
}
