// generation: the proxy's status.observedGeneration, which a kubelet sets on
// a pod once it has acted on that generation of its spec.

package feedback

import (
	corev1 "k8s.io/api/core/v1"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
	proxypod "github.com/fleetlet/fleetlet/pkg/proxy"
)

// actedOn returns the proxy's generation when its delegate has acted on
// all of it, else 0 (not yet, or not known): the chaperon's template holds
// all that a running proxy passes to its delegate (proxypod.UpdatedTemplate
// finds nothing to pass), the target has brought the pod up to that
// template (the chaperon's status.observedGeneration), and the pod's own
// kubelet has acted on the pod's spec (its status.observedGeneration, when
// it reports one). A spec change that passes nothing (the pin and the
// lifting of the gate) is acted on as soon as it is made.
func actedOn(proxy *corev1.Pod, pc *v1alpha1.PodChaperon, pod *corev1.Pod, self bool) int64 {
	if proxy.Generation != 0 && proxy.Status.ObservedGeneration == proxy.Generation {
		// Already acted on: most passes (a status change of the
		// delegate) come here, and need no template compared.
		return proxy.Generation
	}
	if pod == nil || pc.Generation == 0 || pc.Status.ObservedGeneration != pc.Generation {
		return 0
	}
	if pod.Status.ObservedGeneration != 0 && pod.Status.ObservedGeneration < pod.Generation {
		return 0
	}
	if _, pending := proxypod.UpdatedTemplate(&pc.Spec.Template, proxy, self); len(pending) > 0 {
		return 0
	}
	return proxy.Generation
}

// setObservedGeneration raises status.observedGeneration to gen, and with
// it the observedGeneration of each kubelet condition whose delegate
// condition carries one (the delegate's kubelet tracks generations). It
// never lowers one: gen 0, or one behind, changes nothing.
func setObservedGeneration(st *corev1.PodStatus, delegate []corev1.PodCondition, gen int64) {
	if gen == 0 || gen < st.ObservedGeneration {
		return
	}
	st.ObservedGeneration = gen
	tracked := map[corev1.PodConditionType]bool{}
	for _, c := range delegate {
		tracked[c.Type] = c.ObservedGeneration != 0
	}
	for i := range st.Conditions {
		if c := &st.Conditions[i]; kubeletConditions[c.Type] && tracked[c.Type] {
			c.ObservedGeneration = gen
		}
	}
}
