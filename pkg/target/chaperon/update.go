// update: a running pod whose chaperon's template changed gets the change, as the source.

package chaperon

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
	"github.com/fleetlet/fleetlet/pkg/proxy"
)

// Reasons of the Events an update records on the chaperon.
const (
	// ReasonPodUpdated: the pod got its chaperon's new template.
	ReasonPodUpdated = "PodUpdated"
	// ReasonUpdateRejected: the target refused part of an update; the
	// message says which part and why. It is not retried until the
	// template changes again, as a kubelet leaves an infeasible resize.
	ReasonUpdateRejected = "UpdateRejected"
)

// needsUpdate tells whether the pod a chaperon holds is behind its
// template: the chaperon's generation moved past status.observedGeneration
// (the generation the pod was last brought up to) while both live and the
// pod has not finished.
func needsUpdate(ch *v1alpha1.PodChaperon, pod *corev1.Pod) bool {
	return ch.Generation != ch.Status.ObservedGeneration && ch.DeletionTimestamp.IsZero() && pod.DeletionTimestamp.IsZero() &&
		pod.Status.Phase != corev1.PodSucceeded && pod.Status.Phase != corev1.PodFailed
}

// updateStep is one request of an update: the ephemeral containers, the
// resize and the pod itself each go through their own endpoint.
type updateStep struct {
	// what names the part of the update, for Events.
	what string
	// build returns the pod as the template wants it, or nil when this
	// part is up to date.
	build func(ch *v1alpha1.PodChaperon, pod *corev1.Pod) *corev1.Pod
	// subresource is the endpoint: "" for the pod itself.
	subresource string
}

var updateSteps = []updateStep{
	{what: "ephemeral containers", build: wantEphemeral, subresource: "ephemeralcontainers"},
	{what: "resources", build: wantResources, subresource: "resize"},
	{what: "metadata and spec", build: wantPod},
}

// update brings a running pod up to its chaperon's template, as the
// chaperon's source (so that this cluster's RBAC, admission and quota judge
// the update as they would the source's own): new ephemeral containers,
// then an in-place resize, then labels, annotations, images,
// activeDeadlineSeconds and added tolerations. It returns the pod as
// updated and whether the pod is now at the chaperon's generation. A part
// the target refuses is an UpdateRejected Event and is not retried until
// the template changes again; a failure to reach the API server is
// returned, and the whole update retried.
func (r *PodChaperonReconciler) update(ctx context.Context, ch *v1alpha1.PodChaperon, pod *corev1.Pod) (*corev1.Pod, bool, ctrl.Result, error) {
	if !needsUpdate(ch, pod) {
		return pod, true, ctrl.Result{}, nil
	}
	id, err := resolveSource(ctx, r.Client, ch)
	if werr := (*waitError)(nil); errors.As(err, &werr) {
		return pod, false, ctrl.Result{RequeueAfter: r.RetryInterval}, nil
	}
	if err != nil {
		return pod, false, ctrl.Result{}, err
	}
	c, err := r.Impersonator.ClientFor(id.userName())
	if err != nil {
		return pod, false, ctrl.Result{}, err
	}
	var done []string
	for _, step := range updateSteps {
		want := step.build(ch, pod)
		if want == nil {
			continue
		}
		err := patchPod(ctx, c, step.subresource, pod, want)
		switch {
		case err == nil:
			pod = want
			done = append(done, step.what)
		case apierrors.IsNotFound(err):
			return pod, true, ctrl.Result{}, nil
		case isRejection(err) && !apierrors.IsConflict(err):
			r.Recorder.Eventf(ch, pod, corev1.EventTypeWarning, ReasonUpdateRejected, "Update",
				"The target refused the %s of %s's update (generation %d) as %s: %s", step.what, pod.Name, ch.Generation, id.userName(), truncate(err.Error()))
		default:
			return pod, false, ctrl.Result{}, fmt.Errorf("updating pod %s (%s) as %s: %w", klog.KObj(pod), step.what, id.userName(), err)
		}
	}
	if len(done) > 0 {
		ctrl.LoggerFrom(ctx).Info("Updated pod as the source's ServiceAccount", "pod", klog.KObj(pod), "user", id.userName(), "generation", ch.Generation, "parts", done)
		r.Recorder.Eventf(ch, pod, corev1.EventTypeNormal, ReasonPodUpdated, "Update",
			"Updated pod %s to generation %d as %s: %s", pod.Name, ch.Generation, id.userName(), strings.Join(done, ", "))
	}
	return pod, true, ctrl.Result{}, nil
}

// patchPod sends the change from pod to want as a strategic merge patch
// (lists of containers merge by name), to the pod or to one of its
// subresources, with the pod's resourceVersion as precondition; want is
// then the pod as the API server stored it.
func patchPod(ctx context.Context, c client.Client, subresource string, pod, want *corev1.Pod) error {
	patch := client.StrategicMergeFrom(pod, client.MergeFromWithOptimisticLock{})
	opts := []client.PatchOption{client.FieldOwner(FieldOwner)}
	if subresource == "" {
		return c.Patch(ctx, want, patch, opts...)
	}
	return c.SubResource(subresource).Patch(ctx, want, patch, &client.SubResourcePatchOptions{PatchOptions: client.PatchOptions{FieldManager: FieldOwner}})
}

