package candidate

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/metadata/metadatainformer"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/utils/clock"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
)

// Name is the name of the plugin in scheduler profiles.
const Name = "candidate"

// Retries of a decision whose waiting pod the framework has not registered
// yet, or whose chaperon could not be read: from decideRetryBase doubling
// up to decideRetryMax, given up after maxDecideRetries attempts (the
// Permit timeout still ends the wait).
const (
	decideRetryBase  = 5 * time.Millisecond
	decideRetryMax   = 5 * time.Second
	maxDecideRetries = 20
)

// frameworkHandle is the part of the scheduling framework's handle the
// plugin uses once built; fwk.Handle has it, tests fake it.
type frameworkHandle interface {
	GetWaitingPod(uid types.UID) fwk.WaitingPod
	Activate(logger klog.Logger, pods map[string]*corev1.Pod)
}

// podGetter reads a pod from the scheduler's pod informer.
type podGetter func(namespace, name string) (*corev1.Pod, error)

// Plugin is the candidate plugin. See the package documentation.
type Plugin struct {
	args         *Args
	handle       frameworkHandle
	api          chaperonAPI
	cache        chaperonCache
	pod          podGetter
	clock        clock.PassiveClock
	reservations *reservations
	waiters      *waiters
	decisions    workqueue.TypedRateLimitingInterface[types.UID]
}

var (
	_ fwk.PreEnqueuePlugin  = &Plugin{}
	_ fwk.ReservePlugin     = &Plugin{}
	_ fwk.PermitPlugin      = &Plugin{}
	_ fwk.EnqueueExtensions = &Plugin{}
)

// New is the plugin's factory, to register with the scheduler
// (app.WithPlugin(candidate.Name, candidate.New)). It starts a metadata
// informer on PodChaperons through h.KubeConfig() and the plugin's workers;
// they stop when ctx ends.
func New(ctx context.Context, obj runtime.Object, h fwk.Handle) (fwk.Plugin, error) {
	args, err := DecodeArgs(obj)
	if err != nil {
		return nil, err
	}
	if h.KubeConfig() == nil {
		return nil, errors.New("the candidate plugin needs the scheduler's kubeconfig")
	}
	cfg := rest.CopyConfig(h.KubeConfig())
	cfg.UserAgent = "fleetlet-scheduler/" + Name
	client, err := metadata.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("creating the PodChaperon client: %w", err)
	}
	informer := metadatainformer.NewFilteredMetadataInformer(client, chaperonResource, metav1.NamespaceAll, 0, cache.Indexers{}, nil).Informer()
	if err := informer.SetTransform(stripManagedFields); err != nil {
		return nil, err
	}
	pods := h.SharedInformerFactory().Core().V1().Pods().Lister()
	p := newPlugin(args, h, metadataAPI{client: client}, informerCache{informer: informer},
		func(namespace, name string) (*corev1.Pod, error) { return pods.Pods(namespace).Get(name) }, clock.RealClock{})

	log := klog.FromContext(ctx).WithName(Name)
	ctx = klog.NewContext(ctx, log)
	if _, err := informer.AddEventHandlerWithOptions(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { p.onChaperon(ctx, nil, obj) },
		UpdateFunc: func(old, obj any) { p.onChaperon(ctx, old, obj) },
		DeleteFunc: func(obj any) { p.onChaperonDeleted(obj) },
	}, cache.HandlerOptions{Logger: &log}); err != nil {
		return nil, fmt.Errorf("watching PodChaperons: %w", err)
	}
	go informer.RunWithContext(ctx)
	go p.run(ctx, informer.HasSynced)
	log.V(1).Info("Started the candidate plugin", "permitTimeout", args.PermitTimeout.Duration,
		"apiTimeout", args.APITimeout.Duration, "reservationWorkers", *args.ReservationWorkers)
	return p, nil
}

