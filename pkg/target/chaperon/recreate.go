package chaperon

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
	"github.com/fleetlet/fleetlet/pkg/target/access"
)

const (
	// DefaultRecreateDelay is how long a delegate stays gone, once both its
	// deletion was seen and its source's heartbeat expired, before the
	// chaperon controller creates it again.
	DefaultRecreateDelay = time.Minute

	// ReasonDelegateRecreated: the delegate was deleted while its source
	// was unreachable, and this controller created it again. It is the
	// reason of the PodCreated condition (True) while that pod lives, and
	// of the Normal Event that reports the recreation.
	ReasonDelegateRecreated = "DelegateRecreated"

	// IndexAwaitingRecreation indexes the PodChaperons whose delegate may
	// be created again (deleted, elected, restartPolicy Always, chaperon
	// not being deleted) by their parent-cluster label, so that a change
	// of a source's heartbeat Lease wakes only those.
	IndexAwaitingRecreation = "fleetlet.chaperon.awaitingRecreation"
)

// heartbeatLeasePrefix starts the name of every source's heartbeat Lease.
var heartbeatLeasePrefix = access.HeartbeatLeaseName("")

// HeartbeatLeaseCache restricts the manager's cache of Leases to the
// sources' heartbeat Leases: those labelled parent-cluster, as the source
// creates them (pkg/source/fleet). Pass it as the Lease entry of the manager's
// cache.Options.ByObject. A heartbeat Lease without that label is then
// invisible, and counts as missing: its source's delegates are never
// recreated, the safe side.
func HeartbeatLeaseCache() cache.ByObject {
	req, err := labels.NewRequirement(v1alpha1.LabelParentCluster, selection.Exists, nil)
	if err != nil {
		panic(err) // a constant, valid key
	}
	return cache.ByObject{Label: labels.NewSelector().Add(*req)}
}

// heartbeat is what a source's heartbeat Lease says.
type heartbeat struct {
	// known is false when there is no Lease, or one that was never
	// renewed or has no duration: nothing can be told from it.
	known bool
	// expires is renewTime + leaseDurationSeconds, as the source's clock
	// wrote renewTime.
	expires time.Time
}

// heartbeatOf reads lease (nil: none).
func heartbeatOf(lease *coordinationv1.Lease) heartbeat {
	if lease == nil || lease.Spec.RenewTime == nil || lease.Spec.LeaseDurationSeconds == nil || *lease.Spec.LeaseDurationSeconds <= 0 {
		return heartbeat{}
	}
	return heartbeat{known: true, expires: lease.Spec.RenewTime.Add(time.Duration(*lease.Spec.LeaseDurationSeconds) * time.Second)}
}

// recreateInput is what the decision to create a deleted delegate again
// depends on.
type recreateInput struct {
	// elected: the chaperon carries multicluster.fleetlet.io/elected=true.
	elected bool
	// restartPolicy of the chaperon's template ("" is Always, as the API
	// server defaults a pod's).
	restartPolicy corev1.RestartPolicy
	// podGone: the pod was created and no pod of its name exists now.
	podGone bool
	// deletedAt is when the pod was seen deleted.
	deletedAt time.Time
	heartbeat heartbeat
	delay     time.Duration
	now       time.Time
}

// verdictKind is what to do about a deleted delegate.
type verdictKind int

const (
	// keepDeleted: never, as things stand: not a delegate, not restarted
	// always, a pod of that name exists, or no heartbeat to judge by.
	keepDeleted verdictKind = iota
	// sourceReachable: the heartbeat is fresh; the source replaces the
	// delegate. Look again when it expires.
	sourceReachable
	// awaitDelay: the heartbeat expired; the pod is created again at the
	// verdict's time unless the source comes back first.
	awaitDelay
	// recreateNow: create the pod again.
	recreateNow
)

// recreateVerdict is the decision and the instant that matters to it: the
// heartbeat's expiry (sourceReachable) or the recreation (awaitDelay,
// recreateNow).
type recreateVerdict struct {
	kind verdictKind
	at   time.Time
}

