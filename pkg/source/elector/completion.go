// completion: phases elected and pinned: carry the record out on its target.

package elector

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
	"github.com/fleetlet/fleetlet/pkg/crashpoint"
	"github.com/fleetlet/fleetlet/pkg/proxy"
	"github.com/fleetlet/fleetlet/pkg/source/fleet"
	"github.com/fleetlet/fleetlet/pkg/source/follow"
)

// finishElection carries an election out, one step per pass: the elected
// candidate is checked, marked (once the previous delegate, if any, is
// confirmed gone), waited for until its target's kubelet admits it, and
// only then is the proxy pinned and, once its virtual node has room,
// ungated. A candidate that is not admitted in time or is refused is
// deleted and the election rerun: the proxy never sees that failure.
func (r *Reconciler) finishElection(ctx context.Context, pod *corev1.Pod, rec *corev1.PodCondition) (reconcile.Result, error) {
	record, err := proxy.ParseRecord(rec.Message)
	if err != nil {
		return reconcile.Result{}, r.clearElection(ctx, pod, err.Error())
	}
	key := keyOf(record)
	cl, ok := r.registry.Get(key)
	if !ok || !cl.Health().Ready {
		return r.electedTargetAway(ctx, pod, key)
	}
	if cl.Draining() {
		// Its Target was deleted: elected again elsewhere (a pinned proxy
		// is deleted instead); the drain waits for it.
		why := fmt.Sprintf("its elected target %s is being disconnected", key)
		r.recorder.Eventf(pod, nil, corev1.EventTypeWarning, EventReelecting, "Elect", "%s; electing again", why)
		return reconcile.Result{}, r.clearElection(ctx, pod, why)
	}
	pc, err := r.electedChaperon(ctx, pod, cl, record.Chaperon)
	if pc == nil || err != nil {
		return reconcile.Result{}, err
	}
	// A chaperon read older than our mark of it is marked: the target's
	// cache has not seen the patch yet.
	if pc.Annotations[v1alpha1.AnnotationElected] != "true" && !r.chaperonWrites.Stale(pc.UID, pc.ResourceVersion) {
		if res, stop, err := r.markWinner(ctx, pod, cl, pc); stop {
			return res, err
		}
	}
	// Losers go best-effort: one in a target that does not answer never
	// holds up the winner (its events, or the garbage collector, finish
	// it later).
	r.deleteLosers(ctx, pod, key)

	if res, stop, err := r.awaitAdmission(ctx, pod, rec, cl, pc); stop {
		return res, err
	}
	return r.pinAndUngate(ctx, pod, rec, cl)
}

// electedChaperon reads the elected candidate, the API server confirming
// what the cache does not have. It returns nil when the record was
// cleared because the candidate is gone or is not this proxy's.
func (r *Reconciler) electedChaperon(ctx context.Context, pod *corev1.Pod, cl *fleet.Cluster, name string) (*v1alpha1.PodChaperon, error) {
	var pc v1alpha1.PodChaperon
	nn := types.NamespacedName{Namespace: pod.Namespace, Name: name}
	err := cl.Chaperons(pod.Namespace).Get(ctx, nn, &pc)
	if apierrors.IsNotFound(err) {
		// The cache may be behind: only the API server says it is gone.
		err = cl.Client().Get(ctx, nn, &pc)
	}
	switch {
	case apierrors.IsNotFound(err):
		return nil, r.clearElection(ctx, pod, fmt.Sprintf("the elected candidate %s in %s is gone", name, cl.Key()))
	case err != nil:
		return nil, err
	case pc.Labels[v1alpha1.LabelParentUID] != string(pod.UID):
		return nil, r.clearElection(ctx, pod, fmt.Sprintf("%s in %s belongs to another pod", name, cl.Key()))
	}
	return &pc, nil
}

