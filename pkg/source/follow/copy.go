package follow

import (
	"strings"

	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
)

var (
	configMapGK      = schema.GroupKind{Kind: KindConfigMap}
	secretGK         = schema.GroupKind{Kind: KindSecret}
	serviceAccountGK = schema.GroupKind{Kind: KindServiceAccount}
	pvcGK            = schema.GroupKind{Kind: "PersistentVolumeClaim"}
	claimTemplateGK  = schema.GroupKind{Group: resourceV1.Group, Kind: KindResourceClaimTemplate}
	resourceClaimGK  = schema.GroupKind{Group: resourceV1.Group, Kind: KindResourceClaim}
)

// exactFields are, for the kinds a pod spec references, the top-level
// fields a copy mirrors exactly: set as in the source, or removed. A
// ServiceAccount's secrets and imagePullSecrets are never copied: the
// target has its own token mechanics. Other kinds copy every top-level
// field but status, merged into the copy (see mergeInto).
var exactFields = map[schema.GroupKind][]string{
	configMapGK:      {"data", "binaryData", "immutable"},
	secretGK:         {"type", "data", "immutable"},
	serviceAccountGK: {"automountServiceAccountToken"},
}

// SecretTypeServiceAccountToken Secrets are never followed: the target
// issues its own tokens.
const secretTypeServiceAccountToken = "kubernetes.io/service-account-token"

// ours reports whether a label or annotation key is fleetlet's
// (multicluster.fleetlet.io/… and its sub-domains): never copied from a
// source object, so that no one forges a copy's ownership.
func ours(key string) bool { return v1alpha1.IsFleetletKey(key) }

// targetOwnedAnnotation reports whether an annotation belongs to the
// cluster an object lives in, not to its content: it is not copied from
// the source, and a copy keeps the one its target wrote.
func targetOwnedAnnotation(gk schema.GroupKind, key string) bool {
	if key == "kubectl.kubernetes.io/last-applied-configuration" {
		return true
	}
	switch gk {
	case pvcGK:
		// Binding and provisioning: pv.kubernetes.io/bind-completed,
		// volume.kubernetes.io/selected-node, storage-provisioner…
		for _, p := range []string{"pv.kubernetes.io/", "volume.kubernetes.io/", "volume.beta.kubernetes.io/"} {
			if strings.HasPrefix(key, p) {
				return true
			}
		}
	case serviceAccountGK:
		// Restricts mounts to the ServiceAccount's secrets, which are
		// never copied: the copy would refuse every Secret volume.
		return key == "kubernetes.io/enforce-mountable-secrets"
	}
	return false
}

// desiredCopy is what a copy of src in a target holds, without its
// followers: src's content and its labels and annotations (but
// fleetlet's), this source's parent-cluster label and the parent
// annotations naming src. Nothing of src's system metadata is kept (UID,
// resourceVersion, owner references, managed fields, creation timestamp,
// generation, finalizers), nor its status. A PersistentVolumeClaim loses
// spec.volumeName: the target binds its own volume.
func desiredCopy(src *unstructured.Unstructured, sourceName string) *unstructured.Unstructured {
	gk := src.GroupVersionKind().GroupKind()
	out := &unstructured.Unstructured{Object: map[string]any{}}
	out.SetGroupVersionKind(src.GroupVersionKind())
	out.SetNamespace(src.GetNamespace())
	out.SetName(src.GetName())

	out.SetLabels(copyLabels(src, sourceName))
	out.SetAnnotations(copyAnnotations(gk, src))

	if fields, ok := exactFields[gk]; ok {
		for _, f := range fields {
			if v, ok := src.Object[f]; ok {
				out.Object[f] = runtime.DeepCopyJSONValue(v)
			}
		}
		return out
	}
	for k, v := range src.Object {
		switch k {
		case "apiVersion", "kind", "metadata", "status":
			continue
		}
		out.Object[k] = runtime.DeepCopyJSONValue(v)
	}
	if gk == pvcGK {
		unstructured.RemoveNestedField(out.Object, "spec", "volumeName")
	}
	return out
}

