// finalize: phase finalizing, and what follows a pod to its targets.

package elector

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
	"github.com/fleetlet/fleetlet/pkg/crashpoint"
	"github.com/fleetlet/fleetlet/pkg/naming"
	"github.com/fleetlet/fleetlet/pkg/proxy"
	"github.com/fleetlet/fleetlet/pkg/source/fleet"
	"github.com/fleetlet/fleetlet/pkg/source/follow"
)

// finalize deletes a deleted proxy's chaperons everywhere (foreground: each
// goes only after its pod) and removes fleetlet's finalizer once they are
// gone. A target that does not answer keeps the proxy Terminating: its
// delegate cannot be confirmed gone.
func (r *Reconciler) finalize(ctx context.Context, pod *corev1.Pod) (reconcile.Result, error) {
	// One snapshot: a target that connects or disconnects meanwhile is in
	// one of the two lists, never in neither.
	clusters, unconnected, err := r.registry.Known(ctx)
	if err != nil {
		return reconcile.Result{}, err
	}
	onEvent, soon := 0, 0
	name := naming.RemoteName(pod.Name, pod.UID)
	for _, cl := range clusters {
		if cl.Key().Namespace != "" && cl.Key().Namespace != pod.Namespace {
			continue
		}
		switch r.finalizeIn(ctx, pod, cl, name) {
		case holdOnEvent:
			onEvent++
		case holdSoon:
			soon++
		}
	}
	// A target the source knows but cannot reach (its credentials
	// unreadable, say) is not one where the delegate is gone: the proxy
	// waits for it if its delegate may run there.
	for _, key := range unconnected {
		if mayRunIn(pod, key) {
			ctrl.LoggerFrom(ctx).V(1).Info("Waiting for an unreachable target before removing the finalizer", "target", key.String())
			soon++
		}
	}
	if soon > 0 {
		return r.requeueAfter(pod, requeueUnreachable, time.Second), nil
	}
	if onEvent > 0 {
		return r.requeueAfter(pod, requeueDelegateGoing, finalizeSafety), nil
	}
	for _, cl := range r.registry.List() {
		if cl.Key().Namespace == "" || cl.Key().Namespace == pod.Namespace {
			r.release(ctx, pod, cl)
		}
	}
	r.forget(pod.UID)
	if r.opts.Follower != nil {
		r.opts.Follower.Forget(pod.UID)
	}
	if patch, ok := proxy.RemoveFinalizerPatch(pod.UID, pod.Finalizers, v1alpha1.FinalizerDelegate); ok {
		if err := r.client.Patch(ctx, pod, client.RawPatch(types.JSONPatchType, patch)); err != nil {
			if apierrors.IsInvalid(err) {
				// Its finalizers moved, or a pod of the same name
				// replaced it (a StatefulSet's): decide on a fresh read.
				return r.requeueAfter(pod, requeueConflict, requeueSoon), nil
			}
			return reconcile.Result{}, client.IgnoreNotFound(err)
		}
	}
	return reconcile.Result{}, r.finishDeletion(ctx, pod)
}

// hold is what keeps a deleted proxy in one target.
type hold int

const (
	// holdNone: nothing of it is left there.
	holdNone hold = iota
	// holdOnEvent: its delegate is going, and the target's cache of the
	// namespace's chaperons and their pods had synced before it was read:
	// the chaperon's or the pod's deletion there enqueues the proxy
	// (the registry's ChaperonSource), so it waits for that event.
	holdOnEvent
	// holdSoon: the target did not answer, refused a delete, or its cache
	// was not watching yet: nothing would tell, so it asks again soon.
	holdSoon
)

