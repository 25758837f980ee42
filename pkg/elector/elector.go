package elector

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
	"github.com/fleetlet/fleetlet/pkg/follow"
	"github.com/fleetlet/fleetlet/pkg/naming"
	"github.com/fleetlet/fleetlet/pkg/proxy"
	"github.com/fleetlet/fleetlet/pkg/summary"
	"github.com/fleetlet/fleetlet/pkg/target"
	"github.com/fleetlet/fleetlet/pkg/vnode"
)

// SpecOpener returns what the user asked for: the proxy's spec with its
// sealed multicluster.fleetlet.io/source-spec restored. It fails when the
// seal does not verify.
type SpecOpener func(proxy *corev1.Pod) (*corev1.PodSpec, error)

// Options configure the elector. Every timeout is a manager flag.
type Options struct {
	// SourceName is this cluster's name in its targets.
	SourceName string
	// Spec opens proxies' source-specs.
	Spec SpecOpener
	// ElectionDeadline is how long an election waits for the other
	// candidates after the first reservation.
	ElectionDeadline time.Duration
	// BindTimeout is how long an elected candidate may take to be bound in
	// its target before it is deleted and the election rerun.
	BindTimeout time.Duration
	// UnboundTimeout is how long a pinned, ungated proxy may stay unbound
	// before it is deleted (its controller makes a new one).
	UnboundTimeout time.Duration
	// PendingTargets is how many targets keep a pending candidate of a pod
	// that no cluster can run now (K; one cluster autoscaler scales up).
	PendingTargets int
	// Follower takes the objects a pod references to its targets: nil
	// follows nothing.
	Follower *follow.Follower
}

// Defaults for Options.
const (
	DefaultElectionDeadline = 2 * time.Second
	DefaultBindTimeout      = 2 * time.Minute
	DefaultUnboundTimeout   = 5 * time.Minute
	DefaultPendingTargets   = 1
)

// requeueSoon brings a proxy back at once, for the next step of its
// election, without counting as a failure.
const requeueSoon = 10 * time.Millisecond

// Event reasons.
const (
	EventElected         = "Elected"
	EventNotSchedulable  = "NoClusterAvailable"
	EventInvalidSpec     = "InvalidSourceSpec"
	EventInvalidSelector = "InvalidClusterSelector"
	EventReelecting      = "Reelecting"
	EventUnboundDeleted  = "UnboundProxyDeleted"
	// EventPinnedProxyDeleted: a pinned proxy's election cannot be
	// completed on its target; the proxy is deleted (its controller makes
	// a new one) rather than pinned elsewhere.
	EventPinnedProxyDeleted = "PinnedProxyDeleted"
	EventFollowRefused      = follow.EventRefused
	reasonFollowRefused     = "FollowRefused"
	reasonElected           = "Elected"
	reasonNoClusters        = "NoClusterAvailable"
	reasonInvalidSpec       = "InvalidSourceSpec"
	reasonInvalidSelector   = "InvalidClusterSelector"
	reasonReelecting        = "Reelecting"
)

// Reconciler runs the life of every proxy pod on the source side: elect,
// pin, ungate (and, until the lifecycle controller exists, delete).
type Reconciler struct {
	opts     Options
	client   client.Client
	registry *target.Registry
	recorder events.EventRecorder
	clock    clock.Clock

	// queue is the controller's work queue, captured when it starts, so
	// that chaperon and target events add proxies to it directly: never
	// blocking, never dropped, deduplicated per proxy.
	queueMu sync.Mutex
	queue   workqueue.TypedRateLimitingInterface[reconcile.Request]

	mu sync.Mutex
	// firstReservation is when an election first saw a reservation.
	firstReservation map[types.UID]time.Time
}

// New returns the elector; SetRegistry must be called before it runs.
func New(opts Options) (*Reconciler, error) {
	if opts.SourceName == "" || opts.Spec == nil {
		return nil, errors.New("elector: the source name and a source-spec opener are required")
	}
	if opts.ElectionDeadline == 0 {
		opts.ElectionDeadline = DefaultElectionDeadline
	}
	if opts.BindTimeout == 0 {
		opts.BindTimeout = DefaultBindTimeout
	}
	if opts.UnboundTimeout == 0 {
		opts.UnboundTimeout = DefaultUnboundTimeout
	}
	if opts.PendingTargets == 0 {
		opts.PendingTargets = DefaultPendingTargets
	}
	return &Reconciler{
		opts:             opts,
		clock:            clock.RealClock{},
		firstReservation: map[types.UID]time.Time{},
	}, nil
}

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