// copyLabels are a copy's labels: src's but fleetlet's, and this source's
// parent-cluster label.
func copyLabels(src metav1.Object, sourceName string) map[string]string {
	labels := map[string]string{}
	for k, v := range src.GetLabels() {
		if !ours(k) {
			labels[k] = v
		}
	}
	labels[v1alpha1.LabelParentCluster] = sourceName
	return labels
}

// copyAnnotations are a copy's annotations: src's but fleetlet's and
// those that belong to the cluster an object lives in, and the parent
// annotations naming src.
func copyAnnotations(gk schema.GroupKind, src metav1.Object) map[string]string {
	annotations := map[string]string{}
	for k, v := range src.GetAnnotations() {
		if !ours(k) && !targetOwnedAnnotation(gk, k) {
			annotations[k] = v
		}
	}
	annotations[v1alpha1.AnnotationParentName] = src.GetName()
	annotations[v1alpha1.AnnotationParentNamespace] = src.GetNamespace()
	return annotations
}

// mergeInto returns existing, a copy in a target, updated to desired: its
// labels are desired's, its annotations desired's plus those its target
// owns. For the kinds of exactFields those fields are desired's exactly;
// for other kinds every top-level field of desired is merged in (maps
// key by key, anything else replaced), so that what the target's own
// controllers add (a claim's volumeName, defaults) stays and immutable
// fields are not rewritten.
func mergeInto(existing, desired *unstructured.Unstructured) *unstructured.Unstructured {
	gk := desired.GroupVersionKind().GroupKind()
	out := existing.DeepCopy()
	out.SetLabels(desired.GetLabels())
	annotations := desired.GetAnnotations()
	for k, v := range existing.GetAnnotations() {
		if targetOwnedAnnotation(gk, k) || k == v1alpha1.AnnotationFollowers {
			annotations[k] = v
		}
	}
	out.SetAnnotations(annotations)
	if fields, ok := exactFields[gk]; ok {
		for _, f := range fields {
			if v, ok := desired.Object[f]; ok {
				out.Object[f] = runtime.DeepCopyJSONValue(v)
			} else {
				delete(out.Object, f)
			}
		}
		return out
	}
	for k, v := range desired.Object {
		switch k {
		case "apiVersion", "kind", "metadata", "status":
			continue
		}
		out.Object[k] = mergeValue(out.Object[k], v)
	}
	return out
}

func mergeValue(old, value any) any {
	om, ok1 := old.(map[string]any)
	nm, ok2 := value.(map[string]any)
	if !ok1 || !ok2 {
		return runtime.DeepCopyJSONValue(value)
	}
	out := runtime.DeepCopyJSONValue(om).(map[string]any)
	for k, v := range nm {
		out[k] = mergeValue(om[k], v)
	}
	return out
}

// mustRecreate reports whether existing cannot be updated to want: an
// immutable ConfigMap or Secret whose content changed (the source object
// was recreated), a Secret whose type changed, or a ResourceClaimTemplate or
// ResourceClaim whose spec (immutable) changed.
func mustRecreate(existing, want *unstructured.Unstructured) bool {
	gk := want.GroupVersionKind().GroupKind()
	if gk == claimTemplateGK || gk == resourceClaimGK {
		return !equality.Semantic.DeepEqual(existing.Object["spec"], want.Object["spec"])
	}
	if gk != configMapGK && gk != secretGK {
		return false
	}
	if gk == secretGK && existing.Object["type"] != want.Object["type"] {
		return true
	}
	if immutable, _, _ := unstructured.NestedBool(existing.Object, "immutable"); !immutable {
		return false
	}
	for _, f := range exactFields[gk] {
		if !equality.Semantic.DeepEqual(existing.Object[f], want.Object[f]) {
			return true
		}
	}
	return false
}