// requeue is when to look again: at the verdict's instant, if it is to
// come.
func (v recreateVerdict) requeue(now time.Time) ctrl.Result {
	if (v.kind == sourceReachable || v.kind == awaitDelay) && v.at.After(now) {
		return ctrl.Result{RequeueAfter: v.at.Sub(now)}
	}
	return ctrl.Result{}
}

// decideRecreate decides whether a deleted delegate is created again. Only
// an elected candidate whose pod restarts Always, whose pod is gone, and
// whose source's heartbeat is known and expired, is; and only delay after
// the later of its deletion and the heartbeat's expiry. A missing Lease
// never counts as expired: a self target has none, and this controller
// cannot tell a Lease deleted from one never created.
func decideRecreate(in recreateInput) recreateVerdict {
	policy := in.restartPolicy
	if policy == "" {
		policy = corev1.RestartPolicyAlways
	}
	if !in.elected || policy != corev1.RestartPolicyAlways || !in.podGone || !in.heartbeat.known {
		return recreateVerdict{kind: keepDeleted}
	}
	if in.now.Before(in.heartbeat.expires) {
		return recreateVerdict{kind: sourceReachable, at: in.heartbeat.expires}
	}
	start := in.heartbeat.expires
	if in.deletedAt.After(start) {
		start = in.deletedAt
	}
	at := start.Add(in.delay)
	if in.now.Before(at) {
		return recreateVerdict{kind: awaitDelay, at: at}
	}
	return recreateVerdict{kind: recreateNow, at: at}
}

// isElected reports whether the source elected ch's candidate: its pod is
// a delegate.
func isElected(ch *v1alpha1.PodChaperon) bool {
	return ch.Annotations[v1alpha1.AnnotationElected] == "true"
}

// mayRecreate reports whether ch's delegate may be created again once
// deleted: ch is elected, not being deleted, and its pod restarts Always.
func mayRecreate(ch *v1alpha1.PodChaperon) bool {
	p := ch.Spec.Template.Spec.RestartPolicy
	return isElected(ch) && ch.DeletionTimestamp.IsZero() && (p == "" || p == corev1.RestartPolicyAlways)
}

// awaitsRecreation reports whether ch records its pod deleted and may have
// it created again.
func awaitsRecreation(ch *v1alpha1.PodChaperon) bool { return isDeletedRecord(ch) && mayRecreate(ch) }

// awaitingRecreationIndex is IndexAwaitingRecreation's function.
func awaitingRecreationIndex(obj client.Object) []string {
	ch, ok := obj.(*v1alpha1.PodChaperon)
	if !ok || !awaitsRecreation(ch) || ch.Labels[v1alpha1.LabelParentCluster] == "" {
		return nil
	}
	return []string{ch.Labels[v1alpha1.LabelParentCluster]}
}

// deletedAt is when ch's pod was recorded deleted (to the second): the
// PodDeleted condition's lastTransitionTime.
func deletedAt(ch *v1alpha1.PodChaperon) time.Time {
	if c := meta.FindStatusCondition(ch.Status.Conditions, v1alpha1.ConditionPodCreated); c != nil {
		return c.LastTransitionTime.Time
	}
	return time.Time{}
}

// recreation is why a pod is being created again, for its condition and
// Event.
type recreation struct {
	source  string
	lease   types.NamespacedName
	expired time.Time
	at      time.Time
}

// afterDeletion decides, for a chaperon whose created pod is gone (seen
// gone at seenAt, to the second), whether to leave it gone or create it
// again, and does it. It returns what to write and the chaperon to write
// it on (read again from the API server before a recreation). A PodDeleted
// condition records seenAt as its lastTransitionTime, the instant later
// passes count the delay from.
func (r *PodChaperonReconciler) afterDeletion(ctx context.Context, ch *v1alpha1.PodChaperon, seenAt time.Time) (outcome, *v1alpha1.PodChaperon) {
	out, ch := r.decideAfterDeletion(ctx, ch, seenAt)
	if out.cond != nil && out.cond.Reason == ReasonPodDeleted {
		out.cond.LastTransitionTime = metav1.NewTime(seenAt)
	}
	return out, ch
}