// markWinner lets the elected candidate become the delegate: its Secrets
// are copied first, and the previous delegate of a re-elected proxy must
// be confirmed gone (never two delegates at once). stop ends this pass:
// not yet, or the record was dropped.
func (r *Reconciler) markWinner(ctx context.Context, pod *corev1.Pod, cl *fleet.Cluster, pc *v1alpha1.PodChaperon) (res reconcile.Result, stop bool, err error) {
	key := cl.Key()
	if prev, ok := previousDelegate(pod); ok && keyOf(prev) != key {
		gone, why := r.delegateGone(ctx, pod, prev)
		if !gone {
			if stuck, err := r.previousStuck(ctx, pod, prev, why); stuck || err != nil {
				return reconcile.Result{}, true, err
			}
			ctrl.LoggerFrom(ctx).V(1).Info("Waiting for the previous delegate to be gone before marking the new one", "previous", prev.Target().String(), "why", why)
			return r.requeueAfter(pod, requeuePreviousDelegate, previousDelegateRecheck), true, nil
		}
	}
	if r.opts.Follower != nil && !cl.Self() {
		// The delegate's Secrets reach the elected target before it may
		// bind there. A Secret missing or taken there since the
		// candidate was checked: this target cannot run the pod.
		why := ""
		userSpec, err := r.opts.Spec(pod)
		if err == nil {
			var refs follow.RefSet
			if refs, err = follow.Refs(pod, userSpec); err == nil {
				why, err = r.follow(ctx, pod, refs, cl, follow.StageDelegate)
			}
		}
		if err != nil {
			// The target or the source did not answer: again, with
			// backoff.
			return reconcile.Result{}, true, fmt.Errorf("copying what the delegate needs to %s: %w", key, err)
		}
		if why != "" {
			if err := r.deleteChaperon(ctx, cl, pc, pod.UID); err != nil {
				return reconcile.Result{}, true, err
			}
			return reconcile.Result{}, true, r.clearElection(ctx, pod, fmt.Sprintf("the elected target %s cannot run the pod: %s", key, why))
		}
	}
	patch, err := markPatch(pc, r.clock.Now())
	if err != nil {
		return reconcile.Result{}, true, err
	}
	before := pc.ResourceVersion
	if err := cl.Client().Patch(ctx, pc, client.RawPatch(types.MergePatchType, patch)); err != nil {
		return reconcile.Result{}, true, fmt.Errorf("marking the elected candidate in %s: %w", key, err)
	}
	r.chaperonWrites.Wrote(pc.UID, before)
	crashpoint.Hit(crashpoint.AfterMark)
	return reconcile.Result{}, false, nil
}

// previousDelegateRecheck is how often a re-elected proxy looks again for
// its previous delegate (whose deletion event also brings it back).
const previousDelegateRecheck = 5 * time.Second

// awaitAdmission waits for the delegate to be bound in its target and
// admitted by the kubelet there (its status past admission: a start
// time). stop ends this pass: not yet, or the record was dropped. A
// delegate the kubelet refused, or not admitted within BindTimeout of its
// marking, is deleted and the election rerun: the proxy is not pinned
// yet, so it never sees that.
func (r *Reconciler) awaitAdmission(ctx context.Context, pod *corev1.Pod, rec *corev1.PodCondition, cl *fleet.Cluster, pc *v1alpha1.PodChaperon) (res reconcile.Result, stop bool, err error) {
	st := delegateStatus(ctx, cl, pod, pc)
	if admitted(st) {
		return reconcile.Result{}, false, nil
	}
	left := r.opts.BindTimeout - r.clock.Since(markedAt(pc, rec))
	why := ""
	switch {
	case refused(st):
		why = fmt.Sprintf("the kubelet in %s refused the delegate: %s", cl.Key(), st.Message)
	case left <= 0:
		why = fmt.Sprintf("the candidate in %s was not bound and started within %s", cl.Key(), r.opts.BindTimeout)
	default:
		return r.requeueAfter(pod, requeueAwaitingBind, left), true, nil
	}
	r.recorder.Eventf(pod, nil, corev1.EventTypeWarning, EventReelecting, "Elect", "%s; electing again", why)
	if err := r.deleteChaperon(ctx, cl, pc, pod.UID); err != nil {
		return reconcile.Result{}, true, err
	}
	return reconcile.Result{}, true, r.clearElection(ctx, pod, why)
}

// markedAt is when the candidate was marked elected (its bind timeout
// counts from then: waiting for a previous delegate to go does not eat
// it), or the record's time when that was not written.
func markedAt(pc *v1alpha1.PodChaperon, rec *corev1.PodCondition) time.Time {
	if t, err := time.Parse(time.RFC3339, pc.Annotations[v1alpha1.AnnotationElectedAt]); err == nil {
		return t
	}
	return rec.LastTransitionTime.Time
}

