package chaperon

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
	"github.com/fleetlet/fleetlet/pkg/proxy"
)

// maxMessageLength bounds a condition's message (the API allows 32768).
const maxMessageLength = 4096

// PodChaperonReconciler creates the pod each PodChaperon holds, as the
// source's ServiceAccount, and mirrors the pod's status onto the chaperon.
// See the package documentation.
type PodChaperonReconciler struct {
	// Client reads chaperons, pods, Sources, ClusterSources and Namespaces
	// from the manager's cache and writes chaperons' status, as the
	// manager. It never writes a pod.
	Client client.Client
	// APIReader reads from the API server what the cache may show late:
	// a chaperon about to get its pod, when the cache may lack our record
	// of a creation (cacheMayBeBehind), and a pod that seems gone (is it
	// really deleted?).
	APIReader client.Reader
	// Impersonator gives the clients that create pods as a source.
	Impersonator Impersonator
	// Recorder records Events on chaperons.
	Recorder events.EventRecorder

	// RetryInterval is how often a chaperon that waits — for its source,
	// or for a pod of its name that is not its own to go — is checked
	// again when no event wakes it up; zero means DefaultRetryInterval.
	RetryInterval time.Duration
	// RejectedBackoffInitial and RejectedBackoffMax bound the backoff
	// between attempts to create a pod the target refused; zero means
	// DefaultRejectedBackoffInitial and DefaultRejectedBackoffMax.
	RejectedBackoffInitial, RejectedBackoffMax time.Duration
	// MaxConcurrentReconciles is how many chaperons are reconciled at
	// once; zero means DefaultMaxConcurrentReconciles.
	MaxConcurrentReconciles int
	// RecreateDelay is how long a deleted delegate stays gone, counted
	// from the later of its deletion and its source's heartbeat expiry,
	// before it is created again because its source is unreachable; zero
	// means DefaultRecreateDelay.
	RecreateDelay time.Duration
	// Clock tells the time: when a pod was seen deleted, whether a
	// heartbeat expired. Nil means the real clock.
	Clock clock.PassiveClock

	once    sync.Once
	backoff workqueue.TypedRateLimiter[types.NamespacedName]
	// writes are the chaperon versions our status writes made, until the
	// cache shows them: a cache behind one of them is known without
	// asking the API server, and a pass waits for it to catch up.
	writes ownWrites
	// pods are the pods this controller created that the cache has not
	// shown yet.
	pods createdPods
	// leading is when this controller started to act (it runs only
	// while its manager leads); zero until then.
	leading atomic.Pointer[time.Time]
}

// +kubebuilder:rbac:groups=multicluster.fleetlet.io,resources=podchaperons,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=multicluster.fleetlet.io,resources=podchaperons/status,verbs=get;patch
// +kubebuilder:rbac:groups=multicluster.fleetlet.io,resources=sources;clustersources,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=pods;namespaces,verbs=get;list;watch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=get;list;watch
// (Impersonation of each source's ServiceAccount is granted per source; see
// the package documentation.)

// SetupWithManager fills the fields left empty from mgr and registers the
// controller and its field index (IndexAwaitingRecreation): it watches
// PodChaperons, the pods they control, Sources and ClusterSources (to wake
// the chaperons that wait for them), and the sources' heartbeat Leases (to
// wake the chaperons whose delegate may be created again). The manager's
// cache may be restricted to the heartbeat Leases with
// HeartbeatLeaseCache.
func (r *PodChaperonReconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Client == nil {
		r.Client = mgr.GetClient()
	}
	if r.APIReader == nil {
		r.APIReader = mgr.GetAPIReader()
	}
	if r.Impersonator == nil {
		imp, err := NewImpersonator(mgr.GetConfig(), client.Options{Scheme: mgr.GetScheme(), Mapper: mgr.GetRESTMapper()})
		if err != nil {
			return err
		}
		r.Impersonator = imp
	}
	if r.Recorder == nil {
		r.Recorder = mgr.GetEventRecorder(EventSource)
	}
	r.defaults()
	// Started with the controllers, once the manager leads.
	if err := mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
		r.leadingSince(r.Clock.Now())
		<-ctx.Done()
		return nil
	})); err != nil {
		return err
	}
	if err := mgr.GetFieldIndexer().IndexField(context.Background(), &v1alpha1.PodChaperon{}, IndexAwaitingRecreation,
		awaitingRecreationIndex); err != nil {
		return fmt.Errorf("indexing PodChaperons by %s: %w", IndexAwaitingRecreation, err)
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named(ControllerName).
		For(&v1alpha1.PodChaperon{}, builder.WithPredicates(r.chaperonChanged())).
		Owns(&corev1.Pod{}, builder.WithPredicates(podChanged())).
		Watches(&v1alpha1.Source{}, handler.EnqueueRequestsFromMapFunc(r.chaperonsOfSource)).
		Watches(&v1alpha1.ClusterSource{}, handler.EnqueueRequestsFromMapFunc(r.chaperonsOfClusterSource)).
		Watches(&coordinationv1.Lease{}, handler.EnqueueRequestsFromMapFunc(r.chaperonsOfLease),
			builder.WithPredicates(isHeartbeatLease(), heartbeatChanged())).
		WithOptions(controller.Options{MaxConcurrentReconciles: r.MaxConcurrentReconciles}).
		Complete(r)
}

