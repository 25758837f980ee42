// template: what of a proxy its candidates' and delegate's chaperon template
// carries — its labels and annotations as a candidate gets them, and what a
// user changes on the running pod (UpdatedTemplate). Shared by the elector,
// which writes it, and feedback, which tells when the delegate has it.

package proxy

import (
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
)

// CandidateLabels are the proxy's labels, moved under
// delegate.multicluster.fleetlet.io/ in a self target.
func CandidateLabels(labels map[string]string, self bool) map[string]string {
	out := make(map[string]string, len(labels))
	for k, v := range labels {
		if strings.HasPrefix(k, v1alpha1.Prefix) {
			continue
		}
		if self {
			k = SelfLabelKey(k)
		}
		out[k] = v
	}
	return out
}

// SelfLabelKey is where a label key k of a proxy goes on its candidate in a
// self target: delegate.multicluster.fleetlet.io/<k with "/" replaced by ".">.
func SelfLabelKey(k string) string {
	return v1alpha1.DelegateLabelPrefix + strings.ReplaceAll(k, "/", ".")
}

// CandidateAnnotations are the proxy's annotations but fleetlet's own.
func CandidateAnnotations(annotations map[string]string) map[string]string {
	out := make(map[string]string, len(annotations))
	for k, v := range annotations {
		if strings.HasPrefix(k, v1alpha1.Prefix) {
			continue
		}
		out[k] = v
	}
	return out
}

// UpdatedTemplate returns a delegate's chaperon template with what a user
// may change on a running pod taken from its proxy, and the names of what
// changed (none: the template is up to date). What it takes:
//
//   - the labels and annotations, as a candidate gets them (fleetlet's own
//     left out; in a self target, labels moved under
//     delegate.multicluster.fleetlet.io/);
//   - each container's and init container's image and resources (an
//     in-place resize), by container name, but its resource claims
//     (resources.claims), which the proxy does not carry;
//   - activeDeadlineSeconds;
//   - the tolerations the proxy has that the template lacks, but for the
//     proxy's own (Tolerations): tolerations are only ever added;
//   - the ephemeral containers the template lacks, by name, with their
//     mounts of volumes the delegate does not have (the source's token)
//     left out.
//
// Everything else stays the template's: the sealed spec the delegate was
// built from is not opened again, so an update never reaches the fields
// the webhook sealed (placement, volumes, ports), which a pod cannot change
// anyway.
func UpdatedTemplate(tmpl *v1alpha1.PodChaperonTemplate, p *corev1.Pod, self bool) (*v1alpha1.PodChaperonTemplate, []string) {
	out := tmpl.DeepCopy()
	var what []string
	changed := func(name string, old, new any) {
		if !equality.Semantic.DeepEqual(old, new) {
			what = append(what, name)
		}
	}
	out.Metadata.Labels = emptyAsNil(CandidateLabels(p.Labels, self))
	changed("labels", emptyAsNil(tmpl.Metadata.Labels), out.Metadata.Labels)
	out.Metadata.Annotations = emptyAsNil(CandidateAnnotations(p.Annotations))
	changed("annotations", emptyAsNil(tmpl.Metadata.Annotations), out.Metadata.Annotations)

	spec := &out.Spec
	images, resources := takeContainers(spec.Containers, p.Spec.Containers)
	initImages, initResources := takeContainers(spec.InitContainers, p.Spec.InitContainers)
	if images || initImages {
		what = append(what, "images")
	}
	if resources || initResources {
		what = append(what, "resources")
	}
	spec.ActiveDeadlineSeconds = p.Spec.ActiveDeadlineSeconds
	changed("activeDeadlineSeconds", tmpl.Spec.ActiveDeadlineSeconds, spec.ActiveDeadlineSeconds)
	for _, t := range p.Spec.Tolerations {
		if !IsOwnToleration(t) && !HasToleration(spec.Tolerations, t) {
			spec.Tolerations = append(spec.Tolerations, *t.DeepCopy())
		}
	}
	changed("tolerations", len(tmpl.Spec.Tolerations), len(spec.Tolerations))
	if addEphemeral(spec, p.Spec.EphemeralContainers) {
		what = append(what, "ephemeral containers")
	}
	return out, what
}

// takeContainers sets each container's image and resources to those of
// the proxy's container of the same name, and says whether images and
// resources changed.
func takeContainers(containers, from []corev1.Container) (images, resources bool) {
	for i := range containers {
		c := &containers[i]
		for j := range from {
			if from[j].Name != c.Name {
				continue
			}
			if c.Image != from[j].Image {
				c.Image, images = from[j].Image, true
			}
			// The claims stay the template's: the webhook keeps a pod's
			// resource claims for its candidates, so the proxy has none.
			want := *from[j].Resources.DeepCopy()
			want.Claims = c.Resources.Claims
			if !equality.Semantic.DeepEqual(c.Resources, want) {
				c.Resources, resources = want, true
			}
		}
	}
	return images, resources
}

// addEphemeral appends the proxy's ephemeral containers that spec lacks,
// by name, without their mounts of volumes spec does not have.
func addEphemeral(spec *corev1.PodSpec, from []corev1.EphemeralContainer) bool {
	has := map[string]bool{}
	for _, e := range spec.EphemeralContainers {
		has[e.Name] = true
	}
	volumes := map[string]bool{}
	for _, v := range spec.Volumes {
		volumes[v.Name] = true
	}
	added := false
	for _, e := range from {
		if has[e.Name] {
			continue
		}
		e = *e.DeepCopy()
		var mounts []corev1.VolumeMount
		for _, m := range e.VolumeMounts {
			if volumes[m.Name] {
				mounts = append(mounts, m)
			}
		}
		e.VolumeMounts = mounts
		spec.EphemeralContainers = append(spec.EphemeralContainers, e)
		added = true
	}
	return added
}

func emptyAsNil(m map[string]string) map[string]string {
	if len(m) == 0 {
		return nil
	}
	return m
}
