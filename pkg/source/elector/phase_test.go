package elector

import (
	"testing"

	"github.com/stretchr/testify/assert"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
	"github.com/fleetlet/fleetlet/pkg/proxy"
)

func TestPhaseOf(t *testing.T) {
	record := corev1.PodCondition{Type: v1alpha1.ConditionElected, Status: corev1.ConditionTrue,
		Message: proxy.Record{TargetNamespace: "ns", TargetName: "t", Chaperon: "web-1234"}.Message()}
	pod := func(change func(p *corev1.Pod)) *corev1.Pod {
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "web", Finalizers: []string{v1alpha1.FinalizerDelegate}},
			Spec:       corev1.PodSpec{SchedulingGates: []corev1.PodSchedulingGate{{Name: v1alpha1.SchedulingGateElection}}},
		}
		change(p)
		return p
	}
	now := metav1.Now()
	for _, tc := range []struct {
		name string
		pod  *corev1.Pod
		want Phase
	}{
		{"no finalizer of ours", pod(func(p *corev1.Pod) { p.Finalizers = nil }), PhaseNotProxy},
		{"gated, no record", pod(func(*corev1.Pod) {}), PhaseElecting},
		{"a record not True", pod(func(p *corev1.Pod) {
			c := record
			c.Status = corev1.ConditionFalse
			p.Status.Conditions = []corev1.PodCondition{c}
		}), PhaseElecting},
		{"a record standing", pod(func(p *corev1.Pod) { p.Status.Conditions = []corev1.PodCondition{record} }), PhaseElected},
		{"pinned", pod(func(p *corev1.Pod) {
			p.Status.Conditions = []corev1.PodCondition{record}
			p.Spec.NodeSelector = map[string]string{corev1.LabelHostname: "fleetlet-ns-t"}
		}), PhasePinned},
		{"pinned without a record", pod(func(p *corev1.Pod) {
			p.Spec.NodeSelector = map[string]string{corev1.LabelHostname: "fleetlet-ns-t"}
		}), PhasePinned},
		{"another controller's gate too", pod(func(p *corev1.Pod) {
			p.Status.Conditions = []corev1.PodCondition{record}
			p.Spec.SchedulingGates = append(p.Spec.SchedulingGates, corev1.PodSchedulingGate{Name: "kueue.x-k8s.io/admission"})
		}), PhaseHeld},
		{"ungated", pod(func(p *corev1.Pod) { p.Spec.SchedulingGates = nil }), PhaseUngated},
		{"deleted, whatever else", pod(func(p *corev1.Pod) {
			p.DeletionTimestamp = &now
			p.Spec.SchedulingGates = nil
		}), PhaseFinalizing},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, PhaseOf(tc.pod))
		})
	}
}