// defaults sets the zero settings to their defaults, once.
func (r *PodChaperonReconciler) defaults() { r.once.Do(r.setDefaults) }

func (r *PodChaperonReconciler) setDefaults() {
	if r.Recorder == nil {
		r.Recorder = &events.FakeRecorder{} // discards
	}
	if r.RetryInterval <= 0 {
		r.RetryInterval = DefaultRetryInterval
	}
	if r.RejectedBackoffInitial <= 0 {
		r.RejectedBackoffInitial = DefaultRejectedBackoffInitial
	}
	if r.RejectedBackoffMax <= 0 {
		r.RejectedBackoffMax = DefaultRejectedBackoffMax
	}
	if r.MaxConcurrentReconciles <= 0 {
		r.MaxConcurrentReconciles = DefaultMaxConcurrentReconciles
	}
	if r.RecreateDelay <= 0 {
		r.RecreateDelay = DefaultRecreateDelay
	}
	if r.Clock == nil {
		r.Clock = clock.RealClock{}
	}
	if r.APIReader == nil {
		r.APIReader = r.Client
	}
	if r.backoff == nil {
		r.backoff = workqueue.NewTypedItemExponentialFailureRateLimiter[types.NamespacedName](r.RejectedBackoffInitial, r.RejectedBackoffMax)
	}
}

// Reconcile creates the chaperon's pod if it was never created, and
// mirrors the pod onto the chaperon's status.
func (r *PodChaperonReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	r.defaults()
	ch := &v1alpha1.PodChaperon{}
	if err := r.Client.Get(ctx, req.NamespacedName, ch); err != nil {
		if apierrors.IsNotFound(err) {
			r.backoff.Forget(req.NamespacedName)
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, err
	}
	if r.writes.wait(ch.UID, ch.ResourceVersion, r.Clock.Now()) {
		// The cache has not shown our last status write yet: the event
		// that does brings the chaperon back (chaperonChanged), and so
		// does the requeue if a relist skipped it.
		return ctrl.Result{RequeueAfter: waitForOwnWrite}, nil
	}
	res, err := r.sync(ctx, ch, false)
	if !errors.Is(err, errStatusMoved) {
		return res, err
	}
	// The status changed since the cache's version (another manager's
	// write while two leaders overlapped, or ours the cache had not
	// shown): decide again on the chaperon as the API server has it.
	ctrl.LoggerFrom(ctx).V(1).Info("Status write refused on a changed status; reconciling again from the API server")
	ch = &v1alpha1.PodChaperon{}
	if err := r.APIReader.Get(ctx, req.NamespacedName, ch); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	return r.sync(ctx, ch, true)
}

// deletePod deletes the pod of a chaperon being deleted at once, whatever
// the garbage collector knows yet (it learns new kinds late), so that a
// loser candidate never lingers: with the grace period the source passed
// (its proxy's delete named one, AnnotationDeletionGracePeriod), else the
// pod's own. A pod already going with a longer grace period than the one
// passed is deleted again with it (a grace period only ever shortens).
// This controller created it.
func (r *PodChaperonReconciler) deletePod(ctx context.Context, ch *v1alpha1.PodChaperon, pod *corev1.Pod) error {
	opts := []client.DeleteOption{client.Preconditions{UID: &pod.UID}}
	grace, passed := DeletionGrace(ch)
	switch {
	case pod.DeletionTimestamp.IsZero():
	case passed && pod.DeletionGracePeriodSeconds != nil && *pod.DeletionGracePeriodSeconds > grace:
	default:
		return nil
	}
	if passed {
		opts = append(opts, client.GracePeriodSeconds(grace))
	}
	err := r.Client.Delete(ctx, pod, opts...)
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("deleting the pod of deleted chaperon %s: %w", client.ObjectKeyFromObject(ch), err)
	}
	return nil
}

