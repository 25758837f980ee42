package claims

import (
	"context"
	"fmt"
	"path"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
)

// MirrorName is the name of the source volume that stands for a placed
// claim: fleetlet- and the claim's UID.
func MirrorName(c *corev1.PersistentVolumeClaim) string { return "fleetlet-" + string(c.UID) }

// Mirror is the source volume a placed claim is bound to: a local volume
// of the target's virtual node, so that the source's scheduler binds
// every proxy that mounts the claim to that node only, and `kubectl get
// pvc` shows the claim Bound with its size: the capacity of its copy in
// the target (held) once that is bound, else the claim's request. Nothing ever mounts it (no
// kubelet runs a virtual node's pods); its reclaim policy is Retain, so
// that the source's controllers never try to delete what it stands for.
func Mirror(c *corev1.PersistentVolumeClaim, target, node string, held *corev1.PersistentVolumeClaim) *corev1.PersistentVolume {
	size := c.Spec.Resources.Requests[corev1.ResourceStorage]
	if held != nil {
		if got, ok := held.Status.Capacity[corev1.ResourceStorage]; ok && got.Cmp(size) >= 0 {
			size = got
		}
	}
	if size.IsZero() {
		size = resource.MustParse("1")
	}
	return &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{
			Name:        MirrorName(c),
			Labels:      map[string]string{v1alpha1.LabelClaimMirror: "true"},
			Annotations: map[string]string{v1alpha1.AnnotationTarget: target},
		},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: size},
			AccessModes:                   c.Spec.AccessModes,
			VolumeMode:                    c.Spec.VolumeMode,
			StorageClassName:              ptr.Deref(c.Spec.StorageClassName, ""),
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
			ClaimRef: &corev1.ObjectReference{
				APIVersion: "v1", Kind: "PersistentVolumeClaim",
				Namespace: c.Namespace, Name: c.Name, UID: c.UID,
			},
			PersistentVolumeSource: corev1.PersistentVolumeSource{Local: &corev1.LocalVolumeSource{
				Path: path.Join("/", v1alpha1.GroupName, target, c.Namespace, c.Name),
			}},
			NodeAffinity: &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
				MatchExpressions: []corev1.NodeSelectorRequirement{{Key: corev1.LabelHostname, Operator: corev1.NodeSelectorOpIn, Values: []string{node}}},
			}}}},
		},
	}
}

// BindMirror binds a placed source claim to its mirror volume: the volume
// is created (pre-bound to the claim's UID) and the claim names it, and
// the volume of its copy in the target (held, once bound there) in an
// annotation; the source's volume controller completes the binding (it
// may also bind the claim first, from the volume's claimRef: the
// annotation is then written by a later call). It tells whether the claim
// is Bound to it. A claim the source bound to a volume of its own (an
// Immediate class with a provisioner in the source) is left as it is.
func BindMirror(ctx context.Context, c client.Client, claim *corev1.PersistentVolumeClaim, node string, held *corev1.PersistentVolumeClaim) (bool, error) {
	name := MirrorName(claim)
	if claim.Spec.VolumeName != "" && claim.Spec.VolumeName != name {
		return claim.Status.Phase == corev1.ClaimBound, nil
	}
	patched := claim.DeepCopy()
	if claim.Spec.VolumeName == "" {
		pv := Mirror(claim, TargetOf(claim), node, held)
		if err := c.Create(ctx, pv); err != nil && !apierrors.IsAlreadyExists(err) {
			return false, fmt.Errorf("creating volume %s for claim %s: %w", pv.Name, claim.Name, err)
		}
		patched.Spec.VolumeName = name
	}
	if held != nil && held.Spec.VolumeName != "" && claim.Annotations[v1alpha1.AnnotationTargetVolume] != held.Spec.VolumeName {
		if patched.Annotations == nil {
			patched.Annotations = map[string]string{}
		}
		patched.Annotations[v1alpha1.AnnotationTargetVolume] = held.Spec.VolumeName
	}
	if patched.Spec.VolumeName == claim.Spec.VolumeName && patched.Annotations[v1alpha1.AnnotationTargetVolume] == claim.Annotations[v1alpha1.AnnotationTargetVolume] {
		return claim.Status.Phase == corev1.ClaimBound, nil
	}
	if err := c.Patch(ctx, patched, client.MergeFromWithOptions(claim, client.MergeFromWithOptimisticLock{})); err != nil {
		return false, fmt.Errorf("binding claim %s to volume %s: %w", claim.Name, name, err)
	}
	return false, nil
}

// NeedsHeld tells whether BindMirror wants the claim's copy in its target:
// the claim is not bound to its mirror yet, or does not name the copy's
// volume yet.
func NeedsHeld(claim *corev1.PersistentVolumeClaim) bool {
	return claim.Spec.VolumeName == "" ||
		(claim.Spec.VolumeName == MirrorName(claim) && claim.Annotations[v1alpha1.AnnotationTargetVolume] == "")
}
