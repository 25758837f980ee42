package feedback

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
	"github.com/fleetlet/fleetlet/pkg/indexer"
	proxypod "github.com/fleetlet/fleetlet/pkg/proxy"
	"github.com/fleetlet/fleetlet/pkg/source/fleet"
)

// Event reasons on proxy pods.
const (
	// EventDelegateDeleted: the delegate or its chaperon was deleted in
	// the target, so the proxy is deleted too (its controller makes a new
	// one; a pod never comes back from the dead).
	EventDelegateDeleted = "DelegateDeleted"
)

// Reconciler copies each bound proxy's delegate status onto the proxy, and
// deletes the proxy when its delegate is deleted in the target. It reads
// the delegate from the target registry's per-namespace caches (whose
// ChaperonSource brings the proxy back on every change of a chaperon or
// delegate), so nothing polls.
type Reconciler struct {
	// HidePodIPs says of a target that its delegates' pod IPs must not
	// be published on their proxies (status.podIP and podIPs stay empty):
	// its pod network overlaps the source's, and an address there may be
	// another pod's here, so that nothing in the source (a Service's
	// endpoints) routes to it. Never of a self target. nil hides none.
	HidePodIPs func(proxypod.TargetKey) bool

	client   client.Client
	registry *fleet.Registry
	recorder events.EventRecorder

	// started: Events from before are not mirrored.
	started time.Time
	events  eventLimiter
	// writes are the proxy versions our status writes replaced.
	writes proxypod.Writes
}

// staleCacheRecheck is when a proxy read older than our last status write
// is looked at again.
const staleCacheRecheck = 200 * time.Millisecond

// New returns the feedback reconciler of the proxies of reg's targets.
func New(reg *fleet.Registry) *Reconciler { return &Reconciler{registry: reg, started: time.Now()} }

// boundTo lists the proxies bound to a target's virtual node when its
// health changed (a target that answers again has news the caches may
// already hold, such as a delegate deleted while it was unreachable).
// Nothing else about a target concerns them: a probe that only saw its
// load move requeues none.
func (r *Reconciler) boundTo(ctx context.Context, ch fleet.Change) []reconcile.Request {
	if !ch.Health() {
		return nil
	}
	key := ch.Key
	node := proxypod.NodeName(key)
	var pods corev1.PodList
	if err := r.client.List(ctx, &pods, client.MatchingFields{indexer.ActivePodNodeName.Field: node}, client.UnsafeDisableDeepCopy); err != nil {
		return nil
	}
	out := make([]reconcile.Request, 0, len(pods.Items))
	for i := range pods.Items {
		out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: pods.Items[i].Namespace, Name: pods.Items[i].Name}})
	}
	return out
}

// workers is how many proxies the feedback reconciles at once. A pass is
// mostly one status write, whose wait on a busy source API server bounds
// it, so the writes a burst needs go as many at once as the elector's
// passes (elector.DefaultWorkers). With 16, 5,000 proxies bound over 10
// targets waited 1,341 deep on average in its queue (docs/performance.md).
const workers = 64

// concerns says whether news of a chaperon in target key concerns the
// proxy nn: only news of its elected target, once it is bound there and
// until it is deleted, does (Reconcile reads nothing else; the binding
// itself brings the proxy in). Without it, every candidate's news of a
// proxy still in election, and every loser's, was a pass: 18.6 passes a
// proxy in a 500-proxy burst over 3 targets, 2.0 with it
// (docs/performance.md). A proxy the cache cannot tell of is kept:
// Reconcile decides.
func (r *Reconciler) concerns(key proxypod.TargetKey, nn types.NamespacedName) bool {
	p, err := proxypod.Peek(r.client, nn)
	if apierrors.IsNotFound(err) {
		return false
	}
	if err != nil {
		return true
	}
	elected, _, ok := proxypod.ElectedTarget(p)
	return ok && elected == key && p.Spec.NodeName == proxypod.NodeName(key) && p.DeletionTimestamp == nil
}

// SetupWithManager registers the controller. It watches bound proxies in
// the source, and the targets' chaperons through the registry's sources.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.registry == nil {
		return errors.New("feedback: no target registry")
	}
	r.client = mgr.GetClient()
	r.recorder = mgr.GetEventRecorder("fleetlet-feedback")
	return ctrl.NewControllerManagedBy(mgr).
		Named("feedback").
		Watches(&corev1.Pod{}, boundProxyEvents(), builder.WithPredicates(boundProxy())).
		WatchesRawSource(r.registry.ChaperonSource(r.concerns)).
		WatchesRawSource(r.registry.TargetChangeSource(r.boundTo)).
		WithOptions(controller.Options{MaxConcurrentReconciles: workers}).
		Complete(r)
}