// finalizeIn deletes the proxy's chaperon in one target (name is its
// name there) and says what of it is left.
func (r *Reconciler) finalizeIn(ctx context.Context, pod *corev1.Pod, cl *fleet.Cluster, name string) hold {
	_, watched := cl.ChaperonCache(pod.Namespace)
	going := func() hold {
		cl.WatchChaperons(pod.Namespace)
		if watched {
			return holdOnEvent
		}
		return holdSoon
	}
	reader, cached := r.finalizeReader(cl, pod)
	var pc v1alpha1.PodChaperon
	err := reader.Get(ctx, types.NamespacedName{Namespace: pod.Namespace, Name: name}, &pc)
	if apierrors.IsNotFound(err) && mayRunIn(pod, cl.Key()) {
		// The chaperon alone is no proof: deleted there without
		// propagation, it leaves its pod to the target's garbage
		// collector and to the pod's grace period.
		gone, why, err := delegatePodFrom(ctx, reader, cached, cl, pod.Namespace, name, pod.UID)
		switch {
		case err != nil:
			ctrl.LoggerFrom(ctx).V(1).Info("A target did not confirm the delegate gone", "target", cl.Key().String(), "error", err.Error())
			return holdSoon
		case !gone:
			ctrl.LoggerFrom(ctx).V(1).Info("Waiting for the delegate of a deleted chaperon to go", "target", cl.Key().String(), "why", why)
			return going()
		}
		return holdNone
	}
	if apierrors.IsNotFound(err) || (apierrors.IsForbidden(err) && cl.Namespace(ctx, pod.Namespace) == fleet.NamespaceGone) {
		// A namespace deleted in the target took its chaperons and
		// pods with it (its deletion ends only when they are gone),
		// and the source's rights there with it.
		return holdNone
	}
	if err != nil {
		ctrl.LoggerFrom(ctx).V(1).Info("A target did not confirm the chaperon gone", "target", cl.Key().String(), "error", err.Error())
		return holdSoon
	}
	if pc.Labels[v1alpha1.LabelParentUID] != string(pod.UID) {
		return holdNone
	}
	if pc.DeletionTimestamp == nil {
		r.passDeletionGrace(ctx, cl, pod, &pc)
		if err := r.deleteChaperon(ctx, cl, &pc, pod.UID); err != nil {
			ctrl.LoggerFrom(ctx).Error(err, "Deleting a chaperon of a deleted proxy", "target", cl.Key().String())
			return holdSoon
		}
		crashpoint.Hit(crashpoint.MidFinalize)
	}
	return going()
}

// finalizeReader is where a deleted proxy's chaperon and delegate pod in
// one target are read first: the target's cache of the namespace once it
// has synced, unless this elector created the chaperon so lately that the
// cache may not show it yet (the rule candidates are created by); else
// the API server. Nothing of a deleted proxy is created again, so what the
// cache lacks is gone. A chaperon the cache still shows after it went is
// deleted again (NotFound, nothing to do) and waited for on its event; a
// pod it still shows is read again from the API server (delegatePodFrom).
func (r *Reconciler) finalizeReader(cl *fleet.Cluster, pod *corev1.Pod) (reader client.Reader, cached bool) {
	if c, synced := cl.ChaperonCache(pod.Namespace); synced && !r.createdLately(pod.UID, cl.Key()) {
		return c, true
	}
	return cl.Client(), false
}

// finalizeSafety is how long a deleted proxy whose delegate is still going
// in a target that answers waits before it looks again without an event:
// the chaperon's and the pod's deletion there enqueue it, so this only
// bounds what a lost event would cost. Before, it looked every second,
// with a read of every target each time.
const finalizeSafety = 10 * time.Second

// passDeletionGrace tells a chaperon the grace period its proxy was
// deleted with when it is not the pod's own (`kubectl delete
// --grace-period=N`, `--force`): the target's chaperon controller deletes
// the delegate with it. Not passed: the 0 the API server gives a proxy not
// bound yet (a pod no kubelet runs goes at once, whatever was asked), and
// a proxy an earlier release made, whose grace period is 0 and its
// delegate's the user's. Best-effort: without it, the delegate goes with
// its own grace period.
func (r *Reconciler) passDeletionGrace(ctx context.Context, cl *fleet.Cluster, pod *corev1.Pod, pc *v1alpha1.PodChaperon) {
	deleted, own, delegate := pod.DeletionGracePeriodSeconds, pod.Spec.TerminationGracePeriodSeconds, pc.Spec.Template.Spec.TerminationGracePeriodSeconds
	if pod.Spec.NodeName == "" || deleted == nil || own == nil || delegate == nil || *own != *delegate || *deleted == *own {
		return
	}
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, v1alpha1.AnnotationDeletionGracePeriod, strconv.FormatInt(*deleted, 10))
	if err := cl.Client().Patch(ctx, pc, client.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
		ctrl.LoggerFrom(ctx).V(1).Info("Passing the deletion's grace period to a chaperon; its delegate keeps its own", "target", cl.Key().String(), "error", err.Error())
	}
}

// finishDeletion makes a deleted proxy's last delete, as a kubelet does once
// a pod's containers are gone: with no grace period left. A proxy deleted
// with a grace period (`kubectl delete --grace-period=30`, a
// DeleteCollection with grace 1) stays Terminating until then, and on a
// virtual node no kubelet makes it. Other finalizers still hold the pod
// after it, as they would on a node.
func (r *Reconciler) finishDeletion(ctx context.Context, pod *corev1.Pod) error {
	if g := pod.DeletionGracePeriodSeconds; g == nil || *g == 0 {
		return nil
	}
	err := r.client.Delete(ctx, pod, client.GracePeriodSeconds(0), client.Preconditions{UID: ptr.To(pod.UID)})
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil // gone, or another pod of the name
	}
	return err
}