// release removes fleetlet's finalizer (v1alpha1.FinalizerDelegatePod)
// from a chaperon being deleted whose pod is gone from the cache, or was
// never its own: the chaperon goes. The cache's word is enough: a pod it
// has not shown yet is still the chaperon's dependent, which the garbage
// collector deletes after it, and the source confirms the pod gone before
// its proxy goes.
func (r *PodChaperonReconciler) release(ctx context.Context, ch *v1alpha1.PodChaperon) error {
	patch, ok := proxy.RemoveFinalizerPatch(ch.UID, ch.Finalizers, v1alpha1.FinalizerDelegatePod)
	if !ok {
		return nil
	}
	err := r.Client.Patch(ctx, ch, client.RawPatch(types.JSONPatchType, patch), client.FieldOwner(FieldOwner))
	if err != nil && !apierrors.IsNotFound(err) {
		// Its finalizers moved (Invalid: the test failed): again, from
		// the cache, with backoff.
		return fmt.Errorf("removing %s from PodChaperon %s: %w", v1alpha1.FinalizerDelegatePod, klog.KObj(ch), err)
	}
	return nil
}

// maxDeletionGrace bounds the grace period a source may pass: what a pod's
// own may be, in practice (a year).
const maxDeletionGrace = 365 * 24 * 60 * 60

// DeletionGrace reads the grace period the source passed on a chaperon
// (AnnotationDeletionGracePeriod); false when there is none, or it is not
// a number of seconds from 0 to a year (ignored: the pod's own applies).
func DeletionGrace(ch *v1alpha1.PodChaperon) (int64, bool) {
	v, ok := ch.Annotations[v1alpha1.AnnotationDeletionGracePeriod]
	if !ok {
		return 0, false
	}
	g, err := strconv.ParseInt(v, 10, 64)
	if err != nil || g < 0 || g > maxDeletionGrace {
		return 0, false
	}
	return g, true
}

// outcome is what one pass decided: the PodCreated condition to set (nil:
// leave it), the pod to mirror (nil: none), and when to come back.
type outcome struct {
	cond *metav1.Condition
	pod  *corev1.Pod
	// behind: the pod is not yet at the chaperon's generation (update.go);
	// status.observedGeneration stays where it was.
	behind bool
	result ctrl.Result
	err    error
}

