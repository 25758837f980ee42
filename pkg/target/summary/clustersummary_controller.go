package summary

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
	"github.com/fleetlet/fleetlet/pkg/indexer"
	"github.com/fleetlet/fleetlet/pkg/podsums"
)

const (
	// ControllerName names the ClusterSummary controller (logs, metrics).
	ControllerName = "clustersummary"

	// FieldOwner is the field manager of every write of this package.
	FieldOwner = "fleetlet"

	// ReasonSummarized is the reason of the ClusterSummary's Ready
	// condition: the summary reflects the nodes and pods as last seen.
	ReasonSummarized = "Summarized"
)

// ClusterSummaryReconciler keeps the ClusterSummary named default equal to
// the summary of the cluster's schedulable real nodes and the pods bound to
// them. See the package documentation.
type ClusterSummaryReconciler struct {
	// Client reads nodes, pods and the ClusterSummary from the manager's
	// cache (it needs indexer.ActivePodNodeName) and writes the
	// ClusterSummary.
	Client client.Client
	// APIReader reads the kube-system Namespace once, uncached, for the
	// cluster's identity. Nil means Client.
	APIReader client.Reader
	// Heartbeat is how often observedTime is renewed when nothing else
	// changes; zero means DefaultHeartbeat.
	Heartbeat time.Duration
	// Clock is for tests; nil means the real clock.
	Clock clock.PassiveClock
	// SchedulerLease is the candidate scheduler's leader election Lease,
	// read (live, through APIReader) for the CandidateSchedulerRunning
	// condition; an empty Name means the scheduler runs without leader
	// election, and the summary carries no such condition.
	SchedulerLease types.NamespacedName

	scheduler *schedulerCheck
	// totals are what the active pods request on each node, kept by the
	// pod informer's events (totals.go); nil reads the pods instead.
	totals *podsums.Sums[nodeSource]

	idMu      sync.Mutex
	clusterID string
	// devices: the cluster serves resource.k8s.io/v1, whose devices are
	// counted (found at setup).
	devices bool
}

// DefaultHeartbeat is how often the ClusterSummary's observedTime is renewed.
const DefaultHeartbeat = 30 * time.Second

// +kubebuilder:rbac:groups="",resources=nodes;pods,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get
// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=get
// +kubebuilder:rbac:groups=multicluster.fleetlet.io,resources=clustersummaries,verbs=get;list;watch;create
// +kubebuilder:rbac:groups=multicluster.fleetlet.io,resources=clustersummaries/status,verbs=get;patch
// +kubebuilder:rbac:groups=resource.k8s.io,resources=deviceclasses;resourceslices;resourceclaims,verbs=get;list;watch