// Reconcile runs one step of a proxy's life.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	var pod corev1.Pod
	if err := r.client.Get(ctx, req.NamespacedName, &pod); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if !isProxy(&pod) {
		return reconcile.Result{}, nil
	}
	if pod.DeletionTimestamp != nil {
		return r.finalize(ctx, &pod)
	}
	gate := proxy.GateIndex(&pod)
	if gate < 0 {
		return r.watchdog(ctx, &pod)
	}
	if len(pod.Spec.SchedulingGates) > 1 {
		// Another controller's gate (a quota system) keeps the pod out of
		// every cluster until it is lifted.
		return reconcile.Result{}, nil
	}
	if c := proxy.ElectedCondition(&pod); c != nil && c.Status == corev1.ConditionTrue {
		return r.finishElection(ctx, &pod, c)
	}
	if node := proxy.PinnedNode(&pod); node != "" {
		// Pinned, and no election stands: it can only be completed on
		// that node's target, and nothing there is elected any more.
		return reconcile.Result{}, r.deletePinned(ctx, &pod, "no election stands for it")
	}
	return r.elect(ctx, &pod)
}

// targetState is one target's view for one proxy.
type targetState struct {
	key      target.Key
	cluster  *target.Cluster
	node     *corev1.Node
	eligible bool
	reason   string
	chaperon *v1alpha1.PodChaperon
}

func (r *Reconciler) targets(ctx context.Context, pod *corev1.Pod, clusters labels.Selector) []*targetState {
	var out []*targetState
	for _, cl := range r.registry.List() {
		key := cl.Key()
		h := cl.Health()
		ts := &targetState{key: key, cluster: cl}
		cl.WatchChaperons(pod.Namespace)
		var node corev1.Node
		if err := r.client.Get(ctx, types.NamespacedName{Name: vnode.NodeName(vnode.TargetKey{Namespace: key.Namespace, Name: key.Name})}, &node); err == nil {
			ts.node = &node
		}
		ts.eligible, ts.reason = Eligible(pod, TargetView{Namespace: key.Namespace, Name: key.Name, Ready: h.Ready, Reason: h.Reason, Node: ts.node}, clusters)
		if key.Namespace != "" && key.Namespace != pod.Namespace {
			continue
		}
		out = append(out, ts)
	}
	return out
}

// elect creates candidates in every eligible target, and elects one when
// they have answered.
func (r *Reconciler) elect(ctx context.Context, pod *corev1.Pod) (reconcile.Result, error) {
	log := ctrl.LoggerFrom(ctx)
	userSpec, err := r.opts.Spec(pod)
	if err != nil {
		return reconcile.Result{}, r.setNotElected(ctx, pod, reasonInvalidSpec, fmt.Sprintf("the sealed source-spec cannot be trusted: %v", err), EventInvalidSpec)
	}
	clusters, err := ParseClusterSelector(pod)
	if err != nil {
		return reconcile.Result{}, r.setNotElected(ctx, pod, reasonInvalidSelector, err.Error(), EventInvalidSelector)
	}
	var refs follow.RefSet
	if r.opts.Follower != nil {
		if refs, err = follow.Refs(pod, userSpec); err == nil {
			err = r.opts.Follower.Check(refs)
		}
		if err != nil {
			var refusal *follow.Refusal
			if !errors.As(err, &refusal) {
				return reconcile.Result{}, err
			}
			// A malformed annotation, a kind that is not allowed or
			// not namespaced: no cluster may run the pod.
			return reconcile.Result{}, r.setNotElected(ctx, pod, reasonFollowRefused, err.Error(), EventFollowRefused)
		}
	}
	states := r.targets(ctx, pod, clusters)

	// Candidates in every eligible target, in parallel.
	var wg sync.WaitGroup
	for _, ts := range states {
		if !ts.eligible {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			ts.chaperon, ts.reason = r.ensureCandidate(ctx, pod, userSpec, refs, ts)
			if ts.chaperon == nil {
				ts.eligible = false
			}
		}()
	}
	wg.Wait()

	requests := summary.PodRequests(&corev1.Pod{Spec: *userSpec})
	var offers []Offer
	answered, eligible := 0, 0
	byKey := map[string]*targetState{}
	for _, ts := range states {
		byKey[ts.key.String()] = ts
		if !ts.eligible {
			continue
		}
		eligible++
		switch a, msg := answer(ts.chaperon); a {
		case answerReserved:
			answered++
			offers = append(offers, Offer{Target: ts.key.String(), FreeShare: FreeShareAfter(ts.cluster.Summary(), requests)})
		case answerUnschedulable, answerRejected:
			answered++
			ts.reason = msg
		}
	}

	if len(offers) > 0 {
		r.mu.Lock()
		first, ok := r.firstReservation[pod.UID]
		if !ok {
			first = r.clock.Now()
			r.firstReservation[pod.UID] = first
		}
		r.mu.Unlock()
		if wait := r.opts.ElectionDeadline - r.clock.Since(first); answered < eligible && wait > 0 {
			return reconcile.Result{RequeueAfter: wait}, nil
		}
		winner := Rank(pod.UID, offers)[0]
		ts := byKey[winner.Target]
		log.V(2).Info("Electing a candidate", "target", winner.Target, "chaperon", ts.chaperon.Name, "offers", len(offers), "eligible", eligible)
		if err := r.recordElection(ctx, pod, ts); err != nil {
			if apierrors.IsConflict(err) {
				// The proxy changed since it was read: decide again on
				// the fresh object (the record is never written blind).
				return reconcile.Result{RequeueAfter: requeueSoon}, nil
			}
			return reconcile.Result{}, err
		}
		electionsTotal.WithLabelValues("elected").Inc()
		r.mu.Lock()
		if first, ok := r.firstReservation[pod.UID]; ok {
			electionDuration.Observe(r.clock.Since(first).Seconds())
			delete(r.firstReservation, pod.UID)
		}
		r.mu.Unlock()
		// The record stands: the next pass marks the winner and removes
		// the losers.
		return reconcile.Result{RequeueAfter: requeueSoon}, nil
	}

	if answered < eligible {
		// Candidates still deciding; their chaperons' events bring the
		// proxy back. A slow safety requeue covers a lost event.
		return reconcile.Result{RequeueAfter: 30 * time.Second}, nil
	}
	// No candidate is schedulable anywhere: keep pending candidates in the
	// K best targets only, and say why for each cluster.
	r.trimPending(ctx, pod, states, requests)
	return reconcile.Result{RequeueAfter: time.Minute}, r.setNotElected(ctx, pod, reasonNoClusters, reasons(states), EventNotSchedulable)
}

