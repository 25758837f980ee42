// updates: a bound proxy: what its user changes on the running pod reaches its delegate's chaperon.

package elector

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
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
// applies it to the pod. It tells from the target's cache whether anything
// changed (never from the API server: every pass of every bound proxy
// comes here); only then does it read the chaperon whole (the cache keeps
// its template as read, proxy.TemplateAsRead) and write, with that
// resourceVersion as precondition. A target away, or a chaperon going, is
// left alone: the next event of the proxy or of its chaperon brings it
// back.
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
	if _, what := proxy.UpdatedTemplate(&pc.Spec.Template, pod, cl.Self()); len(what) == 0 {
		return nil
	}
	// Whole, from the API server: the template to write is this one's.
	pc = v1alpha1.PodChaperon{}
	if err := cl.Client().Get(ctx, nn, &pc); err != nil {
		return client.IgnoreNotFound(err)
	}
	if pc.DeletionTimestamp != nil || pc.Labels[v1alpha1.LabelParentUID] != string(pod.UID) {
		return nil
	}
	want, what := proxy.UpdatedTemplate(&pc.Spec.Template, pod, cl.Self())
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
