// reelection: an election record that cannot be carried out is dropped (a pinned proxy deleted instead), remembering the delegate it may have made.

package elector

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
	"github.com/fleetlet/fleetlet/pkg/proxy"
	"github.com/fleetlet/fleetlet/pkg/source/fleet"
)

// clearElection drops an election record that cannot be carried out, with
// the resourceVersion precondition, so that a new election runs. The
// record's candidate may have become a delegate: it is remembered on the
// proxy (AnnotationPreviousDelegate) before the record goes, so that the
// next delegate is marked only once that one is confirmed gone — unless
// an earlier one remembered there is not gone yet (previousGone).
func (r *Reconciler) clearElection(ctx context.Context, pod *corev1.Pod, why string) error {
	if proxy.PinnedNode(pod) != "" {
		// Once pinned, never elected elsewhere.
		return r.deletePinned(ctx, pod, why)
	}
	p := pod.DeepCopy()
	if old, ok := proxy.Elected(pod); ok && p.Annotations[v1alpha1.AnnotationPreviousDelegate] != old.Message() && r.previousGone(ctx, pod) {
		patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{
			"resourceVersion": pod.ResourceVersion,
			"annotations":     map[string]string{v1alpha1.AnnotationPreviousDelegate: old.Message()},
		}})
		// The patch brings p up to date with the server, for the status
		// write that follows.
		if err := r.client.Patch(ctx, p, client.RawPatch(types.MergePatchType, patch)); err != nil {
			return client.IgnoreNotFound(err)
		}
	}
	setCondition(p, corev1.PodCondition{Type: v1alpha1.ConditionElected, Status: corev1.ConditionFalse, Reason: reasonReelecting, Message: why}, r.clock.Now())
	if err := r.client.Status().Update(ctx, p); err != nil {
		return client.IgnoreNotFound(err)
	}
	r.writes.Wrote(pod.UID, pod.ResourceVersion)
	return nil
}

// previousGone says whether the delegate of an earlier dropped election,
// if any, is confirmed gone. While it is not, the record being dropped
// was never marked (marking waits for it), so its candidate is no
// delegate: the earlier one stays the one remembered.
func (r *Reconciler) previousGone(ctx context.Context, pod *corev1.Pod) bool {
	prev, ok := previousDelegate(pod)
	if !ok {
		return true
	}
	gone, _ := r.delegateGone(ctx, pod, prev)
	return gone
}

// previousDelegate reads the record of the candidate a dropped election
// may have made the delegate.
func previousDelegate(pod *corev1.Pod) (proxy.Record, bool) {
	v, ok := pod.Annotations[v1alpha1.AnnotationPreviousDelegate]
	if !ok {
		return proxy.Record{}, false
	}
	rec, err := proxy.ParseRecord(v)
	return rec, err == nil
}

// delegateGone confirms that the candidate of a dropped election is gone
// from its target: its chaperon and its pod NotFound there (or not this
// proxy's), or its Target deleted. Otherwise it deletes it (foreground)
// if it can, and says why it is not gone yet.
func (r *Reconciler) delegateGone(ctx context.Context, pod *corev1.Pod, prev proxy.Record) (bool, string) {
	key := keyOf(prev)
	cl, ok := r.registry.Get(key)
	if !ok {
		deleted, _, err := r.targetState(ctx, key)
		if err != nil {
			return false, err.Error()
		}
		return deleted, fmt.Sprintf("target %s is not connected yet", key)
	}
	var pc v1alpha1.PodChaperon
	err := cl.Client().Get(ctx, types.NamespacedName{Namespace: pod.Namespace, Name: prev.Chaperon}, &pc)
	switch {
	case apierrors.IsNotFound(err):
		return delegatePodGone(ctx, cl, pod.Namespace, prev.Chaperon, pod.UID)
	case apierrors.IsForbidden(err) && cl.Namespace(ctx, pod.Namespace) == fleet.NamespaceGone:
		return true, ""
	case err != nil:
		return false, fmt.Sprintf("reading it in %s: %v", key, err)
	case pc.Labels[v1alpha1.LabelParentUID] != string(pod.UID):
		return true, ""
	case pc.DeletionTimestamp == nil:
		if err := r.deleteChaperon(ctx, cl, &pc, pod.UID); err != nil {
			return false, fmt.Sprintf("deleting it in %s: %v", key, err)
		}
	}
	return false, fmt.Sprintf("it is being deleted in %s", key)
}

