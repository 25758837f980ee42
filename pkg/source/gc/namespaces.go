package gc

import (
	"context"
	"errors"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
)

// ReasonNamespaceGone: a namespace this source created in a target (label
// created-by-source) whose namespace in the source no longer exists.
const ReasonNamespaceGone Reason = "SourceNamespaceGone"

// kindNamespace names namespaces in findings and metrics.
const kindNamespace = "Namespace"

// contentKinds are the kinds a source may read in a namespace it is admitted
// to (fleetlet-source): what it looks through before deleting a namespace it
// created, so that it never deletes one that holds anything but its own.
var contentKinds = []schema.GroupVersionKind{
	corev1.SchemeGroupVersion.WithKind("PodList"),
	v1alpha1.GroupVersion.WithKind("PodChaperonList"),
	corev1.SchemeGroupVersion.WithKind("ConfigMapList"),
	corev1.SchemeGroupVersion.WithKind("SecretList"),
	corev1.SchemeGroupVersion.WithKind("ServiceAccountList"),
	corev1.SchemeGroupVersion.WithKind("ServiceList"),
	discoveryv1.SchemeGroupVersion.WithKind("EndpointSliceList"),
}

// collectNamespaces deletes the namespaces this source created in target t
// (label created-by-source=<source>) whose namespace in the source is gone,
// once they are older than MinAge and hold nothing but this source's own
// objects and what Kubernetes puts in every namespace. A namespace that
// holds anything else is kept, and said so in the log at each pass.
func (g *GC) collectNamespaces(ctx context.Context, t Target, report *Report) error {
	var list corev1.NamespaceList
	if err := t.Client().List(ctx, &list, client.MatchingLabels{v1alpha1.LabelCreatedBySource: g.opts.SourceName}); err != nil {
		if apierrors.IsForbidden(err) {
			return nil
		}
		return fmt.Errorf("listing the namespaces created for this source: %w", err)
	}
	report.Checked += len(list.Items)
	var errs []error
	for i := range list.Items {
		ns := &list.Items[i]
		if ns.DeletionTimestamp != nil || g.opts.Clock.Since(ns.CreationTimestamp.Time) < g.opts.MinAge {
			continue
		}
		gone, err := g.sourceNamespaceGone(ctx, ns.Name)
		if err != nil || !gone {
			errs = append(errs, err)
			continue
		}
		others, err := foreignContents(ctx, t.Client(), ns.Name, g.opts.SourceName)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if len(others) > 0 {
			g.opts.Logger.Info("Keeping a namespace this source created: it holds objects that are not this source's", "target", t.Key().String(), "namespace", ns.Name, "objects", strings.Join(others, ", "))
			continue
		}
		f := Finding{Target: t.Key().String(), Kind: kindNamespace, Name: ns.Name, Reason: ReasonNamespaceGone}
		g.opts.Logger.Info("Deleting a namespace this source created", "target", f.Target, "namespace", ns.Name, "reason", f.Reason)
		err = t.Client().Delete(ctx, ns, client.Preconditions{UID: ptr.To(ns.UID)})
		if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
			continue
		}
		if apierrors.IsForbidden(err) {
			// The target's ClusterSource no longer lets this source
			// create (and delete) namespaces: the namespace is the
			// target's admin's now.
			g.opts.Logger.Info("Keeping a namespace this source created: the target no longer lets it delete namespaces", "target", f.Target, "namespace", ns.Name, "answer", err.Error())
			continue
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("deleting namespace %s: %w", ns.Name, err))
			continue
		}
		report.Deleted = append(report.Deleted, f)
		deletedTotal.WithLabelValues(f.Target, f.Kind).Inc()
	}
	return errors.Join(errs...)
}

// sourceNamespaceGone reads the namespace from the source's API server: only
// a namespace that no longer exists there is gone (one being deleted is not
// yet: its pods are still going).
func (g *GC) sourceNamespaceGone(ctx context.Context, name string) (bool, error) {
	var ns corev1.Namespace
	err := g.opts.APIReader.Get(ctx, types.NamespacedName{Name: name}, &ns)
	if apierrors.IsNotFound(err) {
		return true, nil
	}
	if err != nil {
		return false, fmt.Errorf("reading namespace %s: %w", name, err)
	}
	return false, nil
}

// foreignContents lists what a target namespace holds that is neither this
// source's (label parent-cluster) nor what Kubernetes makes in every
// namespace, as kind/name. A kind the source may not list there counts as
// foreign: what cannot be seen is not deleted.
func foreignContents(ctx context.Context, c client.Client, ns, source string) ([]string, error) {
	var out []string
	for _, gvk := range contentKinds {
		list := &metav1.PartialObjectMetadataList{}
		list.SetGroupVersionKind(gvk)
		if err := c.List(ctx, list, client.InNamespace(ns)); err != nil {
			if apierrors.IsForbidden(err) {
				out = append(out, strings.TrimSuffix(gvk.Kind, "List")+" (not readable by this source)")
				continue
			}
			return nil, fmt.Errorf("listing %s in namespace %s: %w", gvk.Kind, ns, err)
		}
		for i := range list.Items {
			if !ownOrBuiltIn(&list.Items[i], gvk.Kind, source) {
				out = append(out, strings.TrimSuffix(gvk.Kind, "List")+"/"+list.Items[i].Name)
			}
		}
	}
	return out, nil
}

// ownOrBuiltIn: the object is this source's, on its way out, or one
// Kubernetes makes by itself (the root CA ConfigMap, the default
// ServiceAccount, the EndpointSlices its controller keeps for a Service).
func ownOrBuiltIn(obj *metav1.PartialObjectMetadata, listKind, source string) bool {
	if obj.Labels[v1alpha1.LabelParentCluster] == source || obj.DeletionTimestamp != nil {
		return true
	}
	switch listKind {
	case "ConfigMapList":
		return obj.Name == "kube-root-ca.crt"
	case "ServiceAccountList":
		return obj.Name == "default"
	case "EndpointSliceList":
		return obj.Labels[discoveryv1.LabelManagedBy] == "endpointslice-controller.k8s.io"
	}
	return false
}