// wantEphemeral adds the template's ephemeral containers the pod lacks, by
// name (an ephemeral container is never changed nor removed).
func wantEphemeral(ch *v1alpha1.PodChaperon, pod *corev1.Pod) *corev1.Pod {
	has := map[string]bool{}
	for _, e := range pod.Spec.EphemeralContainers {
		has[e.Name] = true
	}
	var want *corev1.Pod
	for _, e := range ch.Spec.Template.Spec.EphemeralContainers {
		if has[e.Name] {
			continue
		}
		if want == nil {
			want = pod.DeepCopy()
		}
		want.Spec.EphemeralContainers = append(want.Spec.EphemeralContainers, *e.DeepCopy())
	}
	return want
}

// wantResources resizes, in place, each container and init container whose
// template resources differ: every request and limit the template names
// takes the template's value; those it does not name (a LimitRange's
// default in this cluster) stay.
func wantResources(ch *v1alpha1.PodChaperon, pod *corev1.Pod) *corev1.Pod {
	want := pod.DeepCopy()
	changed := resize(want.Spec.Containers, ch.Spec.Template.Spec.Containers)
	changed = resize(want.Spec.InitContainers, ch.Spec.Template.Spec.InitContainers) || changed
	if !changed {
		return nil
	}
	return want
}

func resize(containers, tmpl []corev1.Container) bool {
	changed := false
	for i := range containers {
		t := containerNamed(tmpl, containers[i].Name)
		if t == nil {
			continue
		}
		res := &containers[i].Resources
		res.Requests, changed = overlay(res.Requests, t.Resources.Requests, changed)
		res.Limits, changed = overlay(res.Limits, t.Resources.Limits, changed)
	}
	return changed
}

// overlay sets in list every quantity of from, reporting a change.
func overlay(list, from corev1.ResourceList, changed bool) (corev1.ResourceList, bool) {
	for name, q := range from {
		if have, ok := list[name]; ok && have.Cmp(q) == 0 {
			continue
		}
		if list == nil {
			list = corev1.ResourceList{}
		}
		list[name] = q.DeepCopy()
		changed = true
	}
	return list, changed
}

// wantPod brings the pod's metadata and the mutable fields of its spec to
// the template: labels and annotations (with the chaperon's parent keys,
// and the keys the source says its user removed taken off: keys this
// cluster's admission added stay), each container's and init container's
// image, activeDeadlineSeconds, and the template's tolerations the pod
// lacks (tolerations are only ever added).
func wantPod(ch *v1alpha1.PodChaperon, pod *corev1.Pod) *corev1.Pod {
	want := pod.DeepCopy()
	tmpl := &ch.Spec.Template
	want.Labels = withParentKeys(merged(want.Labels, tmpl.Metadata.Labels, ch.Annotations[v1alpha1.AnnotationRemovedLabels]), ch.Labels, parentLabels)
	want.Annotations = withParentKeys(merged(want.Annotations, tmpl.Metadata.Annotations, ch.Annotations[v1alpha1.AnnotationRemovedAnnotations]), ch.Annotations, parentAnnotations)
	setImages(want.Spec.Containers, tmpl.Spec.Containers)
	setImages(want.Spec.InitContainers, tmpl.Spec.InitContainers)
	if d := tmpl.Spec.ActiveDeadlineSeconds; d != nil {
		want.Spec.ActiveDeadlineSeconds = ptr.To(*d)
	}
	for _, t := range tmpl.Spec.Tolerations {
		if !proxy.HasToleration(want.Spec.Tolerations, t) {
			want.Spec.Tolerations = append(want.Spec.Tolerations, *t.DeepCopy())
		}
	}
	if equality.Semantic.DeepEqual(pod.ObjectMeta, want.ObjectMeta) && equality.Semantic.DeepEqual(pod.Spec, want.Spec) {
		return nil
	}
	return want
}

// merged is current with every key of tmpl set to its value and the keys
// listed in removed (proxy.FormatKeys) that tmpl lacks taken off.
func merged(current, tmpl map[string]string, removed string) map[string]string {
	out := maps.Clone(current)
	if out == nil {
		out = map[string]string{}
	}
	for k := range proxy.ParseKeys(removed) {
		if _, set := tmpl[k]; !set {
			delete(out, k)
		}
	}
	maps.Copy(out, tmpl)
	return out
}

func setImages(containers, tmpl []corev1.Container) {
	for i := range containers {
		if t := containerNamed(tmpl, containers[i].Name); t != nil && t.Image != "" {
			containers[i].Image = t.Image
		}
	}
}

func containerNamed(list []corev1.Container, name string) *corev1.Container {
	for i := range list {
		if list[i].Name == name {
			return &list[i]
		}
	}
	return nil
}