// previousStuck deletes a re-elected proxy whose previous delegate cannot
// be confirmed gone because its target has not been Ready for
// ElectedTargetTimeout: as Kubernetes does with a pod on an unreachable
// node, the proxy is deleted (it stays Terminating until that delegate is
// confirmed gone, so a StatefulSet waits for the name) and its controller
// makes a new one, elected afresh. Before, the proxy waited, gated, for as
// long as the target stayed down: a rollout hung for the whole outage.
func (r *Reconciler) previousStuck(ctx context.Context, pod *corev1.Pod, prev proxy.Record, why string) (bool, error) {
	key := keyOf(prev)
	deleted, notReadySince, err := r.targetState(ctx, key)
	if err != nil || deleted || notReadySince.IsZero() || r.clock.Since(notReadySince) < r.opts.ElectedTargetTimeout {
		return false, err
	}
	r.recorder.Eventf(pod, nil, corev1.EventTypeWarning, EventPreviousDelegateUnreachable, "Delete",
		"Its previous delegate in %s cannot be confirmed gone (%s; the target has not been Ready for %s): deleting the proxy so that its controller makes a new one; it stays Terminating until that delegate is confirmed gone",
		key, why, r.clock.Since(notReadySince).Round(time.Second))
	electionsTotal.WithLabelValues("previous_unreachable_deleted").Inc()
	return true, client.IgnoreNotFound(r.client.Delete(ctx, pod, client.Preconditions{UID: ptr.To(pod.UID)}))
}

// electedTargetAway decides for a record whose target is not Ready (or not
// connected): it waits, unless the Target was deleted or has been NotReady
// for longer than ElectedTargetTimeout; then the election is rerun (a
// pinned proxy is deleted instead). A bound proxy never comes here: its
// virtual node's not-ready toleration, the user's to set, decides.
func (r *Reconciler) electedTargetAway(ctx context.Context, pod *corev1.Pod, key proxy.TargetKey) (reconcile.Result, error) {
	deleted, notReadySince, err := r.targetState(ctx, key)
	if err != nil {
		return reconcile.Result{}, err
	}
	why := ""
	switch {
	case deleted:
		why = fmt.Sprintf("its elected target %s was deleted", key)
	case !notReadySince.IsZero() && r.clock.Since(notReadySince) >= r.opts.ElectedTargetTimeout:
		why = fmt.Sprintf("its elected target %s has not been Ready for %s", key, r.clock.Since(notReadySince).Round(time.Second))
	case !notReadySince.IsZero():
		return r.requeueAfter(pod, requeueTargetNotReady, min(r.opts.ElectedTargetTimeout-r.clock.Since(notReadySince), 5*time.Second)), nil
	default:
		// Ready in its status but not (yet) in the registry: wait.
		return r.requeueAfter(pod, requeueTargetNotReady, 5*time.Second), nil
	}
	r.recorder.Eventf(pod, nil, corev1.EventTypeWarning, EventReelecting, "Elect", "%s; electing again", why)
	return reconcile.Result{}, r.clearElection(ctx, pod, why)
}

// targetState reads a target's Target (or ClusterTarget) in the source:
// deleted, or since when it has not been Ready (zero while it is).
func (r *Reconciler) targetState(ctx context.Context, key proxy.TargetKey) (deleted bool, notReadySince time.Time, err error) {
	var obj client.Object
	var conds *[]metav1.Condition
	if key.Namespace == "" {
		ct := &v1alpha1.ClusterTarget{}
		obj, conds = ct, &ct.Status.Conditions
	} else {
		t := &v1alpha1.Target{}
		obj, conds = t, &t.Status.Conditions
	}
	err = r.client.Get(ctx, types.NamespacedName{Namespace: key.Namespace, Name: key.Name}, obj)
	if apierrors.IsNotFound(err) {
		return true, time.Time{}, nil
	}
	if err != nil {
		return false, time.Time{}, fmt.Errorf("reading target %s: %w", key, err)
	}
	if c := meta.FindStatusCondition(*conds, v1alpha1.ConditionReady); c != nil && c.Status != metav1.ConditionTrue {
		return false, c.LastTransitionTime.Time, nil
	}
	return false, time.Time{}, nil
}

// deletePinned deletes a pinned proxy whose election cannot be completed on
// the target it is pinned to, with an Event: pinning it to another virtual
// node would change a nodeSelector key, which the API server refuses, and
// its controller makes a new pod that is elected afresh.
func (r *Reconciler) deletePinned(ctx context.Context, pod *corev1.Pod, why string) error {
	r.recorder.Eventf(pod, nil, corev1.EventTypeWarning, EventPinnedProxyDeleted, "Delete",
		"Pinned to %s but %s: deleting the proxy so that its controller makes a new one", proxy.PinnedNode(pod), why)
	electionsTotal.WithLabelValues("pinned_deleted").Inc()
	err := r.client.Delete(ctx, pod, client.Preconditions{UID: ptr.To(pod.UID)})
	return client.IgnoreNotFound(err)
}
