package claims

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
)

// Copy is the target's copy of a source claim: its name, namespace, user
// labels and annotations; this source's parent-cluster label and the
// source claim's UID as parent-uid; the parent annotations; access modes,
// requests and limits, volume mode, storage class and volume attributes
// class. Not its volumeName, selector nor data source, which name objects
// of the source, nor the binding annotations of the source's controllers.
// classes maps the source's storage class names to the target's (the
// Target's spec.storageClasses): a class mapped to "" names none there.
func Copy(src *corev1.PersistentVolumeClaim, sourceName string, classes map[string]string) *corev1.PersistentVolumeClaim {
	class := src.Spec.StorageClassName
	if class != nil {
		if to, ok := classes[*class]; ok {
			class = &to
			if to == "" {
				class = nil
			}
		}
	}
	labels := map[string]string{}
	for k, v := range src.Labels {
		if !v1alpha1.IsFleetletKey(k) {
			labels[k] = v
		}
	}
	labels[v1alpha1.LabelParentCluster] = sourceName
	labels[v1alpha1.LabelParentUID] = string(src.UID)
	annotations := map[string]string{}
	for k, v := range src.Annotations {
		if !v1alpha1.IsFleetletKey(k) && !clusterOwned(k) {
			annotations[k] = v
		}
	}
	annotations[v1alpha1.AnnotationParentName] = src.Name
	annotations[v1alpha1.AnnotationParentNamespace] = src.Namespace
	return &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{
			Name:        src.Name,
			Namespace:   src.Namespace,
			Labels:      labels,
			Annotations: annotations,
		},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:               src.Spec.AccessModes,
			Resources:                 *src.Spec.Resources.DeepCopy(),
			VolumeMode:                src.Spec.VolumeMode,
			StorageClassName:          class,
			VolumeAttributesClassName: src.Spec.VolumeAttributesClassName,
		},
	}
}

// clusterOwned reports whether an annotation belongs to the cluster a
// claim lives in (binding, provisioning, kubectl's last applied
// configuration), not to the claim's content.
func clusterOwned(key string) bool {
	if key == "kubectl.kubernetes.io/last-applied-configuration" {
		return true
	}
	for _, p := range []string{"pv.kubernetes.io/", "volume.kubernetes.io/", "volume.beta.kubernetes.io/"} {
		if strings.HasPrefix(key, p) {
			return true
		}
	}
	return false
}

// Ensure makes sure the target (c) has this source's copy of src (its
// class mapped by classes, see Copy). It
// returns why not when the target cannot have it (the target is then
// filtered for the pod), or an error to retry:
//   - a copy of this claim: nothing to do;
//   - this source's copy of an earlier claim of that name (another parent
//     UID, its source claim deleted and made again): it is deleted, and
//     the target waits for it to go;
//   - this source's copy made through the follow annotation by an earlier
//     fleetlet (no parent UID): adopted (the parent UID added);
//   - anything else of that name: a clash.
func Ensure(ctx context.Context, c client.Client, src *corev1.PersistentVolumeClaim, sourceName string, classes map[string]string) (why string, err error) {
	want := Copy(src, sourceName, classes)
	var got corev1.PersistentVolumeClaim
	err = c.Get(ctx, client.ObjectKeyFromObject(want), &got)
	switch {
	case apierrors.IsNotFound(err):
		if err := c.Create(ctx, want); err != nil {
			if apierrors.IsAlreadyExists(err) {
				return "", fmt.Errorf("claim %s was created meanwhile: %w", src.Name, err)
			}
			if apierrors.IsForbidden(err) || apierrors.IsInvalid(err) {
				return fmt.Sprintf("the target refuses claim %s: %v", src.Name, err), nil
			}
			return "", fmt.Errorf("creating claim %s: %w", src.Name, err)
		}
		return "", nil
	case err != nil:
		if apierrors.IsForbidden(err) {
			return fmt.Sprintf("the target does not let this source read claim %s: %v", src.Name, err), nil
		}
		return "", fmt.Errorf("reading claim %s: %w", src.Name, err)
	}
	if got.Labels[v1alpha1.LabelParentCluster] != sourceName {
		return fmt.Sprintf("a persistentvolumeclaim %s that this source did not create is in the way there", src.Name), nil
	}
	if got.Labels[v1alpha1.LabelParentUID] == string(src.UID) {
		return "", nil
	}
	if got.Labels[v1alpha1.LabelParentUID] == "" && got.Annotations[v1alpha1.AnnotationParentName] == src.Name {
		// This source's copy of the claim made through the follow
		// annotation by an earlier fleetlet: adopted, data and all.
		adopted := got.DeepCopy()
		adopted.Labels[v1alpha1.LabelParentUID] = string(src.UID)
		if err := c.Patch(ctx, adopted, client.MergeFromWithOptions(&got, client.MergeFromWithOptimisticLock{})); err != nil {
			return "", fmt.Errorf("adopting the copy of claim %s: %w", src.Name, err)
		}
		return "", nil
	}
	if got.DeletionTimestamp == nil {
		err := c.Delete(ctx, &got, client.Preconditions{UID: ptr.To(got.UID)})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			return "", fmt.Errorf("deleting the copy of an earlier claim %s: %w", src.Name, err)
		}
	}
	return fmt.Sprintf("the copy of an earlier claim %s is being deleted there", src.Name), nil
}