// reasons says, per cluster, why it does not run the pod.
func reasons(states []*targetState) string {
	var parts []string
	for _, s := range states {
		if s.reason == "" {
			s.reason = "no answer yet"
		}
		parts = append(parts, fmt.Sprintf("%s: %s", s.key, s.reason))
	}
	if len(parts) == 0 {
		return "no target is connected"
	}
	return strings.Join(parts, "; ")
}

type answerKind int

const (
	answerPending answerKind = iota
	answerReserved
	answerUnschedulable
	answerRejected
)

// answer reads what a candidate said: reserved (the candidate scheduler
// holds a node at Permit), unschedulable (with the scheduler's message),
// rejected (the target refused the pod), or nothing yet.
func answer(pc *v1alpha1.PodChaperon) (answerKind, string) {
	if pc == nil {
		return answerPending, ""
	}
	if pc.Annotations[v1alpha1.AnnotationReserved] != "" {
		return answerReserved, ""
	}
	for _, c := range pc.Status.Conditions {
		if c.Type == v1alpha1.ConditionPodCreated && c.Status == metav1.ConditionFalse {
			return answerRejected, c.Message
		}
	}
	for _, c := range pc.Status.PodStatus.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
			return answerUnschedulable, c.Message
		}
	}
	return answerPending, ""
}

