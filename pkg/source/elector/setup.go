// setup: how the elector is wired: what requeues a proxy.

package elector

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
	"github.com/fleetlet/fleetlet/pkg/indexer"
	"github.com/fleetlet/fleetlet/pkg/proxy"
	"github.com/fleetlet/fleetlet/pkg/source/fleet"
)

// proxiesAffectedBy lists the proxies still in election that a target's
// change may concern: all of them when it changes where they may go
// (health, a drain, a stale summary); only those no cluster could take
// when it only has more room; none when a probe only saw pods come and
// go. Their own candidates' events bring the others back. More room that
// fits a proxy lets the target back into its trimmed round (untrim).
func (r *Reconciler) proxiesAffectedBy(ctx context.Context, ch fleet.Change) []reconcile.Request {
	if !ch.Eligibility() && !ch.RoomGrew() {
		return nil
	}
	var pods corev1.PodList
	if err := r.client.List(ctx, &pods, client.MatchingFields{indexer.GatedProxy.Field: "true"}, client.UnsafeDisableDeepCopy); err != nil {
		return nil
	}
	var out []reconcile.Request
	for i := range pods.Items {
		p := &pods.Items[i]
		if !affected(ch, p) {
			continue
		}
		out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(p)})
		if !ch.Eligibility() {
			r.untrimIfRoom(ch.Key, p)
		}
	}
	if ch.Eligibility() {
		return requeued(requeueTargetEligible, out)
	}
	return requeued(requeueTargetRoom, out)
}

// untrimIfRoom lets a target whose room grew back into the proxy's trimmed
// round when the room fits the proxy, so that it spills over at once, not
// when the round ends. Only a proxy kept out of that target pays for
// reading its requests.
func (r *Reconciler) untrimIfRoom(key proxy.TargetKey, p *corev1.Pod) {
	if _, _, out := r.keptOut(p.UID, key); !out {
		return
	}
	cl, ok := r.registry.Get(key)
	if ok && roomFor(cl.Summary(), proxy.PodRequests(p)) {
		r.untrim(p.UID, key)
	}
}

// affected tells whether a gated proxy may go elsewhere after a target's
// change: any change of eligibility concerns every one; more room, only
// one that no cluster could take at its last try.
func affected(ch fleet.Change, p *corev1.Pod) bool {
	if ch.Eligibility() {
		return true
	}
	c := proxy.ElectedCondition(p)
	return ch.RoomGrew() && c != nil && c.Status == corev1.ConditionFalse && c.Reason == reasonNoClusters
}

func isProxy(o client.Object) bool { return proxy.IsManaged(o) }

// SetupWithManager registers the proxy reconciler; the manager's cache must
// index indexer.GatedProxy and HeadedProxy.
func (r *Reconciler) SetupWithManager(ctx context.Context, mgr ctrl.Manager) error {
	r.client = mgr.GetClient()
	r.recorder = mgr.GetEventRecorder("fleetlet-elector")
	pods, err := mgr.GetCache().GetInformer(ctx, &corev1.Pod{})
	if err != nil {
		return fmt.Errorf("elector: the pod informer: %w", err)
	}
	if err := r.usage.Watch(pods, keyed(takesRoom), nil); err != nil {
		return fmt.Errorf("elector: counting the pods on each node: %w", err)
	}
	if err := r.inflightSums.Watch(pods, keyed(electedTo), nil); err != nil {
		return fmt.Errorf("elector: counting the elections in flight to each target: %w", err)
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named("proxy").
		For(&corev1.Pod{}, builder.WithPredicates(predicate.NewPredicateFuncs(isProxy))).
		// A chaperon or its pod changed in a target: its proxy, unless
		// the cache is behind our last write of it (newsWanted).
		WatchesRawSource(r.registry.ChaperonSource(r.newsWanted)).
		// A target changed: the proxies still in election it concerns.
		WatchesRawSource(r.registry.TargetChangeSource(r.proxiesAffectedBy)).
		// A finished election: the proxies it made room for.
		WatchesRawSource(r.admission.source()).
		// A virtual node cordoned, uncordoned or (un)tainted changes
		// where gated proxies may go.
		Watches(&corev1.Node{}, handler.EnqueueRequestsFromMapFunc(r.gatedProxies), builder.WithPredicates(virtualNodeSchedulingChanged())).
		// Its allocatable grown by an elected proxy's requests: the
		// proxies waiting for room there may go (see fits).
		Watches(&corev1.Node{}, handler.EnqueueRequestsFromMapFunc(r.headedProxies), builder.WithPredicates(virtualNodeAllocatableChanged())).
		WithOptions(r.controllerOptions()).
		Complete(r)
}

// headedProxies lists the proxies still gated that are pinned or elected
// to a node whose allocatable changed, whose last pass found no room there
// (awaitingRoom), and that fit there now: the others wait for more room
// (their own timer looks again), so that an elected proxy raising the
// node's allocatable brings back the few it makes room for, not every
// proxy headed there. A proxy elected there whose delegate is not admitted
// yet waits for that, not for room: its chaperon's events bring it back.
// Before every pod there is counted, all that wait for room.
func (r *Reconciler) headedProxies(ctx context.Context, obj client.Object) []reconcile.Request {
	var pods corev1.PodList
	if err := r.client.List(ctx, &pods, client.MatchingFields{indexer.HeadedProxy.Field: obj.GetName()}); err != nil {
		return nil
	}
	node, isNode := obj.(*corev1.Node)
	used, active, counted := sumOf(r.usage, obj.GetName())
	out := make([]reconcile.Request, 0, len(pods.Items))
	for i := range pods.Items {
		p := &pods.Items[i]
		if !r.isAwaitingRoom(p.UID) {
			continue
		}
		if isNode && counted && !fitsNode(node.Status.Allocatable, used, active, proxy.PodRequests(p)) {
			continue
		}
		out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: p.Namespace, Name: p.Name}})
	}
	return requeued(requeueNodeAllocatable, out)
}

