package target

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
)

// NamespaceLife is what a target's API server says of one of its
// namespaces.
type NamespaceLife int

const (
	// NamespaceUnknown: the target did not answer.
	NamespaceUnknown NamespaceLife = iota
	// NamespaceActive: the namespace exists and is not being deleted.
	NamespaceActive
	// NamespaceTerminating: the namespace is being deleted; everything in
	// it, delegates included, is going.
	NamespaceTerminating
	// NamespaceGone: the namespace no longer exists. Its deletion ends only
	// once everything in it is gone, so nothing of a source is left there.
	NamespaceGone
)

// Namespace reads a namespace of the target from its API server, never from
// a cache: a source may read namespaces cluster-wide, even where the
// namespace's RoleBinding (deleted with the namespace) no longer lets it
// read anything inside.
func (c *Cluster) Namespace(ctx context.Context, name string) NamespaceLife {
	var ns corev1.Namespace
	err := c.client.Get(ctx, types.NamespacedName{Name: name}, &ns)
	switch {
	case apierrors.IsNotFound(err):
		return NamespaceGone
	case err != nil:
		return NamespaceUnknown
	case ns.DeletionTimestamp != nil || ns.Status.Phase == corev1.NamespaceTerminating:
		return NamespaceTerminating
	default:
		return NamespaceActive
	}
}