// sync decides, from ch and its pod, what to do, does it and writes the
// status. live says ch was read from the API server, not the cache.
func (r *PodChaperonReconciler) sync(ctx context.Context, ch *v1alpha1.PodChaperon, live bool) (ctrl.Result, error) {
	key := client.ObjectKeyFromObject(ch)
	pod, err := getPod(ctx, r.Client, key)
	if err != nil {
		return ctrl.Result{}, err
	}
	created := wasCreated(ch)
	if pod != nil {
		r.pods.shown(ch.UID)
	} else if !created && ch.DeletionTimestamp.IsZero() && r.pods.lately(ch.UID, r.Clock.Now()) {
		// Created by this controller a moment ago, not in the cache yet:
		// the pod's event brings the chaperon back.
		return ctrl.Result{RequeueAfter: waitForOwnWrite}, nil
	}
	if pod == nil && created && ch.DeletionTimestamp.IsZero() {
		// Recorded as created but not in the cache: deleted, or created so
		// recently that the cache has not seen it yet. Ask the API server.
		// Not for a chaperon being deleted: nothing is created for it, and
		// a pod the cache has not seen yet brings it back here when it does.
		if pod, err = getPod(ctx, r.APIReader, key); err != nil {
			return ctrl.Result{}, err
		}
	}
	if pod == nil && !created && ch.DeletionTimestamp.IsZero() && !live && r.cacheMayBeBehind(ch) {
		// About to create the pod: make sure the record that says it never
		// was is current, not a cache that has not seen our last write.
		fresh := &v1alpha1.PodChaperon{}
		if err := r.APIReader.Get(ctx, key, fresh); err != nil {
			return ctrl.Result{}, client.IgnoreNotFound(err)
		}
		ch = fresh
		if created = wasCreated(ch); created {
			if pod, err = getPod(ctx, r.APIReader, key); err != nil {
				return ctrl.Result{}, err
			}
		}
	}

	if !ch.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, r.whileDeleted(ctx, ch, pod)
	}

	var out outcome
	switch {
	case isDeletedRecord(ch) && pod == nil:
		// The pod was created and deleted: it stays gone, unless it is a
		// delegate whose source is unreachable (see afterDeletion).
		out, ch = r.afterDeletion(ctx, ch, deletedAt(ch))
	case isDeletedRecord(ch) && recreatedSince(ch, pod):
		// This controller created it again after the deletion, and the
		// record of that was not written (a conflict): written now, or
		// the source would take its delegate for gone.
		out = outcome{cond: heldConditionFor(ch, pod), pod: pod}
	case isDeletedRecord(ch):
		// A pod of that name that is not ours: nothing is created again.
	case pod != nil && isHeldBy(pod, ch):
		pod, current, res, err := r.update(ctx, ch, pod)
		out = outcome{cond: heldConditionFor(ch, pod), pod: pod, behind: !current, result: res, err: err}
	case pod != nil && created:
		out.cond = deletedCondition(fmt.Sprintf(" A pod named %s that this chaperon does not own now exists; it is left alone.", pod.Name))
	case pod != nil:
		out.cond = notOwnedCondition(pod.Name)
		out.result = ctrl.Result{RequeueAfter: r.RetryInterval}
	case created:
		// Seen deleted now, to the second, as lastTransitionTime keeps it.
		out, ch = r.afterDeletion(ctx, ch, r.Clock.Now().Truncate(time.Second))
	default:
		out = r.create(ctx, ch, nil)
	}
	if err := r.writeStatus(ctx, ch, out); err != nil {
		return ctrl.Result{}, errors.Join(out.err, err)
	}
	return out.result, out.err
}

// whileDeleted deletes the pod of a chaperon being deleted, or lets the
// chaperon go once its pod is gone: nothing else. Its status is not
// written any more (no pass updates a pod that is going, and its going is
// no news: the source reads the pod itself while it is there, and waits
// for the chaperon to go), so a delegate's deletion costs its target no
// status write.
func (r *PodChaperonReconciler) whileDeleted(ctx context.Context, ch *v1alpha1.PodChaperon, pod *corev1.Pod) error {
	if pod != nil && isHeldBy(pod, ch) {
		return r.deletePod(ctx, ch, pod)
	}
	if proxy.FinalizerIndex(ch.Finalizers, v1alpha1.FinalizerDelegatePod) >= 0 {
		return r.release(ctx, ch)
	}
	return nil
}

