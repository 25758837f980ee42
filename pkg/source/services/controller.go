package services

import (
	"context"
	"errors"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/fleetlet/fleetlet/pkg/proxy"
	"github.com/fleetlet/fleetlet/pkg/source/fleet"
	"github.com/fleetlet/fleetlet/pkg/source/follow"
)

// Controller follows the source's Services to the targets where
// the delegates they select run (docs/design.md, "Services"): a Service whose
// selector selects proxies is copied (follow.ServiceCopy) into each target whose
// namespace holds the delegate of one of them (the target their election
// record names), kept in sync, and removed from a target once none of its
// selected delegates is left there or the Service is gone. Self targets
// get no copy: the source's Service already reaches their delegates
// through the proxies. A Service of the same name in a target that this
// source did not create is left untouched, with an Event on the source's.
//
// It runs in the source's manager; Services are read from the manager's
// cache, copies from the targets by name (uncached), only where a copy is
// needed or may be: the targets where each Service's copy was last seen
// are remembered, and every target is looked at once per Service after a
// start.
type Controller struct {
	Follower *follow.Follower
	Registry *fleet.Registry

	// RoutablePodNetworks is the operator's word that pod IPs are
	// routable between the clusters (--routable-pod-networks): only then
	// are global Services honoured.
	RoutablePodNetworks bool

	client   client.Client
	recorder events.EventRecorder
	held     heldCopies
	// refusedGlobalAt is, per Service, the version last told it cannot be
	// global (under held.mu).
	refusedGlobalAt map[types.NamespacedName]string
	// exports is the ServiceExport kind of the Multi-Cluster Services API
	// when the source serves it at start.
	exports *schema.GroupVersionKind
}

// serviceRetry is when a Service whose copy waits for a target that is not
// Ready is looked at again.
const serviceRetry = 10 * time.Second

// SetupWithManager registers the controller: Services, the proxies whose
// labels, election or existence changed, as the Services that select them,
// and the targets that came or turned Ready, as the Services they may hold.
func (c *Controller) SetupWithManager(mgr ctrl.Manager) error {
	if c.Follower == nil || c.Registry == nil {
		return errors.New("follow: the Service controller needs a follower and the target registry")
	}
	c.client = mgr.GetClient()
	c.recorder = mgr.GetEventRecorder("fleetlet-follow")
	c.held = heldCopies{byService: map[types.NamespacedName]map[proxy.TargetKey]holding{}}
	changed := predicate.Funcs{
		UpdateFunc: func(e event.UpdateEvent) bool {
			return e.ObjectOld.GetResourceVersion() != e.ObjectNew.GetResourceVersion()
		},
	}
	b := ctrl.NewControllerManagedBy(mgr).
		Named("follow-Service").
		For(&corev1.Service{}, builder.WithPredicates(changed))
	if export, ok := serviceExportKind(mgr.GetRESTMapper()); ok {
		// The MCS API is installed: a ServiceExport makes its Service
		// global as the annotation does.
		c.exports = export
		b = b.WatchesMetadata(exportMetadata(export), &handler.EnqueueRequestForObject{})
	}
	return b.
		Watches(&corev1.Pod{}, handler.Funcs{
			CreateFunc: func(ctx context.Context, e event.CreateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
				c.enqueueSelecting(ctx, q, e.Object)
			},
			UpdateFunc: func(ctx context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
				if placementChanged(e.ObjectOld, e.ObjectNew) {
					c.enqueueSelecting(ctx, q, e.ObjectOld, e.ObjectNew)
				}
			},
			DeleteFunc: func(ctx context.Context, e event.DeleteEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
				c.enqueueSelecting(ctx, q, e.Object)
			},
		}).
		WatchesRawSource(c.Registry.TargetChangeSource(c.servicesFor)).
		WithOptions(controller.Options{MaxConcurrentReconciles: 4}).
		Complete(c)
}

// placementChanged tells whether a proxy's change may change where the
// Services selecting it need a copy, or what a global one's slices list:
// its labels, its elected target, its end, its readiness or addresses.
func placementChanged(old, cur client.Object) bool {
	o, ok1 := old.(*corev1.Pod)
	n, ok2 := cur.(*corev1.Pod)
	if !ok1 || !ok2 || !proxy.IsManaged(n) {
		return false
	}
	ok, ko := delegateTarget(o)
	nk, kn := delegateTarget(n)
	return !labels.Equals(o.Labels, n.Labels) || ok != nk || ko != kn ||
		// A global Service's slices list the ready delegates by address.
		podReady(o) != podReady(n) || !equality.Semantic.DeepEqual(o.Status.PodIPs, n.Status.PodIPs) ||
		(o.DeletionTimestamp == nil) != (n.DeletionTimestamp == nil)
}

// delegateTarget is the target where a proxy's delegate runs or is about
// to: the one its election record names; false when none stands or the
// pod has ended.
func delegateTarget(p *corev1.Pod) (proxy.TargetKey, bool) {
	if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
		return proxy.TargetKey{}, false
	}
	r, ok := proxy.Elected(p)
	if !ok {
		return proxy.TargetKey{}, false
	}
	return r.Target(), true
}

// servicesFor are the Services a target that came, was reconnected or
// turned Ready may hold or need a copy of: every Service with a selector
// in its namespace (all of them for a ClusterTarget). A pass that ran while
// the target was absent (the manager's start: its controllers start while
// the registry still connects the targets) or not Ready skipped it.
func (c *Controller) servicesFor(ctx context.Context, ch fleet.Change) []reconcile.Request {
	if !ch.Health() || !ch.After.Ready {
		return nil
	}
	var services corev1.ServiceList
	opts := []client.ListOption{client.UnsafeDisableDeepCopy}
	if ch.Key.Namespace != "" {
		opts = append(opts, client.InNamespace(ch.Key.Namespace))
	}
	if err := c.client.List(ctx, &services, opts...); err != nil {
		return nil
	}
	var out []reconcile.Request
	for i := range services.Items {
		if selectorOf(&services.Items[i]) != nil {
			out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&services.Items[i])})
		}
	}
	return out
}

// enqueueSelecting adds the Services of the pods' namespace that select
// any of them.
func (c *Controller) enqueueSelecting(ctx context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request], pods ...client.Object) {
	if len(pods) == 0 || !proxy.IsManaged(pods[len(pods)-1]) {
		return
	}
	var services corev1.ServiceList
	if err := c.client.List(ctx, &services, client.InNamespace(pods[0].GetNamespace())); err != nil {
		return
	}
	for i := range services.Items {
		sel := selectorOf(&services.Items[i])
		if sel == nil {
			continue
		}
		for _, p := range pods {
			if sel.Matches(labels.Set(p.GetLabels())) {
				q.Add(reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&services.Items[i])})
				break
			}
		}
	}
}

// selectorOf is a Service's pod selector; nil when it selects no pods
// (no selector: its endpoints are managed by hand; ExternalName).
func selectorOf(svc *corev1.Service) labels.Selector {
	if len(svc.Spec.Selector) == 0 || svc.Spec.Type == corev1.ServiceTypeExternalName {
		return nil
	}
	return labels.SelectorFromSet(svc.Spec.Selector)
}
