package fleet

import (
	"context"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
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

// podSecurityLabelPrefix starts the Pod Security admission labels, which a
// namespace created on demand always carries from the source's.
const podSecurityLabelPrefix = "pod-security.kubernetes.io/"

// OnDemandNamespace is the namespace a source creates in a target for its
// pods in src, where the target's ClusterSource allows it: src's name,
// labelled created-by-source=<sourceName>, with src's Pod Security labels
// and the labels and annotations src lists in its target-labels and
// target-annotations annotations (never fleetlet's own keys, which say
// what fleetlet does in the source).
func OnDemandNamespace(src *corev1.Namespace, sourceName string) *corev1.Namespace {
	labels := map[string]string{v1alpha1.LabelCreatedBySource: sourceName}
	for k, v := range src.Labels {
		if strings.HasPrefix(k, podSecurityLabelPrefix) {
			labels[k] = v
		}
	}
	for _, k := range listedKeys(src.Annotations[v1alpha1.AnnotationTargetLabels]) {
		if v, ok := src.Labels[k]; ok && carried(k) {
			labels[k] = v
		}
	}
	var annotations map[string]string
	for _, k := range listedKeys(src.Annotations[v1alpha1.AnnotationTargetAnnotations]) {
		if v, ok := src.Annotations[k]; ok && carried(k) {
			if annotations == nil {
				annotations = map[string]string{}
			}
			annotations[k] = v
		}
	}
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: src.Name, Labels: labels, Annotations: annotations}}
}

// listedKeys splits a comma-separated list of keys, blanks dropped.
func listedKeys(s string) []string {
	var out []string
	for _, k := range strings.Split(s, ",") {
		if k = strings.TrimSpace(k); k != "" {
			out = append(out, k)
		}
	}
	return out
}

// carried reports whether a source namespace's key may be carried to a
// target: not fleetlet's own (multicluster.fleetlet.io/ and its
// subdomains), not the API server's name label.
func carried(k string) bool {
	return !v1alpha1.IsFleetletKey(k) && k != corev1.LabelMetadataName
}