// boundProxyEvents enqueues a bound proxy's changes (those boundProxy
// passes) at fleet.ProgressPriority, as the targets' news: a bound proxy
// is an election under way whose status is still to be copied back; the
// first list and resyncs at low priority (controller-runtime's rule for
// every handler).
func boundProxyEvents() handler.EventHandler {
	enqueue := func(q workqueue.TypedRateLimitingInterface[reconcile.Request], obj client.Object, low bool) {
		req := reconcile.Request{NamespacedName: client.ObjectKeyFromObject(obj)}
		if low {
			q.Add(req) // at the low priority the handler gives it
			return
		}
		fleet.AddAt(q, fleet.ProgressPriority, req)
	}
	return handler.Funcs{
		CreateFunc: func(_ context.Context, e event.CreateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			enqueue(q, e.Object, e.IsInInitialList)
		},
		UpdateFunc: func(_ context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			enqueue(q, e.ObjectNew, e.ObjectOld.GetResourceVersion() == e.ObjectNew.GetResourceVersion())
		},
		DeleteFunc: func(_ context.Context, e event.DeleteEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			enqueue(q, e.Object, false)
		},
	}
}

// boundProxy passes proxy pods bound to a node, except status writes of
// our own that change nothing else we read.
func boundProxy() predicate.Predicate {
	ok := func(o client.Object) bool {
		p, isPod := o.(*corev1.Pod)
		return isPod && p.Spec.NodeName != "" && proxypod.IsManaged(p)
	}
	return predicate.Funcs{
		CreateFunc:  func(e event.CreateEvent) bool { return ok(e.Object) },
		DeleteFunc:  func(event.DeleteEvent) bool { return false },
		GenericFunc: func(e event.GenericEvent) bool { return ok(e.Object) },
		UpdateFunc: func(e event.UpdateEvent) bool {
			o, n := e.ObjectOld.(*corev1.Pod), e.ObjectNew.(*corev1.Pod)
			// Another writer's Ready (the node lifecycle controller
			// marks a NotReady node's pods) is put back in line too.
			// A spec change is acted on (status.observedGeneration)
			// even when it passes nothing to the delegate.
			return ok(n) && (o.Spec.NodeName != n.Spec.NodeName || o.DeletionTimestamp.IsZero() != n.DeletionTimestamp.IsZero() ||
				o.Generation != n.Generation || readyStatus(o) != readyStatus(n))
		},
	}
}

func readyStatus(p *corev1.Pod) corev1.ConditionStatus {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status
		}
	}
	return ""
}

// Reconcile brings one proxy's status in line with its delegate.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	var proxy corev1.Pod
	if err := r.client.Get(ctx, req.NamespacedName, &proxy); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if !proxypod.IsManaged(&proxy) || proxy.Spec.NodeName == "" || proxy.DeletionTimestamp != nil {
		return reconcile.Result{}, nil
	}
	if r.writes.Stale(proxy.UID, proxy.ResourceVersion) {
		// The cache has not seen our last status write yet (whose event
		// the predicate drops): writing from it would conflict.
		return reconcile.Result{RequeueAfter: staleCacheRecheck}, nil
	}
	key, name, ok := proxypod.ElectedTarget(&proxy)
	if !ok || proxy.Spec.NodeName != proxypod.NodeName(key) {
		return reconcile.Result{}, nil
	}
	cl, ok := r.registry.Get(key)
	if !ok {
		// The target was deleted: its virtual node goes, and the pod
		// garbage collector deletes the pods bound to it.
		return reconcile.Result{}, nil
	}
	cl.WatchChaperons(proxy.Namespace)
	if !cl.Health().Ready {
		// Nothing can be confirmed: the virtual node is NotReady and
		// Kubernetes' own eviction takes it from here. The registry's
		// TargetChangeSource brings the proxy back when the target
		// answers again.
		return reconcile.Result{}, nil
	}

	d, err := r.delegate(ctx, cl, &proxy, name)
	if err != nil {
		return reconcile.Result{}, err
	}
	if d.status != nil {
		if err := r.writeStatus(ctx, &proxy, d, r.HidePodIPs != nil && !cl.Self() && r.HidePodIPs(key)); err != nil {
			if apierrors.IsConflict(err) {
				return reconcile.Result{RequeueAfter: 50 * time.Millisecond}, nil
			}
			return reconcile.Result{}, client.IgnoreNotFound(err)
		}
	}
	if d.status != nil && d.gone == "" {
		if err := r.noteDevices(ctx, cl, &proxy, d.claims); err != nil {
			return reconcile.Result{}, err
		}
	}
	if d.gone == "" || terminal(proxy.Status.Phase) || (d.status != nil && terminal(d.status.Phase)) {
		return reconcile.Result{}, nil
	}
	// The delegate is gone or going, and not because it finished: the
	// proxy goes too, so that its controller makes a new one. Deleting
	// the proxy deletes the chaperon (foreground) and then the finalizer.
	r.recorder.Eventf(&proxy, nil, corev1.EventTypeWarning, EventDelegateDeleted, "Delete", "%s in %s; deleting the proxy", d.gone, key)
	updatesTotal.WithLabelValues("deleted").Inc()
	err = r.client.Delete(ctx, &proxy, client.Preconditions{UID: ptr.To(proxy.UID)})
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return reconcile.Result{}, nil
	}
	return reconcile.Result{}, err
}