// ensureCandidate makes sure the target has the proxy's chaperon; it returns
// it, or nil and why not.
func (r *Reconciler) ensureCandidate(ctx context.Context, pod *corev1.Pod, userSpec *corev1.PodSpec, refs follow.RefSet, ts *targetState) (*v1alpha1.PodChaperon, string) {
	want := Chaperon(CandidateInput{Proxy: pod, Spec: userSpec, SourceName: r.opts.SourceName, Self: ts.cluster.Self()})
	var got v1alpha1.PodChaperon
	err := ts.cluster.Chaperons(pod.Namespace).Get(ctx, client.ObjectKeyFromObject(want), &got)
	if err == nil {
		if got.Labels[v1alpha1.LabelParentUID] != string(pod.UID) {
			return nil, fmt.Sprintf("a PodChaperon %s/%s of another pod is in the way", got.Namespace, got.Name)
		}
		if got.DeletionTimestamp != nil {
			// A loser or an earlier election's candidate, its pod on
			// the way out: never this election's. Its deletion brings
			// the proxy back.
			return nil, "an earlier candidate there is still being deleted"
		}
		return &got, ""
	}
	if !apierrors.IsNotFound(err) {
		return nil, fmt.Sprintf("reading the chaperon: %v", err)
	}
	// The namespace must exist there: a missing one filters the target.
	var ns corev1.Namespace
	if err := ts.cluster.Client().Get(ctx, types.NamespacedName{Name: pod.Namespace}, &ns); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, fmt.Sprintf("namespace %s does not exist there", pod.Namespace)
		}
		return nil, fmt.Sprintf("reading namespace %s: %v", pod.Namespace, err)
	}
	// What the candidate needs is there before it is.
	if r.opts.Follower != nil && !ts.cluster.Self() {
		why, err := r.follow(ctx, pod, refs, ts.cluster, follow.StageCandidate)
		if err != nil {
			return nil, fmt.Sprintf("copying what the pod needs: %v", err)
		}
		if why != "" {
			return nil, why
		}
	}
	if err := ts.cluster.Client().Create(ctx, want); err != nil {
		if apierrors.IsAlreadyExists(err) {
			return want, ""
		}
		candidatesTotal.WithLabelValues(ts.key.String(), "error").Inc()
		return nil, fmt.Sprintf("creating the candidate: %v", err)
	}
	candidatesTotal.WithLabelValues(ts.key.String(), "created").Inc()
	return want, ""
}

// trimPending keeps pending candidates in at most K targets, the best ranked,
// so that one cluster autoscaler scales up, not all of them.
func (r *Reconciler) trimPending(ctx context.Context, pod *corev1.Pod, states []*targetState, requests corev1.ResourceList) {
	var offers []Offer
	byKey := map[string]*targetState{}
	for _, s := range states {
		if s.chaperon != nil {
			offers = append(offers, Offer{Target: s.key.String(), FreeShare: FreeShareAfter(s.cluster.Summary(), requests)})
			byKey[s.key.String()] = s
		}
	}
	for i, o := range Rank(pod.UID, offers) {
		if i < r.opts.PendingTargets {
			continue
		}
		s := byKey[o.Target]
		if err := deleteChaperon(ctx, s.cluster, s.chaperon, pod.UID); err != nil {
			ctrl.LoggerFrom(ctx).Error(err, "Deleting a surplus pending candidate", "target", o.Target)
			continue
		}
		r.release(ctx, pod, s.cluster)
	}
}

// deleteChaperon deletes a chaperon of this proxy, foreground so that it goes
// only after its pod.
func deleteChaperon(ctx context.Context, cl *target.Cluster, pc *v1alpha1.PodChaperon, uid types.UID) error {
	err := cl.Client().Delete(ctx, pc, client.PropagationPolicy(metav1.DeletePropagationForeground),
		client.Preconditions{UID: ptr.To(pc.UID)})
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil
	}
	_ = uid
	return err
}

// recordElection writes the decision on the source first: Elected=True
// naming the target and the chaperon, with the pod's resourceVersion as a
// precondition. Only this record counts after a crash or a leader change.
func (r *Reconciler) recordElection(ctx context.Context, pod *corev1.Pod, ts *targetState) error {
	p := pod.DeepCopy()
	setCondition(p, corev1.PodCondition{
		Type:    v1alpha1.ConditionElected,
		Status:  corev1.ConditionTrue,
		Reason:  reasonElected,
		Message: recordOf(ts.key, ts.chaperon.Name).Message(),
	}, r.clock.Now())
	if err := r.client.Status().Update(ctx, p); err != nil {
		return fmt.Errorf("recording the election of %s: %w", ts.key, err)
	}
	r.recorder.Eventf(pod, nil, corev1.EventTypeNormal, EventElected, "Elect", "Elected %s (candidate %s)", ts.key, ts.chaperon.Name)
	return nil
}

// recordOf is the election record naming a target's candidate.
func recordOf(key target.Key, chaperon string) proxy.Record {
	return proxy.Record{TargetNamespace: key.Namespace, TargetName: key.Name, Chaperon: chaperon}
}

// keyOf is the elected target of a record.
func keyOf(r proxy.Record) target.Key {
	return target.Key{Namespace: r.TargetNamespace, Name: r.TargetName}
}

// ElectedTarget reads a proxy's election record: the elected target and
// the chaperon there. ok is false while no election stands (no record, or
// Elected is not True, or the record cannot be read).
func ElectedTarget(p *corev1.Pod) (key target.Key, chaperon string, ok bool) {
	r, ok := proxy.Elected(p)
	return keyOf(r), r.Chaperon, ok
}

