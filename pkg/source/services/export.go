package services

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
)

// serviceExportGK is the Multi-Cluster Services API's ServiceExport
// (sigs.k8s.io/mcs-api): an export of the Service of the same name.
var serviceExportGK = schema.GroupKind{Group: "multicluster.x-k8s.io", Kind: "ServiceExport"}

// serviceExportKind is the ServiceExport kind the source serves, if any.
func serviceExportKind(m meta.RESTMapper) (*schema.GroupVersionKind, bool) {
	mapping, err := m.RESTMapping(serviceExportGK)
	if err != nil {
		return nil, false
	}
	gvk := mapping.GroupVersionKind
	return &gvk, true
}

// exportMetadata is a ServiceExport as watched: by metadata only.
func exportMetadata(gvk *schema.GroupVersionKind) *metav1.PartialObjectMetadata {
	m := &metav1.PartialObjectMetadata{}
	m.SetGroupVersionKind(*gvk)
	return m
}

// wantsGlobal reports whether a Service asks to be global: annotated, or
// exported through the MCS API (a ServiceExport of its name that is not
// being deleted).
func (c *Controller) wantsGlobal(ctx context.Context, svc *corev1.Service) bool {
	if Global(svc) {
		return true
	}
	if c.exports == nil {
		return false
	}
	export := exportMetadata(c.exports)
	if err := c.client.Get(ctx, types.NamespacedName{Namespace: svc.Namespace, Name: svc.Name}, export); err != nil {
		return false
	}
	return export.DeletionTimestamp == nil
}