func (r *PodChaperonReconciler) decideAfterDeletion(ctx context.Context, ch *v1alpha1.PodChaperon, seenAt time.Time) (outcome, *v1alpha1.PodChaperon) {
	log := ctrl.LoggerFrom(ctx)
	if !mayRecreate(ch) || checkLabels(ch) != nil {
		return outcome{cond: deletedCondition("")}, ch
	}
	id, err := resolveSource(ctx, r.Client, ch)
	if err != nil {
		if werr := (*waitError)(nil); errors.As(err, &werr) {
			// No identity to create the pod as: it stays deleted. A change
			// of the Source or ClusterSource wakes the chaperon.
			return outcome{cond: deletedCondition("")}, ch
		}
		return outcome{err: err}, ch
	}
	leaseKey := types.NamespacedName{Namespace: id.serviceAccount.Namespace, Name: access.HeartbeatLeaseName(id.name)}
	lease, err := getLease(ctx, r.Client, leaseKey)
	if err != nil {
		return outcome{err: err}, ch
	}
	now := r.Clock.Now()
	in := recreateInput{
		elected: true, restartPolicy: ch.Spec.Template.Spec.RestartPolicy, podGone: true,
		deletedAt: seenAt, heartbeat: heartbeatOf(lease), delay: r.RecreateDelay, now: now,
	}
	v := decideRecreate(in)
	rec := recreation{source: id.kind + " " + id.name, lease: leaseKey, expired: in.heartbeat.expires, at: v.at}
	switch v.kind {
	case sourceReachable:
		return outcome{cond: deletedCondition(fmt.Sprintf(
			" Its source (%s) is reachable: its heartbeat Lease %s is renewed. Should the heartbeat expire before the source deletes this chaperon, the pod is created again %s after the expiry.",
			rec.source, leaseKey, r.RecreateDelay)), result: v.requeue(now)}, ch
	case awaitDelay:
		log.V(1).Info("Source unreachable: the delegate is created again later", "lease", leaseKey, "expired", rec.expired, "at", v.at)
		return outcome{cond: unreachableDeletedCondition(rec), result: v.requeue(now)}, ch
	case keepDeleted:
		return outcome{cond: deletedCondition("")}, ch
	}

	// Recreate only on what the API server says now: the chaperon still
	// records the deletion and still asks for a delegate, and the source
	// has not renewed its heartbeat in the meantime.
	fresh := &v1alpha1.PodChaperon{}
	if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(ch), fresh); err != nil {
		return outcome{err: client.IgnoreNotFound(err)}, ch
	}
	// A change seen here is also an event on its way (the chaperon's, or
	// the Lease's) that makes this controller decide again; RetryInterval
	// is only a safety net.
	changed := outcome{result: ctrl.Result{RequeueAfter: r.RetryInterval}}
	if fresh.UID != ch.UID || !awaitsRecreation(fresh) {
		log.V(1).Info("The chaperon changed since the cache saw it; not recreating its delegate now")
		return changed, ch
	}
	if lease, err = getLease(ctx, r.APIReader, leaseKey); err != nil {
		return outcome{err: err}, ch
	}
	in.heartbeat, in.now = heartbeatOf(lease), r.Clock.Now()
	in.deletedAt = deletedAt(fresh)
	if v = decideRecreate(in); v.kind != recreateNow {
		log.V(1).Info("The heartbeat Lease or the deletion record changed since the cache saw them; not recreating the delegate now", "lease", leaseKey)
		return changed, ch
	}
	rec.expired, rec.at = in.heartbeat.expires, v.at
	log.Info("Source unreachable: creating its deleted delegate again", "lease", leaseKey, "expired", rec.expired, "deletedAt", in.deletedAt)
	out := r.create(ctx, fresh, &rec)
	if out.cond != nil && out.cond.Status == metav1.ConditionFalse {
		// Refused, or the name is taken: the record stays "deleted", so
		// that a source back in the meantime finds nothing created behind
		// its back; the retry comes with out's backoff.
		cond := unreachableDeletedCondition(rec)
		cond.Message += fmt.Sprintf(" Creating it again failed (%s): %s", out.cond.Reason, out.cond.Message)
		out.cond = cond
	}
	return out, fresh
}