// SetupWithManager registers the controller with mgr, whose cache must
// index indexer.ActivePodNodeName (the manager registers it).
func (r *ClusterSummaryReconciler) SetupWithManager(ctx context.Context, mgr ctrl.Manager) error {
	if r.Client == nil {
		return errors.New("ClusterSummaryReconciler: Client is nil")
	}
	request := reconcile.Request{NamespacedName: client.ObjectKey{Name: v1alpha1.ClusterSummaryName}}
	toDefault := handler.EnqueueRequestsFromMapFunc(func(context.Context, client.Object) []reconcile.Request {
		return []reconcile.Request{request}
	})
	// One request at start, for a cluster with neither nodes nor a
	// ClusterSummary yet, where no event would ever come.
	atStart := source.Func(func(_ context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
		q.Add(request)
		return nil
	})
	if r.SchedulerLease.Name != "" {
		r.scheduler = &schedulerCheck{lease: r.SchedulerLease, reader: r.apiReader(), clock: clock.RealClock{}}
		if r.Clock != nil {
			r.scheduler.clock = r.Clock
		}
	}
	pods, err := mgr.GetCache().GetInformer(ctx, &corev1.Pod{})
	if err != nil {
		return fmt.Errorf("ClusterSummaryReconciler: the pod informer: %w", err)
	}
	// A change of the totals, not the pod event itself, asks for a
	// recompute: the controller's own handler of the event could run
	// before the totals' handler has counted it.
	var queue atomic.Pointer[workqueue.TypedRateLimitingInterface[reconcile.Request]]
	totalsChanged := source.Func(func(_ context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
		queue.Store(&q)
		q.Add(request)
		return nil
	})
	r.totals = podsums.New[nodeSource]()
	err = r.totals.Watch(pods, countActive, func() {
		if q := queue.Load(); q != nil {
			(*q).Add(request)
		}
	})
	if err != nil {
		return fmt.Errorf("ClusterSummaryReconciler: counting the pods on each node: %w", err)
	}
	b := ctrl.NewControllerManagedBy(mgr).
		Named(ControllerName).
		For(&v1alpha1.ClusterSummary{}, builder.WithPredicates(predicate.NewPredicateFuncs(func(o client.Object) bool {
			return o.GetName() == v1alpha1.ClusterSummaryName
		}))).
		Watches(&corev1.Node{}, toDefault, builder.WithPredicates(nodePredicate())).
		WatchesRawSource(totalsChanged).
		WatchesRawSource(atStart)
	if _, err := mgr.GetRESTMapper().RESTMapping(resourcev1.SchemeGroupVersion.WithKind("DeviceClass").GroupKind(), resourcev1.SchemeGroupVersion.Version); err == nil {
		r.devices = true
		b = b.Watches(&resourcev1.DeviceClass{}, toDefault).
			Watches(&resourcev1.ResourceSlice{}, toDefault).
			Watches(&resourcev1.ResourceClaim{}, toDefault, builder.WithPredicates(claimPredicate()))
	} else {
		ctrl.LoggerFrom(ctx).Info("The cluster does not serve resource.k8s.io/v1: its devices are not counted", "err", err.Error())
	}
	return b.Complete(r)
}

// Reconcile recomputes the summary from the cache and writes it when it
// differs from the ClusterSummary's status, creating the ClusterSummary when
// it is missing. observedTime is renewed every heartbeat even when nothing
// else changed, so that a source can tell a live summary from a stale one.
func (r *ClusterSummaryReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	if req.Name != v1alpha1.ClusterSummaryName || req.Namespace != "" {
		return ctrl.Result{}, nil
	}
	log := ctrl.LoggerFrom(ctx)

	cs := &v1alpha1.ClusterSummary{}
	err := r.Client.Get(ctx, req.NamespacedName, cs)
	switch {
	case apierrors.IsNotFound(err):
		cs = &v1alpha1.ClusterSummary{ObjectMeta: metav1.ObjectMeta{Name: v1alpha1.ClusterSummaryName}}
		log.Info("Creating the ClusterSummary", "clusterSummary", klog.KObj(cs))
		if err := r.Client.Create(ctx, cs, client.FieldOwner(FieldOwner)); err != nil {
			// AlreadyExists included: the cache is behind, the next
			// attempt reads what is there.
			return ctrl.Result{}, fmt.Errorf("creating ClusterSummary %s: %w", cs.Name, err)
		}
	case err != nil:
		return ctrl.Result{}, fmt.Errorf("getting ClusterSummary %s: %w", req.Name, err)
	}

	summary, err := r.summarize(ctx)
	if err != nil {
		return ctrl.Result{}, err
	}
	summary.ClusterID = r.identity(ctx)
	var next time.Duration
	summary.ObservedTime, next = renewal(cs.Status.ObservedTime, r.now(), r.heartbeat())
	summary.Conditions = []metav1.Condition{{
		Type:    v1alpha1.ConditionReady,
		Status:  metav1.ConditionTrue,
		Reason:  ReasonSummarized,
		Message: readyMessage(summary),
	}}
	if r.scheduler != nil {
		cond, recheck := r.scheduler.condition(ctx)
		summary.Conditions = append(summary.Conditions, cond)
		next = min(next, recheck)
	}
	for i := range summary.Conditions {
		summary.Conditions[i].ObservedGeneration = cs.Generation
		// Used only if the status changes; to the second, as stored, so
		// that what is written compares equal to what is read back.
		summary.Conditions[i].LastTransitionTime = metav1.Now().Rfc3339Copy()
	}
	want := cs.Status.DeepCopy()
	setOwned(want, summary)
	if equality.Semantic.DeepEqual(cs.Status, *want) {
		return ctrl.Result{RequeueAfter: next}, nil
	}
	// Apply with the conditions as they stand after setOwned, which keeps
	// their lastTransitionTime while their status holds.
	summary.Conditions = ownedConditions(want.Conditions)
	log.V(1).Info("Updating the ClusterSummary", "clusterSummary", klog.KObj(cs),
		"nodes", summary.NodeCount, "pods", summary.Requested.Pods().String())
	if err := r.writeStatus(ctx, summary); err != nil {
		return ctrl.Result{}, fmt.Errorf("updating the status of ClusterSummary %s: %w", cs.Name, err)
	}
	return ctrl.Result{RequeueAfter: next}, nil
}

