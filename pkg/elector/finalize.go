// finalize: phase finalizing, and what follows a pod to its targets.

package elector

import (
	"context"
	"errors"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
	"github.com/fleetlet/fleetlet/pkg/crashpoint"
	"github.com/fleetlet/fleetlet/pkg/follow"
	"github.com/fleetlet/fleetlet/pkg/naming"
	"github.com/fleetlet/fleetlet/pkg/proxy"
	"github.com/fleetlet/fleetlet/pkg/target"
)

// finalize deletes a deleted proxy's chaperons everywhere (foreground: each
// goes only after its pod) and removes fleetlet's finalizer once they are
// gone. A target that does not answer keeps the proxy Terminating: its
// delegate cannot be confirmed gone.
func (r *Reconciler) finalize(ctx context.Context, pod *corev1.Pod) (reconcile.Result, error) {
	remaining := 0
	name := naming.RemoteName(pod.Name, pod.UID)
	for _, cl := range r.registry.List() {
		if cl.Key().Namespace != "" && cl.Key().Namespace != pod.Namespace {
			continue
		}
		var pc v1alpha1.PodChaperon
		err := cl.Client().Get(ctx, types.NamespacedName{Namespace: pod.Namespace, Name: name}, &pc)
		if apierrors.IsNotFound(err) || (apierrors.IsForbidden(err) && cl.Namespace(ctx, pod.Namespace) == target.NamespaceGone) {
			// A namespace deleted in the target took its chaperons and
			// pods with it (its deletion ends only when they are gone),
			// and the source's rights there with it.
			continue
		}
		if err != nil {
			remaining++
			continue
		}
		if pc.Labels[v1alpha1.LabelParentUID] != string(pod.UID) {
			continue
		}
		remaining++
		if pc.DeletionTimestamp == nil {
			if err := deleteChaperon(ctx, cl, &pc, pod.UID); err != nil {
				ctrl.LoggerFrom(ctx).Error(err, "Deleting a chaperon of a deleted proxy", "target", cl.Key().String())
			}
			crashpoint.Hit(crashpoint.MidFinalize)
		}
	}
	if remaining > 0 {
		return reconcile.Result{RequeueAfter: time.Second}, nil
	}
	for _, cl := range r.registry.List() {
		if cl.Key().Namespace == "" || cl.Key().Namespace == pod.Namespace {
			r.release(ctx, pod, cl)
		}
	}
	patch, ok := proxy.RemoveFinalizerPatch(pod.Finalizers, v1alpha1.FinalizerDelegate)
	if !ok {
		return reconcile.Result{}, nil
	}
	return reconcile.Result{}, client.IgnoreNotFound(r.client.Patch(ctx, pod, client.RawPatch(types.JSONPatchType, patch)))
}

// follow takes what the pod references to a target, at a stage of its
// life. A refusal (an object that is not allowed, missing, or whose name
// another owner holds there) comes back as why the target cannot run the
// pod, with an Event, and what was copied for this pod there is released;
// err is a failure to get an answer.
func (r *Reconciler) follow(ctx context.Context, pod *corev1.Pod, refs follow.RefSet, cl *target.Cluster, stage follow.Stage) (why string, err error) {
	key := cl.Key()
	err = r.opts.Follower.Ensure(ctx, cl.Client(), key.String(), pod, refs, stage)
	var refusal *follow.Refusal
	if !errors.As(err, &refusal) {
		return "", err
	}
	r.recorder.Eventf(pod, nil, corev1.EventTypeWarning, EventFollowRefused, "Follow", "%s: %s", key, refusal.Error())
	r.release(ctx, pod, cl)
	return refusal.Error(), nil
}

// release drops the pod from the followers of its copies in a target,
// deleting those no other pod needs. A failure is left to the garbage
// collector.
func (r *Reconciler) release(ctx context.Context, pod *corev1.Pod, cl *target.Cluster) {
	if r.opts.Follower == nil || cl.Self() {
		return
	}
	if err := r.opts.Follower.Release(ctx, cl.Client(), cl.Key().String(), pod.UID, pod.Namespace); err != nil {
		ctrl.LoggerFrom(ctx).V(1).Info("Releasing followed objects; the garbage collector will", "target", cl.Key().String(), "err", err.Error())
	}
}