// delegateStatus is the delegate's status: its pod's when the cache has it
// (fresher), else the chaperon's mirror.
func delegateStatus(ctx context.Context, cl *fleet.Cluster, pod *corev1.Pod, pc *v1alpha1.PodChaperon) *corev1.PodStatus {
	var dp corev1.Pod
	err := cl.Chaperons(pod.Namespace).Get(ctx, client.ObjectKeyFromObject(pc), &dp)
	if err == nil && dp.Labels[v1alpha1.LabelParentUID] == string(pod.UID) && metav1.IsControlledBy(&dp, pc) {
		return &dp.Status
	}
	return &pc.Status.PodStatus
}

// admitted reports whether the target's kubelet admitted the delegate: it
// writes the start time with its first status, after admission.
func admitted(st *corev1.PodStatus) bool { return st.StartTime != nil }

// refused reports whether the target's kubelet refused the delegate at
// admission: Failed without ever starting.
func refused(st *corev1.PodStatus) bool {
	return st.Phase == corev1.PodFailed && st.StartTime == nil
}

// pinAndUngate pins the proxy to the elected target's virtual node and
// lifts the gate, in one write, once the node has room for it: the node
// counts the proxy in its allocatable from its election record on, so by
// the time the delegate is admitted it usually has. A proxy pinned
// already (by an older manager) is only ungated.
func (r *Reconciler) pinAndUngate(ctx context.Context, pod *corev1.Pod, rec *corev1.PodCondition, cl *fleet.Cluster) (reconcile.Result, error) {
	key := cl.Key()
	nodeName := proxy.NodeName(key)
	if res, wait, err := r.bindSourceClaims(ctx, pod, cl, nodeName); wait {
		return res, err
	}
	fits := r.fits(ctx, pod, nodeName)
	r.setAwaitingRoom(pod.UID, !fits)
	if !fits {
		// Never ungated without a fit: the source scheduler would fail
		// to bind it, or preempt. The node's allocatable growing brings
		// the proxy back (the headed index, awaitingRoom); past
		// UnboundTimeout it is deleted, as an ungated proxy that stays
		// unbound is.
		if left := r.opts.UnboundTimeout - r.clock.Since(rec.LastTransitionTime.Time); left > 0 {
			return r.requeueAfter(pod, requeueAwaitingRoom, min(left, 5*time.Second)), nil
		}
		r.recorder.Eventf(pod, nil, corev1.EventTypeWarning, EventUnboundDeleted, "Delete",
			"Elected to %s, which has had no room for it for %s: deleting the proxy so that its controller makes a new one", nodeName, r.opts.UnboundTimeout)
		err := r.client.Delete(ctx, pod, client.Preconditions{UID: ptr.To(pod.UID)})
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if pod.Spec.NodeSelector[corev1.LabelHostname] == nodeName {
		if err := r.ungate(ctx, pod); err != nil {
			return reconcile.Result{}, err
		}
		crashpoint.Hit(crashpoint.AfterUngate)
		return reconcile.Result{}, nil
	}
	if err := r.pinAndLift(ctx, pod, nodeName); err != nil {
		return reconcile.Result{}, err
	}
	crashpoint.Hit(crashpoint.AfterUngate)
	return reconcile.Result{}, nil
}

// setAwaitingRoom remembers whether the proxy waits for room on its
// virtual node, and nothing else, before its gate is lifted.
func (r *Reconciler) setAwaitingRoom(uid types.UID, waiting bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if waiting {
		if r.awaitingRoom == nil {
			r.awaitingRoom = map[types.UID]struct{}{}
		}
		r.awaitingRoom[uid] = struct{}{}
	} else {
		delete(r.awaitingRoom, uid)
	}
}

// isAwaitingRoom reports whether the proxy's last pass found no room for it
// on its virtual node.
func (r *Reconciler) isAwaitingRoom(uid types.UID) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, ok := r.awaitingRoom[uid]
	return ok
}

