// setup: how the elector is wired: its indexes, what requeues a proxy.

package elector

import (
	"context"
	"errors"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
	"github.com/fleetlet/fleetlet/pkg/proxy"
	"github.com/fleetlet/fleetlet/pkg/target"
)

// SetRegistry gives the elector the live targets.
func (r *Reconciler) SetRegistry(reg *target.Registry) { r.registry = reg }

// OnChaperon requeues the proxy of a chaperon that changed in a target.
func (r *Reconciler) OnChaperon(_ target.Key, pc *v1alpha1.PodChaperon) {
	ns, name := pc.Annotations[v1alpha1.AnnotationParentNamespace], pc.Annotations[v1alpha1.AnnotationParentName]
	if ns == "" || name == "" {
		return
	}
	r.enqueue(ns, name)
}

// OnTargetChange requeues every proxy still in election: eligibility
// changed.
func (r *Reconciler) OnTargetChange(target.Key) {
	if r.client == nil {
		return
	}
	go func() {
		var pods corev1.PodList
		if err := r.client.List(context.Background(), &pods, client.MatchingFields{IndexGated: "true"}); err != nil {
			return
		}
		for _, p := range pods.Items {
			r.enqueue(p.Namespace, p.Name)
		}
	}()
}

func (r *Reconciler) enqueue(ns, name string) {
	r.queueMu.Lock()
	q := r.queue
	r.queueMu.Unlock()
	if q != nil {
		q.Add(reconcile.Request{NamespacedName: types.NamespacedName{Namespace: ns, Name: name}})
	}
}

// IndexGated indexes pods that still carry fleetlet's scheduling gate.
const IndexGated = "elector.gated"

// IndexPinned indexes gated pods by the node they are pinned to.
const IndexPinned = "elector.pinned"

func isProxy(o client.Object) bool { return proxy.IsManaged(o) }

// SetupWithManager registers the proxy reconciler.
func (r *Reconciler) SetupWithManager(ctx context.Context, mgr ctrl.Manager) error {
	if r.registry == nil {
		return errors.New("elector: no target registry")
	}
	r.client = mgr.GetClient()
	r.recorder = mgr.GetEventRecorder("fleetlet-elector")
	if err := mgr.GetFieldIndexer().IndexField(ctx, &corev1.Pod{}, IndexGated, func(o client.Object) []string {
		p := o.(*corev1.Pod)
		if proxy.GateIndex(p) >= 0 {
			return []string{"true"}
		}
		return nil
	}); err != nil {
		return err
	}
	if err := mgr.GetFieldIndexer().IndexField(ctx, &corev1.Pod{}, IndexPinned, func(o client.Object) []string {
		p := o.(*corev1.Pod)
		if node := p.Spec.NodeSelector[corev1.LabelHostname]; node != "" && proxy.GateIndex(p) >= 0 {
			return []string{node}
		}
		return nil
	}); err != nil {
		return err
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named("proxy").
		For(&corev1.Pod{}, builder.WithPredicates(predicate.NewPredicateFuncs(isProxy))).
		WatchesRawSource(source.Func(func(_ context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
			r.queueMu.Lock()
			r.queue = q
			r.queueMu.Unlock()
			return nil
		})).
		// A virtual node cordoned, uncordoned or (un)tainted changes
		// where gated proxies may go.
		Watches(&corev1.Node{}, handler.EnqueueRequestsFromMapFunc(r.gatedProxies), builder.WithPredicates(virtualNodeSchedulingChanged())).
		// Its allocatable grown by a pinned proxy's requests: that proxy's
		// gate may go (see fits).
		Watches(&corev1.Node{}, handler.EnqueueRequestsFromMapFunc(r.pinnedProxies), builder.WithPredicates(virtualNodeAllocatableChanged())).
		WithOptions(controllerOptions()).
		Complete(r)
}

// pinnedProxies lists the proxies pinned to a node and still gated.
func (r *Reconciler) pinnedProxies(ctx context.Context, node client.Object) []reconcile.Request {
	var pods corev1.PodList
	if err := r.client.List(ctx, &pods, client.MatchingFields{IndexPinned: node.GetName()}); err != nil {
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
	var pods corev1.PodList
	if err := r.client.List(ctx, &pods, client.MatchingFields{IndexGated: "true"}); err != nil {
		return nil
	}
	out := make([]reconcile.Request, 0, len(pods.Items))
	for _, p := range pods.Items {
		out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: p.Namespace, Name: p.Name}})
	}
	return out
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
