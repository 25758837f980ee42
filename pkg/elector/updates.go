// updates: a bound proxy: what its user changes on the running pod reaches its delegate's chaperon.

package elector

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
	"github.com/fleetlet/fleetlet/pkg/proxy"
)

// EventDelegateUpdated: what the user changed on a running proxy was
// passed to its delegate's chaperon.
const EventDelegateUpdated = "DelegateUpdated"

// syncDelegate passes what the user changed on a bound proxy to its
// delegate's chaperon (UpdatedTemplate); the target's chaperon controller
// applies it to the pod. It reads the chaperon from the target's cache
// (never from the API server: every pass of every bound proxy comes here)
// and writes only when something changed, with the chaperon's resourceVersion
// as precondition. A target away, or a chaperon going, is left alone: the
// next event of the proxy or of its chaperon brings it back.
func (r *Reconciler) syncDelegate(ctx context.Context, pod *corev1.Pod, rec *corev1.PodCondition) error {
	if pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
		return nil
	}
	record, err := proxy.ParseRecord(rec.Message)
	if err != nil {
		return nil
	}
	cl, ok := r.registry.Get(keyOf(record))
	if !ok || !cl.Health().Ready {
		return nil
	}
	// From the cache only, never a request per proxy per pass: a cache
	// that has not synced yet delivers every chaperon as an event when it
	// does, which brings the proxy back here.
	cl.WatchChaperons(pod.Namespace)
	cached, synced := cl.ChaperonCache(pod.Namespace)
	if !synced {
		return nil
	}
	var pc v1alpha1.PodChaperon
	nn := types.NamespacedName{Namespace: pod.Namespace, Name: record.Chaperon}
	if err := cached.Get(ctx, nn, &pc); err != nil {
		return client.IgnoreNotFound(err)
	}
	if pc.DeletionTimestamp != nil || pc.Labels[v1alpha1.LabelParentUID] != string(pod.UID) || r.chaperonWrites.Stale(pc.UID, pc.ResourceVersion) {
		return nil
	}
	want, what := UpdatedTemplate(&pc.Spec.Template, pod, cl.Self())
	if len(what) == 0 {
		return nil
	}
	updated := pc.DeepCopy()
	updated.Spec.Template = *want
	setRemoved(updated, v1alpha1.AnnotationRemovedLabels, pc.Spec.Template.Metadata.Labels, want.Metadata.Labels)
	setRemoved(updated, v1alpha1.AnnotationRemovedAnnotations, pc.Spec.Template.Metadata.Annotations, want.Metadata.Annotations)
	before := pc.ResourceVersion
	err = cl.Client().Patch(ctx, updated, client.MergeFromWithOptions(&pc, client.MergeFromWithOptimisticLock{}))
	switch {
	case apierrors.IsNotFound(err):
		return nil
	case err != nil:
		return fmt.Errorf("passing the proxy's update (%s) to its delegate's chaperon in %s: %w", strings.Join(what, ", "), cl.Key(), err)
	}
	r.chaperonWrites.Wrote(pc.UID, before)
	ctrl.LoggerFrom(ctx).V(1).Info("Passed the proxy's update to its delegate", "target", cl.Key().String(), "what", what)
	r.recorder.Eventf(pod, nil, corev1.EventTypeNormal, EventDelegateUpdated, "Update", "Passed to the delegate in %s: %s", cl.Key(), strings.Join(what, ", "))
	return nil
}

// setRemoved records on the chaperon, under annotation, the keys its
// template has lost since the delegate was created (proxy.RemovedKeys):
// the target removes those from the pod, and leaves the keys its own
// admission added.
func setRemoved(pc *v1alpha1.PodChaperon, annotation string, old, now map[string]string) {
	removed := proxy.RemovedKeys(pc.Annotations[annotation], old, now)
	if removed == "" {
		delete(pc.Annotations, annotation)
		return
	}
	if pc.Annotations == nil {
		pc.Annotations = map[string]string{}
	}
	pc.Annotations[annotation] = removed
}

// UpdatedTemplate returns a delegate's chaperon template with what a user
// may change on a running pod taken from its proxy, and the names of what
// changed (none: the template is up to date). What it takes:
//
//   - the labels and annotations, as a candidate gets them (fleetlet's own
//     left out; in a self target, labels moved under
//     delegate.multicluster.fleetlet.io/);
//   - each container's and init container's image and resources (an
//     in-place resize), by container name;
//   - activeDeadlineSeconds;
//   - the tolerations the proxy has that the template lacks, but for the
//     proxy's own (proxy.Tolerations): tolerations are only ever added;
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
	out.Metadata.Labels = emptyAsNil(candidateLabels(p.Labels, self))
	changed("labels", emptyAsNil(tmpl.Metadata.Labels), out.Metadata.Labels)
	out.Metadata.Annotations = emptyAsNil(candidateAnnotations(p.Annotations))
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
		if !proxy.IsOwnToleration(t) && !proxy.HasToleration(spec.Tolerations, t) {
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
			if !equality.Semantic.DeepEqual(c.Resources, from[j].Resources) {
				c.Resources, resources = *from[j].Resources.DeepCopy(), true
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