func setCondition(p *corev1.Pod, c corev1.PodCondition, now time.Time) bool {
	c.LastProbeTime = metav1.Time{}
	for i, old := range p.Status.Conditions {
		if old.Type != c.Type {
			continue
		}
		if old.Status == c.Status && old.Reason == c.Reason && old.Message == c.Message {
			return false
		}
		if old.Status == c.Status {
			c.LastTransitionTime = old.LastTransitionTime
		} else {
			c.LastTransitionTime = metav1.NewTime(now)
		}
		p.Status.Conditions[i] = c
		return true
	}
	c.LastTransitionTime = metav1.NewTime(now)
	p.Status.Conditions = append(p.Status.Conditions, c)
	return true
}

// setNotElected records why the proxy has no delegate yet, with an Event
// when that changes.
func (r *Reconciler) setNotElected(ctx context.Context, pod *corev1.Pod, reason, msg, eventReason string) error {
	p := pod.DeepCopy()
	if !setCondition(p, corev1.PodCondition{Type: v1alpha1.ConditionElected, Status: corev1.ConditionFalse, Reason: reason, Message: msg}, r.clock.Now()) {
		return nil
	}
	if err := r.client.Status().Update(ctx, p); err != nil {
		return client.IgnoreNotFound(err)
	}
	electionsTotal.WithLabelValues(strings.ToLower(reason)).Inc()
	r.recorder.Eventf(pod, nil, corev1.EventTypeWarning, eventReason, "Elect", "%s", msg)
	return nil
}