// newPlugin builds the plugin on its dependencies, without starting it.
func newPlugin(args *Args, h frameworkHandle, api chaperonAPI, c chaperonCache, pod podGetter, clk clock.WithTicker) *Plugin {
	registerMetrics()
	return &Plugin{
		args:         args,
		handle:       h,
		api:          api,
		cache:        c,
		pod:          pod,
		clock:        clk,
		reservations: newReservations(api, c, args.APITimeout.Duration, clk),
		waiters:      newWaiters(),
		decisions: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedItemExponentialFailureRateLimiter[types.UID](decideRetryBase, decideRetryMax),
			workqueue.TypedRateLimitingQueueConfig[types.UID]{Name: "fleetlet_candidate_decisions", Clock: clk}),
	}
}

// run runs the reservation writers and the decision worker until ctx ends.
// Once the cache has synced it reconsiders every waiting candidate: those
// that waited on a live read while the cache was filling may have lost
// their chaperon without an event to say so.
func (p *Plugin) run(ctx context.Context, hasSynced cache.InformerSynced) {
	go p.reservations.run(ctx, int(*p.args.ReservationWorkers))
	go func() {
		defer p.decisions.ShutDown()
		<-ctx.Done()
	}()
	go func() {
		if cache.WaitForCacheSync(ctx.Done(), hasSynced) {
			for _, uid := range p.waiters.all() {
				p.decisions.Add(uid)
			}
		}
	}()
	for p.decideNext(ctx) {
	}
}

// Name returns the plugin's name.
func (p *Plugin) Name() string { return Name }

// EventsToRegister registers no cluster event. A candidate this plugin
// rejected either lost (its chaperon is gone, and the garbage collector
// deletes it) or waited past the Permit timeout; the plugin's own watch on
// chaperons activates the latter the moment its chaperon is elected, and the
// scheduler's periodic flush of unschedulable pods retries it in any case,
// renewing its reservation. Registering the PodChaperon resource instead
// would make the scheduler keep a second, full copy of every chaperon.
func (p *Plugin) EventsToRegister(context.Context) ([]fwk.ClusterEventWithHint, error) {
	return nil, nil
}

// PreEnqueue keeps out of the scheduling queue a candidate that is being
// deleted, or whose chaperon the plugin knows is gone. Deleting a pod that
// is not bound first sets its deletionTimestamp, and that update would
// bring a loser back to the queue only for the scheduler to skip it with a
// FailedScheduling Event ("skip schedule deleting pod"). Kept out, it waits
// gated, with nothing written, until it is gone.
func (p *Plugin) PreEnqueue(_ context.Context, pod *corev1.Pod) *fwk.Status {
	ref, ok := chaperonOf(pod)
	switch {
	case !ok:
		return nil
	case pod.DeletionTimestamp != nil:
		return fwk.NewStatus(fwk.UnschedulableAndUnresolvable, msgPodDeleting)
	case p.reservations.isGone(ref):
		return fwk.NewStatus(fwk.UnschedulableAndUnresolvable, msgChaperonGone)
	}
	return nil
}

// Reserve records the candidate's reservation on its chaperon
// (multicluster.fleetlet.io/reserved=<node>) without waiting for the API
// server: the write is queued and retried by the plugin's workers.
func (p *Plugin) Reserve(ctx context.Context, _ fwk.CycleState, pod *corev1.Pod, nodeName string) *fwk.Status {
	ref, ok := chaperonOf(pod)
	if !ok {
		return nil
	}
	klog.FromContext(ctx).V(4).Info("Reserving", "pod", klog.KObj(pod), "podChaperon", ref.key, "node", nodeName)
	p.reservations.reserve(ref, nodeName)
	return nil
}

// Unreserve voids the candidate's reservation on nodeName (queued like
// Reserve's; the annotation is removed only if it still names nodeName) and
// forgets the candidate's wait.
func (p *Plugin) Unreserve(ctx context.Context, _ fwk.CycleState, pod *corev1.Pod, nodeName string) {
	ref, ok := chaperonOf(pod)
	if !ok {
		return
	}
	if w, ok := p.waiters.remove(pod.UID); ok {
		waitsTotal.WithLabelValues(waitEnded).Inc()
		waitDuration.WithLabelValues(waitEnded).Observe(p.clock.Since(w.since).Seconds())
	}
	klog.FromContext(ctx).V(4).Info("Unreserving", "pod", klog.KObj(pod), "podChaperon", ref.key, "node", nodeName)
	p.reservations.unreserve(ref, nodeName)
}