// renewal returns the observedTime to write at now — the last one while it
// is younger than the heartbeat, now otherwise (to the second, as stored) —
// and when to look again.
func renewal(last *metav1.Time, now time.Time, heartbeat time.Duration) (*metav1.Time, time.Duration) {
	if last != nil {
		if age := now.Sub(last.Time); age >= 0 && age < heartbeat {
			return last, heartbeat - age
		}
	}
	t := metav1.NewTime(now).Rfc3339Copy()
	return &t, heartbeat
}

// identity returns the cluster's identity, the UID of its kube-system
// Namespace, read once. A failed read is logged and tried again at the next
// pass; the summary is written without it meanwhile.
func (r *ClusterSummaryReconciler) identity(ctx context.Context) string {
	r.idMu.Lock()
	defer r.idMu.Unlock()
	if r.clusterID != "" {
		return r.clusterID
	}
	ns := &corev1.Namespace{}
	if err := r.apiReader().Get(ctx, client.ObjectKey{Name: metav1.NamespaceSystem}, ns); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Cannot read the cluster's identity (the kube-system Namespace's UID)")
		return ""
	}
	r.clusterID = string(ns.UID)
	return r.clusterID
}

// apiReader reads past the cache.
func (r *ClusterSummaryReconciler) apiReader() client.Reader {
	if r.APIReader != nil {
		return r.APIReader
	}
	return r.Client
}

func (r *ClusterSummaryReconciler) heartbeat() time.Duration {
	if r.Heartbeat > 0 {
		return r.Heartbeat
	}
	return DefaultHeartbeat
}

func (r *ClusterSummaryReconciler) now() time.Time {
	if r.Clock != nil {
		return r.Clock.Now()
	}
	return time.Now()
}

// conditionTypes are the condition types this controller owns.
var conditionTypes = []string{v1alpha1.ConditionReady, v1alpha1.ConditionCandidateScheduler}

// ownedConditions are the conditions of conds this controller owns.
func ownedConditions(conds []metav1.Condition) []metav1.Condition {
	var out []metav1.Condition
	for _, t := range conditionTypes {
		if c := meta.FindStatusCondition(conds, t); c != nil {
			out = append(out, *c)
		}
	}
	return out
}

// setOwned sets in status every field this controller owns to its value in
// owned: all of them but the conditions of others (of which there are none
// today). An owned condition type owned does not carry is removed.
func setOwned(status *v1alpha1.ClusterSummaryStatus, owned v1alpha1.ClusterSummaryStatus) {
	status.NodeCount = owned.NodeCount
	status.Capacity = owned.Capacity
	status.Allocatable = owned.Allocatable
	status.Requested = owned.Requested
	status.LargestFree = owned.LargestFree
	status.RequestedBySource = owned.RequestedBySource
	status.Labels = owned.Labels
	status.ClusterID = owned.ClusterID
	status.ObservedTime = owned.ObservedTime
	status.DevicesCounted = owned.DevicesCounted
	status.DeviceClasses = owned.DeviceClasses
	for _, t := range conditionTypes {
		if c := meta.FindStatusCondition(owned.Conditions, t); c != nil {
			meta.SetStatusCondition(&status.Conditions, *c)
		} else {
			meta.RemoveStatusCondition(&status.Conditions, t)
		}
	}
}