// finishElection carries an election out: marks the winner, deletes the
// losers, waits for the delegate to be bound, then pins the proxy and lifts
// the gate. An elected candidate that is not bound in time is deleted and
// the election rerun; the proxy never sees that failure.
func (r *Reconciler) finishElection(ctx context.Context, pod *corev1.Pod, rec *corev1.PodCondition) (reconcile.Result, error) {
	record, err := proxy.ParseRecord(rec.Message)
	if err != nil {
		return reconcile.Result{}, r.clearElection(ctx, pod, err.Error())
	}
	key, name := keyOf(record), record.Chaperon
	cl, ok := r.registry.Get(key)
	if !ok || !cl.Health().Ready {
		// Never elect another target while this record stands; wait.
		return reconcile.Result{RequeueAfter: 5 * time.Second}, nil
	}
	var pc v1alpha1.PodChaperon
	key2 := types.NamespacedName{Namespace: pod.Namespace, Name: name}
	err = cl.Chaperons(pod.Namespace).Get(ctx, key2, &pc)
	if apierrors.IsNotFound(err) {
		// The cache may be behind: only the API server says it is gone.
		err = cl.Client().Get(ctx, key2, &pc)
	}
	if err != nil {
		if apierrors.IsNotFound(err) {
			return reconcile.Result{}, r.clearElection(ctx, pod, fmt.Sprintf("the elected candidate %s in %s is gone", name, key))
		}
		return reconcile.Result{}, err
	}
	if pc.Labels[v1alpha1.LabelParentUID] != string(pod.UID) {
		return reconcile.Result{}, r.clearElection(ctx, pod, fmt.Sprintf("%s in %s belongs to another pod", name, key))
	}
	if pc.Annotations[v1alpha1.AnnotationElected] != "true" && r.opts.Follower != nil && !cl.Self() {
		// The delegate's Secrets reach the elected target before it may
		// bind there.
		why := ""
		userSpec, err := r.opts.Spec(pod)
		if err == nil {
			var refs follow.RefSet
			if refs, err = follow.Refs(pod, userSpec); err == nil {
				// A Secret missing or taken there since the candidate
				// was checked: this target cannot run the pod.
				why, err = r.follow(ctx, pod, refs, cl, follow.StageDelegate)
			}
		}
		if err != nil {
			// The target or the source did not answer: again, with
			// backoff.
			return reconcile.Result{}, fmt.Errorf("copying what the delegate needs to %s: %w", key, err)
		}
		if why != "" {
			if err := deleteChaperon(ctx, cl, &pc, pod.UID); err != nil {
				return reconcile.Result{}, err
			}
			return reconcile.Result{}, r.clearElection(ctx, pod, fmt.Sprintf("the elected target %s cannot run the pod: %s", key, why))
		}
	}
	if pc.Annotations[v1alpha1.AnnotationElected] != "true" {
		patch := client.RawPatch(types.MergePatchType, []byte(fmt.Sprintf(`{"metadata":{"annotations":{%q:"true"}}}`, v1alpha1.AnnotationElected)))
		if err := cl.Client().Patch(ctx, &pc, patch); err != nil {
			return reconcile.Result{}, fmt.Errorf("marking the elected candidate in %s: %w", key, err)
		}
	}
	if err := r.deleteLosers(ctx, pod, key); err != nil {
		return reconcile.Result{}, err
	}

	isBound := bound(&pc)
	if !isBound {
		// The binding shows on the pod before the chaperon mirrors it.
		var dp corev1.Pod
		if err := cl.Chaperons(pod.Namespace).Get(ctx, key2, &dp); err == nil && dp.Spec.NodeName != "" &&
			dp.Labels[v1alpha1.LabelParentUID] == string(pod.UID) && metav1.IsControlledBy(&dp, &pc) {
			isBound = true
		}
	}
	if !isBound {
		if failed(&pc) || r.clock.Since(rec.LastTransitionTime.Time) > r.opts.BindTimeout {
			r.recorder.Eventf(pod, nil, corev1.EventTypeWarning, EventReelecting, "Elect", "The candidate in %s was not bound in time or was refused; electing again", key)
			if err := deleteChaperon(ctx, cl, &pc, pod.UID); err != nil {
				return reconcile.Result{}, err
			}
			return reconcile.Result{}, r.clearElection(ctx, pod, fmt.Sprintf("the candidate in %s was not bound in time or was refused", key))
		}
		return reconcile.Result{RequeueAfter: r.opts.BindTimeout - r.clock.Since(rec.LastTransitionTime.Time)}, nil
	}

	nodeName := vnode.NodeName(vnode.TargetKey{Namespace: key.Namespace, Name: key.Name})
	if pod.Spec.NodeSelector[corev1.LabelHostname] != nodeName {
		if err := r.pin(ctx, pod, nodeName); err != nil {
			return reconcile.Result{}, err
		}
		// The virtual node counts the pinned proxy in its allocatable;
		// lift the gate on the next pass.
		return reconcile.Result{RequeueAfter: 200 * time.Millisecond}, nil
	}
	if !r.fits(ctx, pod, nodeName) {
		// Never ungated without a fit: the source scheduler would fail
		// to bind it, or preempt. The node's allocatable growing brings
		// the proxy back (the pinned index); past UnboundTimeout it is
		// deleted, as an ungated proxy that stays unbound is.
		if left := r.opts.UnboundTimeout - r.clock.Since(rec.LastTransitionTime.Time); left > 0 {
			return reconcile.Result{RequeueAfter: min(left, 5*time.Second)}, nil
		}
		r.recorder.Eventf(pod, nil, corev1.EventTypeWarning, EventUnboundDeleted, "Delete",
			"Pinned to %s, which has had no room for it for %s: deleting the proxy so that its controller makes a new one", nodeName, r.opts.UnboundTimeout)
		err := r.client.Delete(ctx, pod, client.Preconditions{UID: ptr.To(pod.UID)})
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	return reconcile.Result{}, r.ungate(ctx, pod)
}

// deleteLosers deletes the proxy's chaperons in every target but the
// elected one. It reads the targets' caches, which may show a candidate
// only after the proxy was ungated or bound (a cache behind under load, a
// create in flight when the manager restarted): that candidate's event
// brings the proxy back here whatever its phase, so no loser outlives an
// election.
func (r *Reconciler) deleteLosers(ctx context.Context, pod *corev1.Pod, elected target.Key) error {
	name := types.NamespacedName{Namespace: pod.Namespace, Name: naming.RemoteName(pod.Name, pod.UID)}
	var errs []error
	for _, other := range r.registry.List() {
		key := other.Key()
		if key == elected || (key.Namespace != "" && key.Namespace != pod.Namespace) {
			continue
		}
		// From the cache only, never a request per target per pass: a
		// cache that has not synced yet delivers every chaperon it finds
		// as an event when it does, which brings the proxy back here.
		other.WatchChaperons(pod.Namespace)
		cached, synced := other.ChaperonCache(pod.Namespace)
		if !synced {
			continue
		}
		var loser v1alpha1.PodChaperon
		if err := cached.Get(ctx, name, &loser); err != nil ||
			loser.Labels[v1alpha1.LabelParentUID] != string(pod.UID) || loser.DeletionTimestamp != nil {
			continue
		}
		if err := deleteChaperon(ctx, other, &loser, pod.UID); err != nil {
			errs = append(errs, fmt.Errorf("deleting the losing candidate in %s: %w", key, err))
			continue
		}
		ctrl.LoggerFrom(ctx).V(2).Info("Deleted a losing candidate", "target", key.String())
		r.release(ctx, pod, other)
	}
	return errors.Join(errs...)
}

// bound reports whether the candidate was bound to a node in its target.
func bound(pc *v1alpha1.PodChaperon) bool {
	for _, c := range pc.Status.PodStatus.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}

// failed reports whether the target's kubelet refused the delegate.
func failed(pc *v1alpha1.PodChaperon) bool {
	return pc.Status.PodStatus.Phase == corev1.PodFailed && pc.Status.PodStatus.StartTime == nil
}

// fits reports whether the virtual node already counts the pinned proxy, so
// that the source scheduler binds it at the first try.
func (r *Reconciler) fits(ctx context.Context, pod *corev1.Pod, nodeName string) bool {
	var node corev1.Node
	if err := r.client.Get(ctx, types.NamespacedName{Name: nodeName}, &node); err != nil {
		return false
	}
	var pods corev1.PodList
	if err := r.client.List(ctx, &pods, client.MatchingFields{summary.IndexActivePodNodeName: nodeName}); err != nil {
		// No index registered: a wiring mistake, never a fit.
		ctrl.LoggerFrom(ctx).Error(err, "Listing the pods bound to a virtual node", "node", nodeName)
		return false
	}
	used := corev1.ResourceList{}
	active := int64(0)
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		active++
		for n, q := range summary.PodRequests(p) {
			u := used[n]
			u.Add(q)
			used[n] = u
		}
	}
	// One more pod, as the scheduler counts them.
	if slots, ok := node.Status.Allocatable[corev1.ResourcePods]; ok && slots.Value() < active+1 {
		return false
	}
	for n, q := range summary.PodRequests(pod) {
		if n == corev1.ResourcePods {
			continue
		}
		free := node.Status.Allocatable[n].DeepCopy()
		u := used[n]
		free.Sub(u)
		if free.Cmp(q) < 0 {
			return false
		}
	}
	return true
}

