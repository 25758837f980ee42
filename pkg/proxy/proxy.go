package proxy

import (
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
)

// IsManaged reports whether fleetlet manages an object: it carries our
// finalizer (a pod keeps it from admission until fleetlet finalizes it).
func IsManaged(o metav1.Object) bool {
	return FinalizerIndex(o.GetFinalizers(), v1alpha1.FinalizerDelegate) >= 0
}

// FinalizerIndex is the position of finalizer in finalizers, or -1.
func FinalizerIndex(finalizers []string, finalizer string) int {
	for i, f := range finalizers {
		if f == finalizer {
			return i
		}
	}
	return -1
}

// GateIndex is the position of fleetlet's election gate in the pod's
// scheduling gates, or -1.
func GateIndex(p *corev1.Pod) int {
	for i, g := range p.Spec.SchedulingGates {
		if g.Name == v1alpha1.SchedulingGateElection {
			return i
		}
	}
	return -1
}

// Gated reports whether the pod still carries fleetlet's election gate.
func Gated(p *corev1.Pod) bool { return GateIndex(p) >= 0 }

// PinnedNode is the node a gated pod is pinned to by its
// kubernetes.io/hostname nodeSelector, or "".
func PinnedNode(p *corev1.Pod) string { return p.Spec.NodeSelector[corev1.LabelHostname] }

// OwnedByDaemonSet reports whether a pod is a DaemonSet's (its controller
// is an apps DaemonSet): one a node's own agent, never a proxy, that a
// virtual node acknowledges without running and a drain leaves alone.
func OwnedByDaemonSet(o metav1.Object) bool {
	ref := metav1.GetControllerOfNoCopy(o)
	return ref != nil && ref.Kind == "DaemonSet" && strings.HasPrefix(ref.APIVersion, "apps/")
}