// summarize lists, from the cache and without copying, the nodes and the
// active pods of the schedulable ones, and sums them up.
func (r *ClusterSummaryReconciler) summarize(ctx context.Context) (v1alpha1.ClusterSummaryStatus, error) {
	nodeList := &corev1.NodeList{}
	if err := r.Client.List(ctx, nodeList, client.UnsafeDisableDeepCopy); err != nil {
		return v1alpha1.ClusterSummaryStatus{}, fmt.Errorf("listing nodes: %w", err)
	}
	nodes := make([]*corev1.Node, 0, len(nodeList.Items))
	for i := range nodeList.Items {
		if node := &nodeList.Items[i]; IsSchedulableNode(node) {
			nodes = append(nodes, node)
		}
	}
	totals, err := r.totalsOf(ctx, nodes)
	if err != nil {
		return v1alpha1.ClusterSummaryStatus{}, err
	}
	sum := summarizeTotals(nodes, totals)
	if r.devices {
		classes, err := r.summarizeDevices(ctx, nodes)
		if err != nil {
			return sum, err
		}
		sum.DevicesCounted, sum.DeviceClasses = true, classes
	}
	return sum, nil
}

// totalsOf is what the active pods request on each of nodes: the totals
// the pod informer's events keep, or, until they counted every pod (or
// without them), a read of each node's pods from the cache.
func (r *ClusterSummaryReconciler) totalsOf(ctx context.Context, nodes []*corev1.Node) (nodeTotals, error) {
	if r.totals != nil {
		if totals, ok := totalsFor(r.totals, nodes); ok {
			return totals, nil
		}
	}
	var pods []*corev1.Pod
	for _, node := range nodes {
		podList := &corev1.PodList{}
		if err := r.Client.List(ctx, podList, client.MatchingFields{indexer.ActivePodNodeName.Field: node.Name}, client.UnsafeDisableDeepCopy); err != nil {
			return nil, fmt.Errorf("listing the pods of node %s: %w", node.Name, err)
		}
		for j := range podList.Items {
			pods = append(pods, &podList.Items[j])
		}
	}
	return totalsOf(pods), nil
}

// summarizeDevices lists, from the cache and without copying, the
// DeviceClasses, ResourceSlices and ResourceClaims, and counts the devices.
func (r *ClusterSummaryReconciler) summarizeDevices(ctx context.Context, nodes []*corev1.Node) ([]v1alpha1.DeviceClassSummary, error) {
	var classes resourcev1.DeviceClassList
	var slices resourcev1.ResourceSliceList
	var claims resourcev1.ResourceClaimList
	for what, list := range map[string]client.ObjectList{"DeviceClasses": &classes, "ResourceSlices": &slices, "ResourceClaims": &claims} {
		if err := r.Client.List(ctx, list, client.UnsafeDisableDeepCopy); err != nil {
			return nil, fmt.Errorf("listing %s: %w", what, err)
		}
	}
	schedulable := make(map[string]bool, len(nodes))
	for _, n := range nodes {
		schedulable[n.Name] = true
	}
	return SummarizeDevices(ctx, pointers(classes.Items), pointers(slices.Items), pointers(claims.Items),
		func(node string) bool { return schedulable[node] }), nil
}

func pointers[T any](items []T) []*T {
	out := make([]*T, len(items))
	for i := range items {
		out[i] = &items[i]
	}
	return out
}

