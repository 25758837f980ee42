package follow

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
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

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
	"github.com/fleetlet/fleetlet/pkg/proxy"
	"github.com/fleetlet/fleetlet/pkg/target"
)

// ServiceController follows the source's Services to the targets where
// the delegates they select run (DESIGN "Services"): a Service whose
// selector selects proxies is copied (ServiceCopy) into each target whose
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
type ServiceController struct {
	Follower *Follower
	Registry *target.Registry

	client   client.Client
	recorder events.EventRecorder

	mu sync.Mutex
	// held is, per Service, whether each target holds its copy, as far as
	// this controller knows; a Service without an entry is unknown
	// everywhere.
	held map[types.NamespacedName]map[target.Key]bool
}

// serviceRetry is when a Service whose copy waits for a target that is not
// Ready is looked at again.
const serviceRetry = 10 * time.Second

// SetupWithManager registers the controller: Services, and the proxies
// whose labels, election or existence changed, as the Services that select
// them.
func (c *ServiceController) SetupWithManager(mgr ctrl.Manager) error {
	if c.Follower == nil || c.Registry == nil {
		return errors.New("follow: the Service controller needs a follower and the target registry")
	}
	c.client = mgr.GetClient()
	c.recorder = mgr.GetEventRecorder("fleetlet-follow")
	c.held = map[types.NamespacedName]map[target.Key]bool{}
	changed := predicate.Funcs{
		UpdateFunc: func(e event.UpdateEvent) bool {
			return e.ObjectOld.GetResourceVersion() != e.ObjectNew.GetResourceVersion()
		},
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named("follow-Service").
		For(&corev1.Service{}, builder.WithPredicates(changed)).
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
		WithOptions(controller.Options{MaxConcurrentReconciles: 4}).
		Complete(c)
}

// placementChanged tells whether a proxy's change may change where the
// Services selecting it need a copy: its labels, its elected target, or
// its end.
func placementChanged(old, cur client.Object) bool {
	o, ok1 := old.(*corev1.Pod)
	n, ok2 := cur.(*corev1.Pod)
	if !ok1 || !ok2 || !proxy.IsManaged(n) {
		return false
	}
	ok, ko := delegateTarget(o)
	nk, kn := delegateTarget(n)
	return !labels.Equals(o.Labels, n.Labels) || ok != nk || ko != kn
}

// delegateTarget is the target where a proxy's delegate runs or is about
// to: the one its election record names; false when none stands or the
// pod has ended.
func delegateTarget(p *corev1.Pod) (target.Key, bool) {
	if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
		return target.Key{}, false
	}
	r, ok := proxy.Elected(p)
	if !ok {
		return target.Key{}, false
	}
	return target.Key{Namespace: r.TargetNamespace, Name: r.TargetName}, true
}

// enqueueSelecting adds the Services of the pods' namespace that select
// any of them.
func (c *ServiceController) enqueueSelecting(ctx context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request], pods ...client.Object) {
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

// Reconcile brings one Service's copies to the targets that need one, and
// removes the others.
func (c *ServiceController) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	var svc *corev1.Service
	var cur corev1.Service
	switch err := c.client.Get(ctx, req.NamespacedName, &cur); {
	case apierrors.IsNotFound(err):
	case err != nil:
		return reconcile.Result{}, err
	case cur.DeletionTimestamp == nil:
		svc = &cur
	}
	need, err := c.targetsNeeding(ctx, svc)
	if err != nil {
		return reconcile.Result{}, err
	}
	unknown := c.unknown(req.NamespacedName)
	if unknown && len(need) == 0 && !c.namespaceMayHold(ctx, req.Namespace) {
		c.forget(req.NamespacedName)
		return reconcile.Result{}, nil
	}
	var errs []error
	wait := false
	for _, cl := range c.Registry.List() {
		key := cl.Key()
		if cl.Self() || (key.Namespace != "" && key.Namespace != req.Namespace) {
			continue
		}
		if !need[key] && !unknown && !c.holds(req.NamespacedName, key) {
			continue
		}
		if !cl.Health().Ready {
			// Looked at again once it is: it may hold a copy.
			c.setHeld(req.NamespacedName, key, true)
			wait = true
			continue
		}
		if err := c.converge(ctx, cl, req.NamespacedName, svc, need[key]); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", key, err))
		}
	}
	if svc == nil && len(errs) == 0 && !wait {
		c.forget(req.NamespacedName)
	}
	if err := errors.Join(errs...); err != nil {
		return reconcile.Result{}, err
	}
	if wait {
		return reconcile.Result{RequeueAfter: serviceRetry}, nil
	}
	return reconcile.Result{}, nil
}

// converge makes one target hold a Service's copy or not, and remembers
// which; a clash or a refusal of the target is said by an Event on the
// source's Service and is not retried.
func (c *ServiceController) converge(ctx context.Context, cl *target.Cluster, key types.NamespacedName, svc *corev1.Service, need bool) error {
	tk := cl.Key()
	if !need {
		if _, err := c.Follower.RemoveService(ctx, cl.Client(), tk.String(), key.Namespace, key.Name); err != nil {
			return err
		}
		c.setHeld(key, tk, false)
		return nil
	}
	err := c.Follower.EnsureService(ctx, cl.Client(), tk.String(), svc)
	var refusal *Refusal
	if errors.As(err, &refusal) {
		c.recorder.Eventf(svc, nil, corev1.EventTypeWarning, EventRefused, "Follow",
			"%s: not copied: %s; the Service there is left untouched", tk, refusal.Error())
		c.setHeld(key, tk, false)
		return nil
	}
	if err != nil {
		return err
	}
	c.setHeld(key, tk, true)
	return nil
}

// targetsNeeding are the targets where a delegate the Service selects
// runs or is about to (none for a Service that is gone or selects no pods).
func (c *ServiceController) targetsNeeding(ctx context.Context, svc *corev1.Service) (map[target.Key]bool, error) {
	need := map[target.Key]bool{}
	if svc == nil {
		return need, nil
	}
	sel := selectorOf(svc)
	if sel == nil {
		return need, nil
	}
	var pods corev1.PodList
	if err := c.client.List(ctx, &pods, client.InNamespace(svc.Namespace), client.MatchingLabelsSelector{Selector: sel}); err != nil {
		return nil, fmt.Errorf("listing the pods Service %s selects: %w", client.ObjectKeyFromObject(svc), err)
	}
	for i := range pods.Items {
		if !proxy.IsManaged(&pods.Items[i]) {
			continue
		}
		if key, ok := delegateTarget(&pods.Items[i]); ok {
			need[key] = true
		}
	}
	return need, nil
}

// namespaceMayHold tells whether copies of a namespace's Services may be
// in targets: it is enabled (or cannot be read).
func (c *ServiceController) namespaceMayHold(ctx context.Context, name string) bool {
	var ns corev1.Namespace
	if err := c.client.Get(ctx, types.NamespacedName{Name: name}, &ns); err != nil {
		return !apierrors.IsNotFound(err)
	}
	return ns.Labels[v1alpha1.LabelEnabled] == v1alpha1.LabelEnabledValue
}

func (c *ServiceController) unknown(key types.NamespacedName) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.held[key]
	return !ok
}

func (c *ServiceController) holds(key types.NamespacedName, tk target.Key) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.held[key][tk]
}

func (c *ServiceController) setHeld(key types.NamespacedName, tk target.Key, held bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.held[key] == nil {
		c.held[key] = map[target.Key]bool{}
	}
	c.held[key][tk] = held
}

func (c *ServiceController) forget(key types.NamespacedName) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.held, key)
}