// delegatePodGone confirms that no pod of this proxy runs, or is still
// shutting down, under its chaperon's name in a target. A chaperon is
// gone before its pod when it was deleted without Foreground propagation
// (an admin cleaning up, a namespace reset): until the pod is gone too, the
// proxy's delegate is not, and a StatefulSet must not make its pod again
// elsewhere. A pod that has finished (Succeeded, Failed) runs nothing.
func delegatePodGone(ctx context.Context, cl *fleet.Cluster, namespace, name string, uid types.UID) (bool, string) {
	gone, why, err := delegatePod(ctx, cl, namespace, name, uid)
	if err != nil {
		return false, fmt.Sprintf("reading its pod in %s: %v", cl.Key(), err)
	}
	return gone, why
}

// delegatePodFrom is delegatePod that takes the word of reader, cl's cache
// of the namespace when cached, that the pod is gone. The cache
// holds the pods of this source's chaperons, from a list at its start and
// every event since, and a delegate's pod was created before its election,
// so one it lacks was deleted. One it still shows is read again from the
// API server: a cache whose watch lost its rights there (the namespace
// being deleted takes the source's RoleBinding first) keeps showing what
// it saw last, and the API server's answer says whether the namespace,
// and the pod with it, is gone. Before, each delegate's deletion cost its
// target a live read of the pod.
func delegatePodFrom(ctx context.Context, reader client.Reader, cached bool, cl *fleet.Cluster, namespace, name string, uid types.UID) (gone bool, why string, err error) {
	if cached {
		err := reader.Get(ctx, types.NamespacedName{Namespace: namespace, Name: name}, &corev1.Pod{})
		if apierrors.IsNotFound(err) {
			return true, "", nil
		}
	}
	return delegatePod(ctx, cl, namespace, name, uid)
}

// delegatePod is delegatePodGone with a failed read apart (err): the pod
// may be gone or not.
func delegatePod(ctx context.Context, cl *fleet.Cluster, namespace, name string, uid types.UID) (gone bool, why string, err error) {
	var p corev1.Pod
	err = cl.Client().Get(ctx, types.NamespacedName{Namespace: namespace, Name: name}, &p)
	switch {
	case apierrors.IsNotFound(err):
		return true, "", nil
	case apierrors.IsForbidden(err) && cl.Namespace(ctx, namespace) == fleet.NamespaceGone:
		return true, "", nil
	case err != nil:
		return false, "", err
	case p.Labels[v1alpha1.LabelParentUID] != string(uid):
		return true, "", nil
	case p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed:
		return true, "", nil
	}
	return false, fmt.Sprintf("its chaperon is gone from %s but its pod is not (the target's garbage collector or the pod's grace period)", cl.Key()), nil
}

// mayRunIn says whether a proxy's delegate may run in a target: the target
// its election record or its previous delegate names, or the one of the
// virtual node it is pinned or bound to. A mere candidate never runs
// unelected; one left in a target the source cannot reach is collected
// when it answers again (pkg/source/gc).
func mayRunIn(pod *corev1.Pod, key proxy.TargetKey) bool {
	if rec, ok := proxy.Elected(pod); ok && keyOf(rec) == key {
		return true
	}
	if prev, ok := previousDelegate(pod); ok && keyOf(prev) == key {
		return true
	}
	node := proxy.NodeName(key)
	return pod.Spec.NodeName == node || proxy.PinnedNode(pod) == node
}

// follow takes what the pod references to a target, at a stage of its
// life. A refusal (an object that is not allowed, missing, or whose name
// another owner holds there) comes back as why the target cannot run the
// pod, with an Event, and what was copied for this pod there is released;
// err is a failure to get an answer.
func (r *Reconciler) follow(ctx context.Context, pod *corev1.Pod, refs follow.RefSet, cl *fleet.Cluster, stage follow.Stage) (why string, err error) {
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
func (r *Reconciler) release(ctx context.Context, pod *corev1.Pod, cl *fleet.Cluster) {
	if r.opts.Follower == nil || cl.Self() {
		return
	}
	if err := r.opts.Follower.Release(ctx, cl.Client(), cl.Key().String(), pod); err != nil {
		ctrl.LoggerFrom(ctx).V(1).Info("Releasing followed objects; the garbage collector will", "target", cl.Key().String(), "err", err.Error())
	}
}