// claimPredicate passes the claim events that can change the devices
// allocated: a claim with an allocation created or deleted, an allocation
// made or released.
func claimPredicate() predicate.Funcs {
	allocated := func(o client.Object) bool {
		c, ok := o.(*resourcev1.ResourceClaim)
		return !ok || c.Status.Allocation != nil
	}
	return predicate.Funcs{
		CreateFunc: func(e event.CreateEvent) bool { return allocated(e.Object) },
		DeleteFunc: func(e event.DeleteEvent) bool { return allocated(e.Object) },
		UpdateFunc: func(e event.UpdateEvent) bool {
			oldClaim, ok1 := e.ObjectOld.(*resourcev1.ResourceClaim)
			newClaim, ok2 := e.ObjectNew.(*resourcev1.ResourceClaim)
			if !ok1 || !ok2 {
				return true
			}
			return !equality.Semantic.DeepEqual(oldClaim.Status.Allocation, newClaim.Status.Allocation)
		},
	}
}

// writeStatus writes status, all of it, with server-side apply as
// FieldOwner: a field this controller no longer sets is removed. A field that
// another field manager added (with kubectl edit, say) is not removed by an
// apply: if the applied object still differs, a merge patch, with the
// applied resourceVersion as precondition, removes it.
func (r *ClusterSummaryReconciler) writeStatus(ctx context.Context, status v1alpha1.ClusterSummaryStatus) error {
	content, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&status)
	if err != nil {
		return err
	}
	// Built by hand rather than converted from a ClusterSummary, so that
	// nothing but the name and the status (no null creationTimestamp) is
	// applied.
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": v1alpha1.GroupVersion.String(),
		"kind":       "ClusterSummary",
		"metadata":   map[string]any{"name": v1alpha1.ClusterSummaryName},
		"status":     content,
	}}
	if err := r.Client.Status().Apply(ctx, client.ApplyConfigurationFromUnstructured(u),
		client.FieldOwner(FieldOwner), client.ForceOwnership); err != nil {
		return err
	}

	applied := &v1alpha1.ClusterSummary{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, applied); err != nil {
		return fmt.Errorf("reading the applied ClusterSummary: %w", err)
	}
	fixed := applied.DeepCopy()
	setOwned(&fixed.Status, status)
	if equality.Semantic.DeepEqual(applied.Status, fixed.Status) {
		return nil
	}
	ctrl.LoggerFrom(ctx).Info("Removing from the ClusterSummary's status what another field manager added",
		"clusterSummary", klog.KObj(applied))
	return r.Client.Status().Patch(ctx, fixed,
		client.MergeFromWithOptions(applied, client.MergeFromWithOptimisticLock{}), client.FieldOwner(FieldOwner))
}

func readyMessage(s v1alpha1.ClusterSummaryStatus) string {
	if s.NodeCount == 0 {
		return "No schedulable node"
	}
	return fmt.Sprintf("Summed %d schedulable nodes and the %s active pods bound to them", s.NodeCount, s.Requested.Pods())
}

// nodePredicate passes the node events that can change the summary.
func nodePredicate() predicate.Funcs {
	schedulable := func(o client.Object) bool {
		node, ok := o.(*corev1.Node)
		return !ok || IsSchedulableNode(node)
	}
	return predicate.Funcs{
		CreateFunc: func(e event.CreateEvent) bool { return schedulable(e.Object) },
		DeleteFunc: func(e event.DeleteEvent) bool { return schedulable(e.Object) },
		UpdateFunc: func(e event.UpdateEvent) bool {
			oldNode, ok1 := e.ObjectOld.(*corev1.Node)
			newNode, ok2 := e.ObjectNew.(*corev1.Node)
			if !ok1 || !ok2 {
				return true
			}
			return nodeChanged(oldNode, newNode)
		},
	}
}

// nodeChanged reports whether the change from oldNode to newNode can change
// the summary. Heartbeats and image lists do not.
func nodeChanged(oldNode, newNode *corev1.Node) bool {
	wasSchedulable, isSchedulable := IsSchedulableNode(oldNode), IsSchedulableNode(newNode)
	if wasSchedulable != isSchedulable {
		return true
	}
	if !isSchedulable {
		return false
	}
	return !maps.Equal(oldNode.Labels, newNode.Labels) ||
		!equality.Semantic.DeepEqual(oldNode.Status.Capacity, newNode.Status.Capacity) ||
		!equality.Semantic.DeepEqual(oldNode.Status.Allocatable, newNode.Status.Allocatable)
}
