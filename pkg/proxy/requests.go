package proxy

import (
	corev1 "k8s.io/api/core/v1"
	resourcehelper "k8s.io/component-helpers/resource"
)

// PodRequests returns what pod takes from its node's allocatable resources,
// computed as the kube-scheduler's NodeResourcesFit computes it with the
// default feature gates of Kubernetes v1.37: the larger of the regular
// containers (sidecars included) and any one init container, pod-level
// resources when set, the resources of an in-place resize in progress, and
// the pod overhead. The "pods" resource is not included.
func PodRequests(pod *corev1.Pod) corev1.ResourceList {
	return resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{
		// InPlacePodVerticalScaling is GA and locked on since v1.35, and
		// InPlacePodLevelResourcesVerticalScaling beta and on since v1.36.
		UseStatusResources: true,
		InPlacePodLevelResourcesVerticalScalingEnabled: true,
	})
}
