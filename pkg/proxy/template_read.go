package proxy

import (
	corev1 "k8s.io/api/core/v1"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
)

// TemplateAsRead is what a source reads of a chaperon's template, which its
// caches of the targets keep instead of the whole (source/fleet): the
// metadata, and of the spec what UpdatedTemplate compares (each container's
// and init container's name, image and resources, activeDeadlineSeconds,
// the tolerations, the ephemeral containers' and the volumes' names), the
// delegate's terminationGracePeriodSeconds (a proxy's deletion passes its
// own when they differ) and the pod's resource claims (the feedback maps
// their statuses). A chaperon's template is its proxy's whole spec: kept
// whole, each chaperon cached a second copy of what the source's own cache
// holds of the proxy.
//
// UpdatedTemplate names the same changes on it as on the whole template,
// but what it returns is not a template to write: whoever writes one reads
// the chaperon whole from the API server first.
func TemplateAsRead(t *v1alpha1.PodChaperonTemplate) v1alpha1.PodChaperonTemplate {
	s := &t.Spec
	out := v1alpha1.PodChaperonTemplate{Metadata: t.Metadata, Spec: corev1.PodSpec{
		Containers:                    containersAsRead(s.Containers),
		InitContainers:                containersAsRead(s.InitContainers),
		ActiveDeadlineSeconds:         s.ActiveDeadlineSeconds,
		Tolerations:                   s.Tolerations,
		TerminationGracePeriodSeconds: s.TerminationGracePeriodSeconds,
		ResourceClaims:                s.ResourceClaims,
	}}
	for _, v := range s.Volumes {
		out.Spec.Volumes = append(out.Spec.Volumes, corev1.Volume{Name: v.Name})
	}
	for _, e := range s.EphemeralContainers {
		out.Spec.EphemeralContainers = append(out.Spec.EphemeralContainers,
			corev1.EphemeralContainer{EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: e.Name}})
	}
	return out
}

func containersAsRead(in []corev1.Container) []corev1.Container {
	var out []corev1.Container
	for _, c := range in {
		out = append(out, corev1.Container{Name: c.Name, Image: c.Image, Resources: c.Resources})
	}
	return out
}