// fits reports whether the source scheduler binds the proxy to the virtual
// node at the first try: one more pod, and its requests, within the node's
// allocatable less what the pods bound there request and the proxies
// ungated for it, not bound yet, will (r.usage, read in O(1)). Those take
// the room first, whether or not the node's allocatable counts this proxy
// yet, so two proxies never count on the same room.
func (r *Reconciler) fits(ctx context.Context, pod *corev1.Pod, nodeName string) bool {
	var node corev1.Node
	if err := r.client.Get(ctx, types.NamespacedName{Name: nodeName}, &node); err != nil {
		return false
	}
	used, active, ok := sumOf(r.usage, nodeName)
	if !ok {
		// Not every pod counted yet: never a fit.
		return false
	}
	return fitsNode(node.Status.Allocatable, used, active, proxy.PodRequests(pod))
}

// fitsNode is the source scheduler's NodeResourcesFit and pod-count
// check: one more pod requesting requests on a node with allocatable, whose
// active pods request used and are active many.
func fitsNode(allocatable, used corev1.ResourceList, active int64, requests corev1.ResourceList) bool {
	if slots, ok := allocatable[corev1.ResourcePods]; ok && slots.Value() < active+1 {
		return false
	}
	for n, q := range requests {
		if n == corev1.ResourcePods {
			continue
		}
		free := allocatable[n].DeepCopy()
		free.Sub(used[n])
		if free.Cmp(q) < 0 {
			return false
		}
	}
	return true
}

// pinAndLift adds kubernetes.io/hostname=<virtual node> to the proxy's
// nodeSelector (Kubernetes allows adding nodeSelector keys to a gated
// pod) and removes fleetlet's gate, and only it, in one JSON patch.
func (r *Reconciler) pinAndLift(ctx context.Context, pod *corev1.Pod, nodeName string) error {
	patch, ok := proxy.PinAndUngatePatch(pod, nodeName)
	if !ok {
		return nil
	}
	return r.liftGate(ctx, pod, patch, fmt.Sprintf("pinning %s to %s and lifting its gate", klog.KObj(pod), nodeName))
}

// ungate removes fleetlet's gate, and only it.
func (r *Reconciler) ungate(ctx context.Context, pod *corev1.Pod) error {
	patch, ok := proxy.RemoveGatePatch(pod)
	if !ok {
		return nil
	}
	return r.liftGate(ctx, pod, patch, fmt.Sprintf("lifting the gate of %s", klog.KObj(pod)))
}

// liftGate applies a JSON patch that removes fleetlet's gate, whose test
// op fails it if the gate moved since the cache saw it (usually: ours is
// already gone); the next pass reads the gates again. what names the
// write in an error.
func (r *Reconciler) liftGate(ctx context.Context, pod *corev1.Pod, patch []byte, what string) error {
	before := pod.ResourceVersion
	if err := r.client.Patch(ctx, pod, client.RawPatch(types.JSONPatchType, patch)); err != nil {
		if apierrors.IsInvalid(err) || apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("%s: %w", what, err)
	}
	r.writes.Wrote(pod.UID, before)
	return nil
}

// markPatch elects a chaperon: the Elected mark, when, and the finalizer
// that keeps it, once deleted, until its pod is gone
// (v1alpha1.FinalizerDelegatePod). One write, the one the mark costs. A
// chaperon already being deleted gets the mark alone: the API server adds
// no finalizer to it, and the garbage collector's finalizers on it are
// left as they are.
func markPatch(pc *v1alpha1.PodChaperon, now time.Time) ([]byte, error) {
	meta := map[string]any{"annotations": map[string]string{
		v1alpha1.AnnotationElected:   "true",
		v1alpha1.AnnotationElectedAt: now.UTC().Format(time.RFC3339),
	}}
	if pc.DeletionTimestamp == nil && proxy.FinalizerIndex(pc.Finalizers, v1alpha1.FinalizerDelegatePod) < 0 {
		meta["finalizers"] = append(slices.Clip(pc.Finalizers), v1alpha1.FinalizerDelegatePod)
	}
	patch, err := json.Marshal(map[string]any{"metadata": meta})
	if err != nil {
		return nil, fmt.Errorf("encoding the mark: %w", err)
	}
	return patch, nil
}