// create creates ch's pod as its source's ServiceAccount; again, because
// its source is unreachable, when rec is set.
func (r *PodChaperonReconciler) create(ctx context.Context, ch *v1alpha1.PodChaperon, rec *recreation) outcome {
	log := ctrl.LoggerFrom(ctx)
	key := client.ObjectKeyFromObject(ch)
	if err := checkLabels(ch); err != nil {
		return outcome{cond: falseCondition(ReasonInvalidChaperon, err.Error())}
	}
	id, err := resolveSource(ctx, r.Client, ch)
	if werr := (*waitError)(nil); errors.As(err, &werr) {
		return outcome{cond: falseCondition(werr.reason, werr.message), result: ctrl.Result{RequeueAfter: r.RetryInterval}}
	}
	if err != nil {
		return outcome{err: err}
	}
	c, err := r.Impersonator.ClientFor(id.userName())
	if err != nil {
		return outcome{err: err}
	}

	pod := BuildPod(ch)
	log.Info("Creating pod as the source's ServiceAccount", "pod", klog.KObj(pod), "user", id.userName(), "source", id.kind+"/"+id.name)
	err = c.Create(ctx, pod, client.FieldOwner(FieldOwner))
	switch {
	case err == nil && rec != nil:
		r.backoff.Forget(key)
		r.Recorder.Eventf(ch, pod, corev1.EventTypeNormal, ReasonDelegateRecreated, "Create",
			"Created pod %s again as %s: the delegate was deleted while its source (%s) was unreachable (heartbeat Lease %s expired at %s)",
			pod.Name, id.userName(), rec.source, rec.lease, rec.expired.UTC().Format(time.RFC3339))
		return outcome{cond: recreatedCondition(pod, *rec), pod: pod}

	case err == nil:
		// No Event: every candidate of every proxy is created here, most
		// of them to lose; the log says it, and the PodCreated condition
		// once the pod has news (recordWaits).
		r.backoff.Forget(key)
		r.pods.created(ch.UID, r.Clock.Now())
		return outcome{cond: heldCondition(pod), pod: pod}

	case apierrors.IsAlreadyExists(err):
		// Ours, not yet in the cache (created before our record was
		// written), or someone else's.
		existing, gerr := getPod(ctx, r.APIReader, key)
		if gerr != nil {
			return outcome{err: gerr}
		}
		if existing == nil {
			return outcome{err: fmt.Errorf("pod %s already exists, then not found: retrying", key)}
		}
		if isHeldBy(existing, ch) {
			log.Info("Pod already exists and is held by this chaperon", "pod", klog.KObj(existing))
			return outcome{cond: heldCondition(existing), pod: existing}
		}
		return outcome{cond: notOwnedCondition(key.Name), result: ctrl.Result{RequeueAfter: r.RetryInterval}}

	case isRejection(err):
		delay := r.backoff.When(key)
		log.Info("The target refused the pod; retrying later", "pod", klog.KObj(pod), "user", id.userName(), "retryAfter", delay, "reason", err.Error())
		return outcome{cond: falseCondition(ReasonPodRejected, err.Error()), result: ctrl.Result{RequeueAfter: delay}}

	default:
		return outcome{err: fmt.Errorf("creating pod %s as %s: %w", key, id.userName(), err)}
	}
}

// isRejection reports whether err is the API server's answer to a create
// (RBAC, Pod Security, quota, admission policies and webhooks,
// validation), as opposed to a transient failure to get one.
func isRejection(err error) bool {
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		return false
	}
	return !apierrors.IsTooManyRequests(err) && !apierrors.IsServerTimeout(err) && !apierrors.IsTimeout(err) &&
		!apierrors.IsServiceUnavailable(err)
}

// writeStatus applies out to ch's status and writes it when it changed,
// with ch's resourceVersion as precondition, then records an Event for a
// PodCreated condition that turned False or changed its reason or message.
func (r *PodChaperonReconciler) writeStatus(ctx context.Context, ch *v1alpha1.PodChaperon, out outcome) error {
	before := meta.FindStatusCondition(ch.Status.Conditions, v1alpha1.ConditionPodCreated)
	if before != nil {
		before = before.DeepCopy()
	}
	want := ch.DeepCopy()
	status := &want.Status
	if !out.behind {
		status.ObservedGeneration = ch.Generation
	}
	if out.cond != nil {
		cond := *out.cond
		cond.ObservedGeneration = ch.Generation
		if cond.LastTransitionTime.IsZero() { // used only if the status changes
			cond.LastTransitionTime = metav1.NewTime(r.Clock.Now().Truncate(time.Second))
		}
		cond.Message = truncate(cond.Message)
		meta.SetStatusCondition(&status.Conditions, cond)
	} else if c := meta.FindStatusCondition(status.Conditions, v1alpha1.ConditionPodCreated); c != nil {
		c.ObservedGeneration = ch.Generation
	}
	if out.pod != nil {
		status.PodStatus = *out.pod.Status.DeepCopy()
	}
	status.NodeName = nodeName(want, out.pod)
	if equality.Semantic.DeepEqual(ch.Status, want.Status) || recordWaits(ch, out) {
		return nil
	}
	if err := r.patchStatus(ctx, ch, want); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("writing the status of PodChaperon %s: %w", klog.KObj(ch), err)
	}
	r.writes.wrote(ch.UID, want.ResourceVersion, r.Clock.Now())
	after := meta.FindStatusCondition(want.Status.Conditions, v1alpha1.ConditionPodCreated)
	if after != nil && after.Status == metav1.ConditionFalse &&
		(before == nil || before.Status != after.Status || before.Reason != after.Reason || before.Message != after.Message) {
		r.Recorder.Eventf(ch, nil, corev1.EventTypeWarning, after.Reason, "Create", "%s", after.Message)
	}
	return nil
}