// pin adds kubernetes.io/hostname=<virtual node> to the proxy's nodeSelector
// (Kubernetes allows adding nodeSelector keys to a gated pod).
func (r *Reconciler) pin(ctx context.Context, pod *corev1.Pod, nodeName string) error {
	if err := r.client.Patch(ctx, pod, client.RawPatch(types.JSONPatchType, proxy.PinPatch(pod, nodeName))); err != nil {
		return fmt.Errorf("pinning %s to %s: %w", klog.KObj(pod), nodeName, err)
	}
	return nil
}

// ungate removes fleetlet's gate, and only it: the test op fails the patch if
// the gate moved.
func (r *Reconciler) ungate(ctx context.Context, pod *corev1.Pod) error {
	patch, ok := proxy.RemoveGatePatch(pod)
	if !ok {
		return nil
	}
	if err := r.client.Patch(ctx, pod, client.RawPatch(types.JSONPatchType, patch)); err != nil {
		if apierrors.IsInvalid(err) || apierrors.IsNotFound(err) {
			// The test op failed: the gates moved since the cache saw
			// them (usually: ours is already gone). The next pass reads
			// them again.
			return nil
		}
		return fmt.Errorf("lifting the gate of %s: %w", klog.KObj(pod), err)
	}
	return nil
}

