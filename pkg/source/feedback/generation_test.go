package feedback

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"github.com/stretchr/testify/assert"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
	proxypod "github.com/fleetlet/fleetlet/pkg/proxy"
)

func TestActedOn(t *testing.T) {
	proxy := proxyPod([]string{"app"}, nil)
	proxy.Generation = 4
	proxy.Labels = map[string]string{"app": "web"}
	proxy.Spec.ActiveDeadlineSeconds = ptr.To[int64](600)

	// A chaperon whose template holds everything of the proxy, brought
	// up to it, and a delegate whose kubelet acted on its own spec.
	upToDate := func() (*v1alpha1.PodChaperon, *corev1.Pod) {
		base := &v1alpha1.PodChaperonTemplate{}
		base.Spec.Containers = []corev1.Container{{Name: "app", Image: "old"}}
		tmpl, _ := proxypod.UpdatedTemplate(base, proxy, false)
		pc := &v1alpha1.PodChaperon{Spec: v1alpha1.PodChaperonSpec{Template: *tmpl}}
		pc.Generation, pc.Status.ObservedGeneration = 3, 3
		pod := &corev1.Pod{}
		pod.Generation, pod.Status.ObservedGeneration = 7, 7
		return pc, pod
	}
	tests := []struct {
		name   string
		change func(*v1alpha1.PodChaperon, *corev1.Pod)
		noPod  bool
		want   int64
	}{
		{name: "all acted on: the proxy's generation", want: 4},
		{name: "a kubelet that reports no generation: the target's word", change: func(_ *v1alpha1.PodChaperon, pod *corev1.Pod) {
			pod.Status.ObservedGeneration = 0
		}, want: 4},
		{name: "the target has not brought the pod up to the template", change: func(pc *v1alpha1.PodChaperon, _ *corev1.Pod) {
			pc.Generation = 4
		}},
		{name: "the delegate's kubelet has not acted on its last change", change: func(_ *v1alpha1.PodChaperon, pod *corev1.Pod) {
			pod.Generation = 8
		}},
		{name: "an update not passed to the chaperon yet", change: func(pc *v1alpha1.PodChaperon, _ *corev1.Pod) {
			pc.Spec.Template.Spec.Containers[0].Image = "old"
		}},
		{name: "no delegate pod", noPod: true},
		{name: "already acted on: kept, whatever the chaperon says", change: func(pc *v1alpha1.PodChaperon, _ *corev1.Pod) {
			pc.Generation = 4
			proxy.Status.ObservedGeneration = 4
		}, want: 4},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pc, pod := upToDate()
			proxy.Status.ObservedGeneration = 0
			if tc.change != nil {
				tc.change(pc, pod)
			}
			if tc.noPod {
				pod = nil
			}
			got := actedOn(proxy, pc, pod, false)
			assert.Falsef(t, got != tc.want, "actedOn = %d, want %d", got, tc.want)
		})
	}
}

func TestSetObservedGeneration(t *testing.T) {
	elected := corev1.PodCondition{Type: v1alpha1.ConditionElected, Status: corev1.ConditionTrue, ObservedGeneration: 1}
	status := func() corev1.PodStatus {
		return corev1.PodStatus{ObservedGeneration: 3, Conditions: []corev1.PodCondition{
			elected,
			{Type: corev1.PodReady, Status: corev1.ConditionTrue, ObservedGeneration: 3},
			{Type: corev1.ContainersReady, Status: corev1.ConditionTrue},
		}}
	}
	// The delegate's kubelet tracks Ready's generation, not ContainersReady's.
	delegate := []corev1.PodCondition{
		{Type: corev1.PodReady, Status: corev1.ConditionTrue, ObservedGeneration: 9},
		{Type: corev1.ContainersReady, Status: corev1.ConditionTrue},
	}

	st := status()
	setObservedGeneration(&st, delegate, 5)
	assert.Falsef(t, st.ObservedGeneration != 5, "observedGeneration = %d, want 5", st.ObservedGeneration)
	got := []int64{st.Conditions[0].ObservedGeneration, st.Conditions[1].ObservedGeneration, st.Conditions[2].ObservedGeneration}
	assert.Falsef(t, got[0] != 1 || got[1] != 5 || got[2] != 0, "conditions' observedGeneration (Elected, Ready, ContainersReady) = %v, want [1 5 0]: only the kubelet's, where the delegate's kubelet tracks them", got)
	for _, gen := range []int64{0, 2} {
		st := status()
		setObservedGeneration(&st, delegate, gen)
		assert.Falsef(t, st.ObservedGeneration != 3 || st.Conditions[1].ObservedGeneration != 3, "gen %d moved observedGeneration to %d (Ready %d): never lowered, 0 changes nothing", gen, st.ObservedGeneration, st.Conditions[1].ObservedGeneration)
	}
}