// getLease reads the Lease of key; nil when there is none.
func getLease(ctx context.Context, c client.Reader, key types.NamespacedName) (*coordinationv1.Lease, error) {
	lease := &coordinationv1.Lease{}
	if err := c.Get(ctx, key, lease); err != nil {
		if client.IgnoreNotFound(err) == nil {
			return nil, nil
		}
		return nil, fmt.Errorf("reading heartbeat Lease %s: %w", key, err)
	}
	return lease, nil
}

// unreachableDeletedCondition is PodDeleted while the pod waits to be
// created again.
func unreachableDeletedCondition(rec recreation) *metav1.Condition {
	return falseCondition(ReasonPodDeleted, fmt.Sprintf(
		"The delegate this chaperon held was deleted while its source (%s) is unreachable: its heartbeat Lease %s expired at %s. fleetlet creates it again at %s, unless the source renews its heartbeat first.",
		rec.source, rec.lease, rec.expired.UTC().Format(time.RFC3339), rec.at.UTC().Format(time.RFC3339)))
}

// recreatedCondition is PodCreated True for a delegate created again.
func recreatedCondition(pod *corev1.Pod, rec recreation) *metav1.Condition {
	return &metav1.Condition{
		Type:   v1alpha1.ConditionPodCreated,
		Status: metav1.ConditionTrue,
		Reason: ReasonDelegateRecreated,
		Message: fmt.Sprintf("Pod %s %s is held by this chaperon: it was created again after the delegate was deleted while its source (%s) was unreachable (heartbeat Lease %s expired at %s)",
			pod.Name, uidMark(pod.UID), rec.source, rec.lease, rec.expired.UTC().Format(time.RFC3339)),
	}
}

// uidMark is how a condition's message names a pod's UID.
func uidMark(uid types.UID) string { return "(uid " + string(uid) + ")" }

// heldConditionFor is the condition of a chaperon that holds pod: the
// DelegateRecreated record while it is about this very pod, else
// PodCreated.
func heldConditionFor(ch *v1alpha1.PodChaperon, pod *corev1.Pod) *metav1.Condition {
	if c := meta.FindStatusCondition(ch.Status.Conditions, v1alpha1.ConditionPodCreated); c != nil &&
		c.Status == metav1.ConditionTrue && c.Reason == ReasonDelegateRecreated && strings.Contains(c.Message, uidMark(pod.UID)) {
		return c.DeepCopy()
	}
	return heldCondition(pod)
}

// isHeartbeatLease passes the events of Leases named like a source's
// heartbeat.
func isHeartbeatLease() predicate.Predicate {
	return predicate.NewPredicateFuncs(func(obj client.Object) bool {
		return strings.HasPrefix(obj.GetName(), heartbeatLeasePrefix) && len(obj.GetName()) > len(heartbeatLeasePrefix)
	})
}

// heartbeatChanged passes Lease updates that move the expiry.
func heartbeatChanged() predicate.Predicate {
	return predicate.Funcs{
		UpdateFunc: func(e event.UpdateEvent) bool {
			o, ok1 := e.ObjectOld.(*coordinationv1.Lease)
			n, ok2 := e.ObjectNew.(*coordinationv1.Lease)
			if !ok1 || !ok2 {
				return true
			}
			return heartbeatOf(o) != heartbeatOf(n)
		},
	}
}

// chaperonsOfLease maps a source's heartbeat Lease to the chaperons of that
// source whose delegate may be created again.
func (r *PodChaperonReconciler) chaperonsOfLease(ctx context.Context, obj client.Object) []reconcile.Request {
	name := strings.TrimPrefix(obj.GetName(), heartbeatLeasePrefix)
	var list v1alpha1.PodChaperonList
	if err := r.Client.List(ctx, &list, client.MatchingFields{IndexAwaitingRecreation: name}); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Listing the chaperons awaiting recreation", "source", name)
		return nil
	}
	reqs := make([]reconcile.Request, 0, len(list.Items))
	for i := range list.Items {
		reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])})
	}
	return reqs
}