// Permit reads the candidate's chaperon: elected, the candidate may bind at
// once (this is what lets a restarted scheduler bind an elected candidate);
// gone or being deleted, it is rejected; otherwise it waits, up to the
// Permit timeout, for the plugin's watch to allow or reject it.
func (p *Plugin) Permit(ctx context.Context, _ fwk.CycleState, pod *corev1.Pod, nodeName string) (*fwk.Status, time.Duration) {
	ref, ok := chaperonOf(pod)
	if !ok {
		return nil, 0
	}
	log := klog.FromContext(ctx).WithValues("pod", klog.KObj(pod), "podChaperon", ref.key, "node", nodeName)
	// Registered before the chaperon is read, so that a change after the
	// read always reaches this candidate through the watch.
	p.waiters.add(pod.UID, waiter{pod: types.NamespacedName{Namespace: pod.Namespace, Name: pod.Name}, ref: ref, since: p.clock.Now()})
	v, msg, err := p.lookup(ctx, ref)
	if err != nil {
		p.waiters.remove(pod.UID)
		permitTotal.WithLabelValues(permitError).Inc()
		return fwk.AsStatus(fmt.Errorf("reading %s: %w", ref, err)), 0
	}
	switch v {
	case verdictElected:
		p.waiters.remove(pod.UID)
		permitTotal.WithLabelValues(permitElected).Inc()
		log.V(2).Info("Candidate already elected: allowed")
		return nil, 0
	case verdictGone:
		p.waiters.remove(pod.UID)
		if msg != msgChaperonDeleting {
			p.reservations.markGone(ref)
		}
		permitTotal.WithLabelValues(permitRejected).Inc()
		log.V(2).Info("Candidate lost: rejected", "reason", msg)
		return fwk.NewStatus(fwk.Unschedulable, msg), 0
	}
	permitTotal.WithLabelValues(permitWaiting).Inc()
	log.V(3).Info("Candidate reserved: waiting for the election", "timeout", p.args.PermitTimeout.Duration)
	return fwk.NewStatus(fwk.Wait, "waiting for the source cluster's election"), p.args.PermitTimeout.Duration
}

// lookup returns the chaperon's verdict: gone if the watch saw it deleted,
// else from the cache when it has synced. A verdict that rests on the
// chaperon's absence from the cache (or a different UID there) is checked
// with a read from the API server, because the cache may not have seen a
// chaperon created a moment ago; that read is the only API call on Permit's
// path, made only for candidates about to be rejected.
func (p *Plugin) lookup(ctx context.Context, ref chaperonRef) (verdict, string, error) {
	if p.reservations.isGone(ref) {
		return verdictGone, msgChaperonGone, nil
	}
	if p.cache.synced() {
		v, msg, confirm := judge(p.cache.get(ref.key), ref)
		if !confirm {
			return v, msg, nil
		}
	}
	ctx, cancel := context.WithTimeout(ctx, p.args.APITimeout.Duration)
	defer cancel()
	ch, err := p.api.get(ctx, ref.key)
	switch {
	case apierrors.IsNotFound(err):
		ch = nil
	case err != nil:
		return verdictWait, "", err
	}
	v, msg, _ := judge(ch, ref)
	return v, msg, nil
}

// onChaperon handles a chaperon added or updated in the cache: its waiting
// candidates are reconsidered, and a candidate not waiting (it waited past
// the Permit timeout) is sent back to the active queue once elected.
func (p *Plugin) onChaperon(ctx context.Context, oldObj, obj any) {
	ch, ok := chaperonFromEvent(obj)
	if !ok {
		return
	}
	key := types.NamespacedName{Namespace: ch.Namespace, Name: ch.Name}
	uids := p.waiters.forChaperon(key)
	for _, uid := range uids {
		p.decisions.Add(uid)
	}
	if len(uids) > 0 || ch.Annotations[v1alpha1.AnnotationElected] != "true" {
		return
	}
	if old, ok := chaperonFromEvent(oldObj); ok && old.UID == ch.UID && old.Annotations[v1alpha1.AnnotationElected] == "true" {
		return // it was elected before: nothing new
	}
	p.activate(ctx, key, ch.UID)
}