// nodeName is where the pod runs, once bound; a deleted pod keeps the last
// one known. ch carries the status being written, with its new condition.
// A reservation is not mirrored: the candidate scheduler's annotation says
// it already, and every candidate would cost its target a status write
// more for it.
func nodeName(ch *v1alpha1.PodChaperon, pod *corev1.Pod) string {
	if pod != nil && pod.Spec.NodeName != "" {
		return pod.Spec.NodeName
	}
	if pod == nil && isDeletedRecord(ch) {
		return ch.Status.NodeName
	}
	return ""
}

// wasCreated reports whether ch records that its pod was created: its
// status says so (PodCreated is True, or False because the pod was
// deleted), or its source marked it elected. Only this controller writes
// a chaperon's status (sources may only read it), so a source cannot erase
// that record to have a pod created again; and no source removes its mark.
//
// The mark is the record of a candidate's pod until its status is
// written (recordWaits): a source marks only a candidate the candidate
// scheduler reserved a node for, whose pod exists, and that scheduler
// binds only a marked candidate. So a pod that may have run is always
// recorded; one deleted before its mark never ran, and is created again.
func wasCreated(ch *v1alpha1.PodChaperon) bool {
	c := meta.FindStatusCondition(ch.Status.Conditions, v1alpha1.ConditionPodCreated)
	if c != nil && (c.Status == metav1.ConditionTrue || c.Reason == ReasonPodDeleted) {
		return true
	}
	return isElected(ch)
}

// recordWaits reports whether the status write out asks for can wait: it
// would only record that a pod no one has touched yet was created, on a
// chaperon whose status was never written, at its first generation. That
// write was every candidate's, and a losing candidate's only one (a
// third of its target's chaperon writes with a candidate in every
// target); the first news of the pod (bound, unschedulable, started)
// writes the record with it, and the source's mark stands for it until
// then (wasCreated). A candidate's pod deleted before either is created
// again: it never ran.
func recordWaits(ch *v1alpha1.PodChaperon, out outcome) bool {
	if out.cond == nil || out.pod == nil || out.behind || ch.Generation > 1 ||
		out.cond.Status != metav1.ConditionTrue || out.cond.Reason != ReasonPodCreated ||
		meta.FindStatusCondition(ch.Status.Conditions, v1alpha1.ConditionPodCreated) != nil {
		return false
	}
	return untouched(out.pod)
}

// untouched reports whether no scheduler or kubelet has written to pod yet.
func untouched(pod *corev1.Pod) bool {
	st := &pod.Status
	return pod.Spec.NodeName == "" && st.NominatedNodeName == "" && st.StartTime == nil &&
		len(st.Conditions) == 0 && len(st.ContainerStatuses) == 0 && len(st.InitContainerStatuses) == 0 &&
		(st.Phase == "" || st.Phase == corev1.PodPending)
}

// recreatedSince reports whether pod is one ch holds, alive and created
// at or after the deletion ch records: only this controller creates such a
// pod, when it creates a delegate again.
func recreatedSince(ch *v1alpha1.PodChaperon, pod *corev1.Pod) bool {
	return ch.DeletionTimestamp.IsZero() && pod != nil && isHeldBy(pod, ch) && pod.DeletionTimestamp.IsZero() &&
		!pod.CreationTimestamp.Time.Before(deletedAt(ch))
}

// isDeletedRecord reports whether ch records that its pod was deleted.
func isDeletedRecord(ch *v1alpha1.PodChaperon) bool {
	c := meta.FindStatusCondition(ch.Status.Conditions, v1alpha1.ConditionPodCreated)
	return c != nil && c.Status == metav1.ConditionFalse && c.Reason == ReasonPodDeleted
}

func heldCondition(pod *corev1.Pod) *metav1.Condition {
	return &metav1.Condition{
		Type:    v1alpha1.ConditionPodCreated,
		Status:  metav1.ConditionTrue,
		Reason:  ReasonPodCreated,
		Message: fmt.Sprintf("Pod %s (uid %s) is held by this chaperon", pod.Name, pod.UID),
	}
}