// clearElection drops an election record that cannot be carried out, with
// the resourceVersion precondition, so that a new election runs.
func (r *Reconciler) clearElection(ctx context.Context, pod *corev1.Pod, why string) error {
	if proxy.PinnedNode(pod) != "" {
		// Once pinned, never elected elsewhere.
		return r.deletePinned(ctx, pod, why)
	}
	p := pod.DeepCopy()
	setCondition(p, corev1.PodCondition{Type: v1alpha1.ConditionElected, Status: corev1.ConditionFalse, Reason: reasonReelecting, Message: why}, r.clock.Now())
	if err := r.client.Status().Update(ctx, p); err != nil {
		return client.IgnoreNotFound(err)
	}
	return nil
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

// watchdog looks after an ungated proxy: it deletes losing candidates seen
// late, and deletes a proxy that was pinned and ungated but is still
// unbound after UnboundTimeout (nothing waits forever; its controller makes
// a new one).
func (r *Reconciler) watchdog(ctx context.Context, pod *corev1.Pod) (reconcile.Result, error) {
	rec := proxy.ElectedCondition(pod)
	if rec == nil || rec.Status != corev1.ConditionTrue {
		return reconcile.Result{}, nil
	}
	// A loser seen only now still goes (see deleteLosers).
	if record, err := proxy.ParseRecord(rec.Message); err == nil {
		if err := r.deleteLosers(ctx, pod, keyOf(record)); err != nil {
			return reconcile.Result{}, err
		}
	}
	if pod.Spec.NodeName != "" {
		return reconcile.Result{}, nil
	}
	left := r.opts.UnboundTimeout - r.clock.Since(rec.LastTransitionTime.Time)
	if left > 0 {
		return reconcile.Result{RequeueAfter: left}, nil
	}
	r.recorder.Eventf(pod, nil, corev1.EventTypeWarning, EventUnboundDeleted, "Delete", "Pinned and ungated but still not bound after %s: deleting the proxy so that its controller makes a new one", r.opts.UnboundTimeout)
	err := r.client.Delete(ctx, pod, client.Preconditions{UID: ptr.To(pod.UID), ResourceVersion: ptr.To(pod.ResourceVersion)})
	return reconcile.Result{}, client.IgnoreNotFound(err)
}

// finalize deletes a deleted proxy's chaperons everywhere (foreground: each
// goes only after its pod) and removes fleetlet's finalizer once they are
// gone. A target that does not answer keeps the proxy Terminating: its
// delegate cannot be confirmed gone.
func (r *Reconciler) finalize(ctx context.Context, pod *corev1.Pod) (reconcile.Result, error) {
	remaining := 0
	name := naming.RemoteName(pod.Name, pod.UID)
	for _, cl := range r.registry.List() {
		if cl.Key().Namespace != "" && cl.Key().Namespace != pod.Namespace {
			continue
		}
		var pc v1alpha1.PodChaperon
		err := cl.Client().Get(ctx, types.NamespacedName{Namespace: pod.Namespace, Name: name}, &pc)
		if apierrors.IsNotFound(err) || (apierrors.IsForbidden(err) && cl.Namespace(ctx, pod.Namespace) == target.NamespaceGone) {
			// A namespace deleted in the target took its chaperons and
			// pods with it (its deletion ends only when they are gone),
			// and the source's rights there with it.
			continue
		}
		if err != nil {
			remaining++
			continue
		}
		if pc.Labels[v1alpha1.LabelParentUID] != string(pod.UID) {
			continue
		}
		remaining++
		if pc.DeletionTimestamp == nil {
			if err := deleteChaperon(ctx, cl, &pc, pod.UID); err != nil {
				ctrl.LoggerFrom(ctx).Error(err, "Deleting a chaperon of a deleted proxy", "target", cl.Key().String())
			}
		}
	}
	if remaining > 0 {
		return reconcile.Result{RequeueAfter: time.Second}, nil
	}
	for _, cl := range r.registry.List() {
		if cl.Key().Namespace == "" || cl.Key().Namespace == pod.Namespace {
			r.release(ctx, pod, cl)
		}
	}
	patch, ok := proxy.RemoveFinalizerPatch(pod.Finalizers, v1alpha1.FinalizerDelegate)
	if !ok {
		return reconcile.Result{}, nil
	}
	return reconcile.Result{}, client.IgnoreNotFound(r.client.Patch(ctx, pod, client.RawPatch(types.JSONPatchType, patch)))
}

// follow takes what the pod references to a target, at a stage of its
// life. A refusal (an object that is not allowed, missing, or whose name
// another owner holds there) comes back as why the target cannot run the
// pod, with an Event, and what was copied for this pod there is released;
// err is a failure to get an answer.
func (r *Reconciler) follow(ctx context.Context, pod *corev1.Pod, refs follow.RefSet, cl *target.Cluster, stage follow.Stage) (why string, err error) {
	key := cl.Key()
	err = r.opts.Follower.Ensure(ctx, cl.Client(), key.String(), pod, refs, stage)
	var refusal *follow.Refusal
	if !errors.As(err, &refusal) {
		return "", err
	}
	r.recorder.Eventf(pod, nil, corev1.EventTypeWarning, EventFollowRefused, "Follow", "%s: %s", key, refusal.Error())
	r.release(ctx, pod, cl)
	return refusal.Error(), nil
}

// release drops the pod from the followers of its copies in a target,
// deleting those no other pod needs. A failure is left to the garbage
// collector.
func (r *Reconciler) release(ctx context.Context, pod *corev1.Pod, cl *target.Cluster) {
	if r.opts.Follower == nil || cl.Self() {
		return
	}
	if err := r.opts.Follower.Release(ctx, cl.Client(), cl.Key().String(), pod.UID, pod.Namespace); err != nil {
		ctrl.LoggerFrom(ctx).V(1).Info("Releasing followed objects; the garbage collector will", "target", cl.Key().String(), "err", err.Error())
	}
}
