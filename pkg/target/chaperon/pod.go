package chaperon

import (
	"fmt"
	"maps"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
)

// parentLabels and parentAnnotations are the keys a pod takes from its
// chaperon, never from the chaperon's template.
var (
	parentLabels      = []string{v1alpha1.LabelParentUID, v1alpha1.LabelParentCluster}
	parentAnnotations = []string{v1alpha1.AnnotationParentName, v1alpha1.AnnotationParentNamespace}
)

// BuildPod returns the pod a chaperon holds: the chaperon's name and
// namespace; the template's labels and annotations, with the chaperon's
// parent-uid and parent-cluster labels and parent-name and
// parent-namespace annotations in place of any the template gives under
// those keys; the template's spec; and a controller reference to the
// chaperon that blocks its foreground deletion until the pod is gone.
func BuildPod(ch *v1alpha1.PodChaperon) *corev1.Pod {
	tmpl := ch.Spec.Template
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace:       ch.Namespace,
			Name:            ch.Name,
			Labels:          withParentKeys(tmpl.Metadata.Labels, ch.Labels, parentLabels),
			Annotations:     withParentKeys(tmpl.Metadata.Annotations, ch.Annotations, parentAnnotations),
			OwnerReferences: []metav1.OwnerReference{OwnerReference(ch)},
		},
		Spec: *tmpl.Spec.DeepCopy(),
	}
}

// OwnerReference is the reference of a pod to the chaperon that holds it:
// controller, and blocking the owner's foreground deletion.
func OwnerReference(ch *v1alpha1.PodChaperon) metav1.OwnerReference {
	return *metav1.NewControllerRef(ch, v1alpha1.GroupVersion.WithKind(KindPodChaperon))
}

// withParentKeys copies from, then sets each of keys to its value in
// parent (removing it when parent lacks it). It returns nil for an empty
// result.
func withParentKeys(from, parent map[string]string, keys []string) map[string]string {
	out := make(map[string]string, len(from)+len(keys))
	maps.Copy(out, from)
	for _, k := range keys {
		if v, ok := parent[k]; ok {
			out[k] = v
		} else {
			delete(out, k)
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// checkLabels reports what makes a chaperon unfit to hold a pod: both
// parent labels are required.
func checkLabels(ch *v1alpha1.PodChaperon) error {
	for _, k := range parentLabels {
		if ch.Labels[k] == "" {
			return fmt.Errorf("the chaperon has no %s label: fleetlet creates no pod for it", k)
		}
	}
	return nil
}

// isHeldBy reports whether pod is the one ch holds: ch is its controller,
// and it carries ch's parent labels. A pod that names the chaperon as its
// controller but another source (its parent-cluster label, which the
// fleetlet-delegate-pods admission policy ties to the identity that
// created it) is an impostor, never adopted: in a namespace two sources
// share, one source's user could otherwise create a pod posing as the
// other's delegate (its status copied to that source, its logs and exec
// reached through that source's virtual node).
func isHeldBy(pod *corev1.Pod, ch *v1alpha1.PodChaperon) bool {
	if !metav1.IsControlledBy(pod, ch) {
		return false
	}
	for _, k := range parentLabels {
		if pod.Labels[k] != ch.Labels[k] {
			return false
		}
	}
	return true
}