func deletedCondition(more string) *metav1.Condition {
	return falseCondition(ReasonPodDeleted,
		"The pod this chaperon held was deleted; fleetlet does not create it again (deleting a delegate deletes its proxy pod, whose controller makes a new one)."+more)
}

func notOwnedCondition(name string) *metav1.Condition {
	return falseCondition(ReasonPodNotOwned, fmt.Sprintf(
		"Pod %s exists and is not owned by this chaperon: fleetlet leaves it alone, and creates this chaperon's pod only once that one is gone", name))
}

func falseCondition(reason, message string) *metav1.Condition {
	return &metav1.Condition{Type: v1alpha1.ConditionPodCreated, Status: metav1.ConditionFalse, Reason: reason, Message: message}
}

func truncate(s string) string {
	if len(s) <= maxMessageLength {
		return s
	}
	return strings.ToValidUTF8(s[:maxMessageLength-3], "") + "..."
}

// getPod reads the pod of key; nil when there is none.
func getPod(ctx context.Context, c client.Reader, key types.NamespacedName) (*corev1.Pod, error) {
	pod := &corev1.Pod{}
	if err := c.Get(ctx, key, pod); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("reading pod %s: %w", key, err)
	}
	return pod, nil
}

// chaperonChanged passes the chaperon events that can change what to do:
// not our own status writes, unless a pass waits for the cache to show one.
// Every event tells r.writes which version the cache shows (so it keeps
// only the writes the cache has not shown yet).
func (r *PodChaperonReconciler) chaperonChanged() predicate.Predicate {
	return predicate.Funcs{
		DeleteFunc: func(e event.DeleteEvent) bool {
			r.writes.forget(e.Object.GetUID())
			r.pods.shown(e.Object.GetUID())
			return true
		},
		UpdateFunc: func(e event.UpdateEvent) bool {
			o, n := e.ObjectOld, e.ObjectNew
			return r.writes.seen(n.GetUID(), n.GetResourceVersion()) ||
				o.GetGeneration() != n.GetGeneration() ||
				!maps.Equal(o.GetLabels(), n.GetLabels()) ||
				!maps.Equal(o.GetAnnotations(), n.GetAnnotations()) ||
				o.GetDeletionTimestamp().IsZero() != n.GetDeletionTimestamp().IsZero()
		},
	}
}

// podChanged passes the pod events that change what is mirrored.
func podChanged() predicate.Predicate {
	return predicate.Funcs{
		UpdateFunc: func(e event.UpdateEvent) bool {
			o, ok1 := e.ObjectOld.(*corev1.Pod)
			n, ok2 := e.ObjectNew.(*corev1.Pod)
			if !ok1 || !ok2 {
				return true
			}
			return o.Spec.NodeName != n.Spec.NodeName ||
				o.DeletionTimestamp.IsZero() != n.DeletionTimestamp.IsZero() ||
				!equality.Semantic.DeepEqual(o.OwnerReferences, n.OwnerReferences) ||
				!equality.Semantic.DeepEqual(o.Status, n.Status)
		},
	}
}

// chaperonsOfSource maps a Source to the chaperons of its namespace that
// name it and still wait for their pod, or for their deleted delegate to
// be created again.
func (r *PodChaperonReconciler) chaperonsOfSource(ctx context.Context, obj client.Object) []reconcile.Request {
	return r.waiting(ctx, obj.GetName(), client.InNamespace(obj.GetNamespace()))
}

// chaperonsOfClusterSource maps a ClusterSource to the chaperons of every
// namespace that name it and still wait for their pod.
func (r *PodChaperonReconciler) chaperonsOfClusterSource(ctx context.Context, obj client.Object) []reconcile.Request {
	return r.waiting(ctx, obj.GetName())
}

func (r *PodChaperonReconciler) waiting(ctx context.Context, sourceName string, opts ...client.ListOption) []reconcile.Request {
	var list v1alpha1.PodChaperonList
	opts = append(opts, client.MatchingLabels{v1alpha1.LabelParentCluster: sourceName})
	if err := r.Client.List(ctx, &list, opts...); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Listing the chaperons of a source", "source", sourceName)
		return nil
	}
	var reqs []reconcile.Request
	for i := range list.Items {
		if ch := &list.Items[i]; !wasCreated(ch) || awaitsRecreation(ch) {
			reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(ch)})
		}
	}
	return reqs
}