// proxiesBy lists pods from the cache by an index, as requests.
func (r *Reconciler) proxiesBy(ctx context.Context, fields client.MatchingFields) []reconcile.Request {
	var pods corev1.PodList
	if err := r.client.List(ctx, &pods, fields); err != nil {
		return nil
	}
	out := make([]reconcile.Request, 0, len(pods.Items))
	for _, p := range pods.Items {
		out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: p.Namespace, Name: p.Name}})
	}
	return out
}

// virtualNodeAllocatableChanged passes virtual nodes whose allocatable
// changed.
func virtualNodeAllocatableChanged() predicate.Predicate {
	return predicate.Funcs{
		CreateFunc:  func(event.CreateEvent) bool { return false },
		DeleteFunc:  func(event.DeleteEvent) bool { return false },
		GenericFunc: func(event.GenericEvent) bool { return false },
		UpdateFunc: func(e event.UpdateEvent) bool {
			o, ok1 := e.ObjectOld.(*corev1.Node)
			n, ok2 := e.ObjectNew.(*corev1.Node)
			if !ok1 || !ok2 {
				return false
			}
			if _, virtual := n.Labels[v1alpha1.LabelCluster]; !virtual {
				return false
			}
			return !equality.Semantic.DeepEqual(o.Status.Allocatable, n.Status.Allocatable)
		},
	}
}

// gatedProxies lists the proxies still in election.
func (r *Reconciler) gatedProxies(ctx context.Context, _ client.Object) []reconcile.Request {
	return requeued(requeueNodeScheduling, r.proxiesBy(ctx, client.MatchingFields{indexer.GatedProxy.Field: "true"}))
}

// virtualNodeSchedulingChanged passes virtual nodes whose schedulability
// changed: cordoned or uncordoned, taints added or removed.
func virtualNodeSchedulingChanged() predicate.Predicate {
	virtual := func(o client.Object) bool { _, ok := o.GetLabels()[v1alpha1.LabelCluster]; return ok }
	return predicate.Funcs{
		CreateFunc:  func(e event.CreateEvent) bool { return virtual(e.Object) },
		DeleteFunc:  func(event.DeleteEvent) bool { return false },
		GenericFunc: func(event.GenericEvent) bool { return false },
		UpdateFunc: func(e event.UpdateEvent) bool {
			o, ok1 := e.ObjectOld.(*corev1.Node)
			n, ok2 := e.ObjectNew.(*corev1.Node)
			return ok1 && ok2 && virtual(n) &&
				(o.Spec.Unschedulable != n.Spec.Unschedulable || !equality.Semantic.DeepEqual(o.Spec.Taints, n.Spec.Taints))
		},
	}
}