// onChaperonDeleted handles a chaperon deleted: its waiting candidates are
// reconsidered (and rejected), and what the plugin knew of it is dropped.
func (p *Plugin) onChaperonDeleted(obj any) {
	ch, ok := chaperonFromEvent(obj)
	if !ok {
		return
	}
	key := types.NamespacedName{Namespace: ch.Namespace, Name: ch.Name}
	p.reservations.forget(key)
	for _, uid := range p.waiters.forChaperon(key) {
		// The watch saw it deleted: its candidates are rejected without
		// asking the API server again.
		if w, ok := p.waiters.get(uid); ok && w.ref.uid == ch.UID {
			p.reservations.markGone(w.ref)
		}
		p.decisions.Add(uid)
	}
}

// activate moves the elected chaperon's pending candidate to the active
// queue, so that it does not sit out the unschedulable pods' flush interval.
func (p *Plugin) activate(ctx context.Context, key types.NamespacedName, uid types.UID) {
	pod, err := p.pod(key.Namespace, key.Name)
	if err != nil || pod.Spec.NodeName != "" {
		return
	}
	if ref, ok := chaperonOf(pod); !ok || ref.key != key || ref.uid != uid {
		return
	}
	log := klog.FromContext(ctx)
	log.V(3).Info("Chaperon elected: activating its candidate", "pod", klog.KObj(pod))
	p.handle.Activate(log, map[string]*corev1.Pod{key.String(): pod})
}

// decideNext takes the next candidate whose chaperon changed and allows or
// rejects it if the chaperon now says so. It returns false when the queue
// is shut down.
func (p *Plugin) decideNext(ctx context.Context) bool {
	uid, shutdown := p.decisions.Get()
	if shutdown {
		return false
	}
	defer p.decisions.Done(uid)
	w, ok := p.waiters.get(uid)
	if !ok {
		p.decisions.Forget(uid)
		return true
	}
	log := klog.FromContext(ctx).WithValues("pod", w.pod, "podChaperon", w.ref.key)
	v, msg, err := p.lookup(ctx, w.ref)
	if err != nil {
		p.retryDecision(log, uid, err)
		return true
	}
	if v == verdictWait {
		p.decisions.Forget(uid)
		return true
	}
	wp := p.handle.GetWaitingPod(uid)
	if wp == nil {
		// Permit answered Wait but the framework has not registered the
		// waiting pod yet.
		p.retryDecision(log, uid, nil)
		return true
	}
	p.decisions.Forget(uid)
	if _, ok := p.waiters.remove(uid); !ok {
		return true // Unreserve ended the wait meanwhile
	}
	waited := p.clock.Since(w.since).Seconds()
	if v == verdictElected {
		log.V(2).Info("Candidate elected: allowed", "waited", waited)
		waitsTotal.WithLabelValues(waitAllowed).Inc()
		waitDuration.WithLabelValues(waitAllowed).Observe(waited)
		wp.Allow(Name)
		return true
	}
	if msg != msgChaperonDeleting {
		p.reservations.markGone(w.ref)
	}
	log.V(2).Info("Candidate lost: rejected", "reason", msg, "waited", waited)
	waitsTotal.WithLabelValues(waitRejected).Inc()
	waitDuration.WithLabelValues(waitRejected).Observe(waited)
	wp.Reject(Name, msg)
	return true
}

func (p *Plugin) retryDecision(log klog.Logger, uid types.UID, err error) {
	if p.decisions.NumRequeues(uid) < maxDecideRetries {
		p.decisions.AddRateLimited(uid)
		return
	}
	p.decisions.Forget(uid)
	if err != nil {
		log.Error(err, "Reading the chaperon keeps failing; the candidate waits for the next change or the Permit timeout")
		return
	}
	log.Info("The candidate is not waiting at Permit; leaving it")
}
