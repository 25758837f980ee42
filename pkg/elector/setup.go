// setup: how the elector is wired: what requeues a proxy.

package elector

import (
	"context"

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
	"github.com/fleetlet/fleetlet/pkg/target"
)

// gatedProxiesOf lists the proxies still in election: a target's change
// may change where they can go.
func (r *Reconciler) gatedProxiesOf(ctx context.Context, _ target.Key) []reconcile.Request {
	return r.gatedProxies(ctx, nil)
}

func isProxy(o client.Object) bool { return proxy.IsManaged(o) }

// SetupWithManager registers the proxy reconciler; the manager's cache must
// index indexer.GatedProxy, PinnedProxy and ActivePodNodeName.
func (r *Reconciler) SetupWithManager(ctx context.Context, mgr ctrl.Manager) error {
	r.client = mgr.GetClient()
	r.recorder = mgr.GetEventRecorder("fleetlet-elector")
	return ctrl.NewControllerManagedBy(mgr).
		Named("proxy").
		For(&corev1.Pod{}, builder.WithPredicates(predicate.NewPredicateFuncs(isProxy))).
		// A chaperon or its pod changed in a target: its proxy.
		WatchesRawSource(r.registry.ChaperonSource()).
		// A target changed: the proxies still in election.
		WatchesRawSource(r.registry.TargetChangeSource(r.gatedProxiesOf)).
		// A virtual node cordoned, uncordoned or (un)tainted changes
		// where gated proxies may go.
		Watches(&corev1.Node{}, handler.EnqueueRequestsFromMapFunc(r.gatedProxies), builder.WithPredicates(virtualNodeSchedulingChanged())).
		// Its allocatable grown by a pinned proxy's requests: that proxy's
		// gate may go (see fits).
		Watches(&corev1.Node{}, handler.EnqueueRequestsFromMapFunc(r.pinnedProxies), builder.WithPredicates(virtualNodeAllocatableChanged())).
		WithOptions(r.controllerOptions()).
		Complete(r)
}

// pinnedProxies lists the proxies pinned to a node and still gated.
func (r *Reconciler) pinnedProxies(ctx context.Context, node client.Object) []reconcile.Request {
	return r.proxiesBy(ctx, client.MatchingFields{indexer.PinnedProxy.Field: node.GetName()})
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
	return r.proxiesBy(ctx, client.MatchingFields{indexer.GatedProxy.Field: "true"})
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
