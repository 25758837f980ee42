package proxy

import (
	"reflect"
	"slices"

	corev1 "k8s.io/api/core/v1"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
)

// Tolerations are the tolerations every proxy pod gets from the webhook:
// the virtual nodes' taint, a cordoned or not-ready virtual node (so that a
// pinned proxy always binds), and an unreachable virtual node without limit
// (fleetlet being down never evicts anything). They are the proxy's, never
// its delegate's.
func Tolerations() []corev1.Toleration {
	taint := v1alpha1.VirtualNodeTaint()
	return []corev1.Toleration{
		{Key: taint.Key, Operator: corev1.TolerationOpEqual, Value: taint.Value, Effect: taint.Effect},
		{Key: corev1.TaintNodeUnschedulable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
		{Key: corev1.TaintNodeNotReady, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
		{Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute},
	}
}

// HasToleration reports whether list holds exactly t.
func HasToleration(list []corev1.Toleration, t corev1.Toleration) bool {
	return slices.ContainsFunc(list, func(u corev1.Toleration) bool { return reflect.DeepEqual(u, t) })
}

// IsOwnToleration reports whether t is one of Tolerations.
func IsOwnToleration(t corev1.Toleration) bool {
	return HasToleration(Tolerations(), t)
}