// delegateState is what the target says of a proxy's delegate: its status
// (nil when unknown), and, when it is deleted or being deleted, why.
type delegateState struct {
	status *corev1.PodStatus
	gone   string
	// actedOn is the proxy's generation the delegate has acted on (0:
	// not all of it yet).
	actedOn int64
	// claims are the delegate's resource claims by their names in the
	// target (resourceClaimsOf).
	claims []corev1.PodResourceClaimStatus
}

// delegate reads the elected chaperon and its pod. A chaperon the cache
// does not have is looked up in the API server before it counts as gone.
func (r *Reconciler) delegate(ctx context.Context, cl *fleet.Cluster, proxy *corev1.Pod, name string) (delegateState, error) {
	key := types.NamespacedName{Namespace: proxy.Namespace, Name: name}
	var pc v1alpha1.PodChaperon
	err := cl.Chaperons(proxy.Namespace).Get(ctx, key, &pc)
	if apierrors.IsNotFound(err) {
		err = cl.Client().Get(ctx, key, &pc)
	}
	if apierrors.IsNotFound(err) {
		return delegateState{gone: fmt.Sprintf("PodChaperon %s was deleted", key)}, nil
	}
	if apierrors.IsForbidden(err) {
		// A namespace deleted in the target takes the source's
		// RoleBinding there with it, often before the delegate: from
		// then on every read inside is Forbidden, never NotFound. The
		// namespace itself says whether the delegate is going.
		switch cl.Namespace(ctx, proxy.Namespace) {
		case fleet.NamespaceTerminating, fleet.NamespaceGone:
			return delegateState{gone: fmt.Sprintf("namespace %s is deleted there", proxy.Namespace)}, nil
		}
	}
	if err != nil {
		return delegateState{}, fmt.Errorf("reading the delegate's chaperon %s in %s: %w", key, cl.Key(), err)
	}
	if pc.Labels[v1alpha1.LabelParentUID] != string(proxy.UID) {
		return delegateState{gone: fmt.Sprintf("PodChaperon %s belongs to another pod", key)}, nil
	}
	st := delegateState{status: &pc.Status.PodStatus}
	var pod corev1.Pod
	if err := cl.Chaperons(proxy.Namespace).Get(ctx, key, &pod); err == nil && metav1.IsControlledBy(&pod, &pc) {
		// The pod itself is fresher than the chaperon's mirror.
		st.status = &pod.Status
		st.actedOn = actedOn(proxy, &pc, &pod, cl.Self())
		if pod.DeletionTimestamp != nil {
			st.gone = fmt.Sprintf("the delegate %s is being deleted", key)
		}
	}
	switch {
	case pc.DeletionTimestamp != nil:
		st.gone = fmt.Sprintf("PodChaperon %s is being deleted", key)
	case deletedRecord(&pc):
		st.gone = fmt.Sprintf("the delegate %s was deleted", key)
	}
	if st.status.Phase == "" && len(st.status.Conditions) == 0 {
		st.status = nil // nothing mirrored yet
	} else {
		st.claims = resourceClaimsOf(&pc.Spec.Template.Spec, st.status)
	}
	return st, nil
}

// deletedRecord reports whether the chaperon records that its pod was
// deleted.
func deletedRecord(pc *v1alpha1.PodChaperon) bool {
	c := meta.FindStatusCondition(pc.Status.Conditions, v1alpha1.ConditionPodCreated)
	return c != nil && c.Status == metav1.ConditionFalse && c.Reason == v1alpha1.ReasonPodDeleted
}

// writeStatus writes the translated status, with the generation the
// delegate has acted on, through the status subresource, with the proxy's
// resourceVersion as precondition, when it changes anything; without the
// delegate's pod IPs when hideIPs.
func (r *Reconciler) writeStatus(ctx context.Context, proxy *corev1.Pod, d delegateState, hideIPs bool) error {
	want := Translate(proxy, d.status, r.hostIP(ctx, proxy.Spec.NodeName))
	if !terminal(proxy.Status.Phase) {
		setObservedGeneration(&want, d.status.Conditions, d.actedOn)
	}
	if hideIPs {
		want.PodIP, want.PodIPs = "", nil
	}
	if statusEqual(&proxy.Status, &want) {
		return nil
	}
	p := proxy.DeepCopy()
	p.Status = want
	if err := r.client.Status().Update(ctx, p); err != nil {
		updatesTotal.WithLabelValues("error").Inc()
		return err
	}
	updatesTotal.WithLabelValues("updated").Inc()
	r.writes.Wrote(proxy.UID, proxy.ResourceVersion)
	*proxy = *p
	return nil
}

// hostIP is the virtual node's InternalIP.
func (r *Reconciler) hostIP(ctx context.Context, nodeName string) string {
	var node corev1.Node
	if err := r.client.Get(ctx, types.NamespacedName{Name: nodeName}, &node); err != nil {
		return ""
	}
	for _, a := range node.Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			return a.Address
		}
	}
	return ""
}
