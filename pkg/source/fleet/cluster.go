package fleet

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
	"github.com/fleetlet/fleetlet/pkg/proxy"
)

// Health is what the last probe of a target found.
type Health struct {
	// Ready is true when the target answered, accepted the credentials and
	// runs fleetlet.
	Ready bool
	// Reason and Message explain Ready, in the Target's condition terms.
	Reason  string
	Message string
	// LastProbe is when the target was last asked.
	LastProbe time.Time
}

// HeartbeatLeaseName is the Lease a source renews in each target, in the
// namespace of its identity there, so that the target can tell when its
// source is gone.
func HeartbeatLeaseName(sourceName string) string { return "fleetlet-source-" + sourceName }

// connection is what a Cluster is built from; two equal connections need no
// reconnect.
type connection struct {
	config *rest.Config
	// self is true for a target that is the source cluster itself.
	self bool
	// leaseNamespace is where the heartbeat Lease is renewed; empty for self.
	leaseNamespace string
	// fingerprint changes whenever anything that matters in config changes.
	fingerprint string
}

// Cluster is the live connection to one target cluster: a client with its own
// credentials, a probe loop with backoff, and the heartbeat Lease.
type Cluster struct {
	key    proxy.TargetKey
	conn   connection
	client client.Client
	opts   *Options
	clock  clock.Clock
	// notify is called (never blocking) when Health or the summary change.
	notify func(proxy.TargetKey)
	// onChaperon is called on every change of a chaperon, or of a pod one
	// holds, in the caches (the registry's hub).
	onChaperon func(proxy.TargetKey, *v1alpha1.PodChaperon)

	cancel context.CancelFunc
	done   chan struct{}

	// runCtx lives while the cluster runs; chaperon caches run in it.
	runCtx    context.Context
	cacheCfg  *rest.Config
	scheme    *runtime.Scheme
	cacheMu   sync.Mutex
	chaperons map[string]*chaperonCache
	cachesWG  sync.WaitGroup

	mu     sync.RWMutex
	health Health
	// turns counts the probe's readiness turning (Ready to NotReady or
	// back), so that a watcher that looks only after both still sees a
	// change (View.turns).
	turns   uint64
	summary *v1alpha1.ClusterSummaryStatus
	// summaryMoved is when, by this process's clock, the summary's
	// observedTime was last seen to change (the target's own clock is
	// never compared with ours).
	summaryMoved time.Time
	// wasStale is SummaryStale as of the last record, to notify when it
	// turns (time alone turns it, between two probes).
	wasStale bool
	// answers is when the target last answered any request of this
	// process (the probe loop's evidence that a slow target is there).
	answers *answers
	// refusal, when set, is what Health reports instead of the probe's:
	// the registry refused this registration (another one reaches the
	// same cluster).
	refusal *Health

	// draining is set once its Target is deleted (drain.go).
	draining atomic.Bool
	// storageClasses is the Target's spec.storageClasses.
	storageClasses atomic.Pointer[map[string]string]
	// priority is the Target's spec.priority.
	priority atomic.Int32
}

// Priority is the Target's spec.priority: pods go to the highest-priority
// target that can run them.
func (c *Cluster) Priority() int32 { return c.priority.Load() }

// StorageClasses is the Target's spec.storageClasses: the class a claim's
// copy gets there for each class of the source that is named otherwise.
func (c *Cluster) StorageClasses() map[string]string {
	if m := c.storageClasses.Load(); m != nil {
		return *m
	}
	return nil
}

// Draining reports whether the target's Target was deleted and is being
// emptied: no election goes there, and one standing there is run again.
func (c *Cluster) Draining() bool { return c.draining.Load() }

// Key names the Target this cluster stands for.
func (c *Cluster) Key() proxy.TargetKey { return c.key }

// Client talks to the target with the Target's credentials.
func (c *Cluster) Client() client.Client { return c.client }

// Config is the target's client configuration.
func (c *Cluster) Config() *rest.Config { return rest.CopyConfig(c.conn.config) }

// Self reports whether the target is the source cluster itself.
func (c *Cluster) Self() bool { return c.conn.self }

// Health returns what the last probe found, or why the registry refused
// this registration.
func (c *Cluster) Health() Health {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.refusal != nil {
		return *c.refusal
	}
	return c.health
}

// probeHealth is what the last probe found, refused or not.
func (c *Cluster) probeHealth() Health {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.health
}

// refuse makes Health report h (NotReady) until it is called with nil.
func (c *Cluster) refuse(h *Health) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.refusal = h
}

// SummaryStale reports whether the target's ClusterSummary has stopped being
// renewed for longer than Options.SummaryStaleAfter: the target's fleetlet
// is down, its chaperon controller too, so no new election should go
// there; what runs there keeps running. A summary without observedTime
// (an older fleetlet) is never stale.
func (c *Cluster) SummaryStale() bool {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.staleLocked()
}

func (c *Cluster) staleLocked() bool {
	if c.summary == nil || c.summary.ObservedTime == nil {
		return false
	}
	return c.clock.Since(c.summaryMoved) > c.opts.SummaryStaleAfter
}

// SchedulerDown reports whether the target's ClusterSummary says its
// candidate scheduler does not run (CandidateSchedulerRunning=False): no
// candidate there would be scheduled, so no new election should go there.
// A summary without the condition (an older fleetlet, or a scheduler
// without leader election) or with it Unknown says nothing.
func (c *Cluster) SchedulerDown() bool {
	return schedulerDown(c.Summary())
}

// schedulerCondition is the CandidateSchedulerRunning condition of a
// summary; nil without one.
func schedulerCondition(s *v1alpha1.ClusterSummaryStatus) *metav1.Condition {
	if s == nil {
		return nil
	}
	return meta.FindStatusCondition(s.Conditions, v1alpha1.ConditionCandidateScheduler)
}

func schedulerDown(s *v1alpha1.ClusterSummaryStatus) bool {
	cond := schedulerCondition(s)
	return cond != nil && cond.Status == metav1.ConditionFalse
}

// Summary returns the last ClusterSummary status read from the target, or
// nil before the first successful probe.
func (c *Cluster) Summary() *v1alpha1.ClusterSummaryStatus {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.summary
}

func newCluster(ctx context.Context, key proxy.TargetKey, conn connection, scheme *runtime.Scheme, opts *Options, clk clock.Clock, notify func(proxy.TargetKey), onChaperon func(proxy.TargetKey, *v1alpha1.PodChaperon)) (*Cluster, error) {
	cfg := rest.CopyConfig(conn.config)
	// Probes bound themselves with ProbeTimeout through their context; the
	// client's own timeout only guards against a request that hangs.
	cfg.Timeout = requestTimeout
	cfg.UserAgent = "fleetlet/" + opts.SourceName
	cfg.QPS, cfg.Burst = opts.QPS, opts.Burst
	if cfg.QPS == 0 {
		cfg.QPS, cfg.Burst = DefaultQPS, DefaultBurst
	}
	c := &Cluster{
		key:    key,
		conn:   conn,
		opts:   opts,
		clock:  clk,
		notify: notify,

		onChaperon: onChaperon,
		done:       make(chan struct{}),
		health:     Health{Reason: ReasonConnecting, Message: "connecting to the target"},
		answers:    &answers{clock: clk},
	}
	// Every request and watch through the client and the caches tells
	// the probe loop the target answers (answers.go).
	cfg.Wrap(c.answers.wrap)
	cl, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return nil, fmt.Errorf("building a client for %s %s: %w", key.Kind(), key, err)
	}
	c.client = cl
	c.cacheCfg = rest.CopyConfig(cfg)
	c.cacheCfg.Timeout = 0 // watches are long
	// No gzip: a streamed list's watch keeps its compressed stream, and the
	// client a gzip reader of about 60 KB for it, for as long as it runs;
	// the caches hold three watches per target and namespace, and their
	// events are small. Measured: about half of the source manager's heap
	// per target and namespace (docs/performance.md, "Scale").
	c.cacheCfg.DisableCompression = true
	c.scheme = scheme
	return c, nil
}

// chaperonCacheMapper is the static mapping every chaperon cache uses:
// building a cache must not need the target to answer discovery (it may be
// down). One for all: a mapper per cache cost about 23 KB per target and
// namespace, and it is only read.
var chaperonCacheMapper = sync.OnceValue(func() meta.RESTMapper {
	mapper := meta.NewDefaultRESTMapper([]schema.GroupVersion{v1alpha1.GroupVersion, corev1.SchemeGroupVersion})
	mapper.Add(v1alpha1.GroupVersion.WithKind("PodChaperon"), meta.RESTScopeNamespace)
	// A List asks the mapper about the list kind (replayOnSync lists).
	mapper.Add(v1alpha1.GroupVersion.WithKind("PodChaperonList"), meta.RESTScopeNamespace)
	mapper.Add(corev1.SchemeGroupVersion.WithKind("Pod"), meta.RESTScopeNamespace)
	mapper.Add(corev1.SchemeGroupVersion.WithKind("Event"), meta.RESTScopeNamespace)
	return mapper
})

// keepPodStatus is what a source caches of its delegates and candidates in
// a target: their metadata (owner, labels, annotations, deletion) and
// status (admission, feedback), which is all the source reads of them, and
// of their spec only where they run. The spec is the chaperon's template
// made a pod, which the chaperon's cache holds already: with it, each
// delegate was cached twice over. Managed fields go, as everywhere.
func keepPodStatus(obj any) (any, error) {
	if pod, ok := obj.(*corev1.Pod); ok {
		pod.ManagedFields = nil
		pod.Spec = corev1.PodSpec{NodeName: pod.Spec.NodeName}
	}
	return obj, nil
}

// keepChaperonRead is what a source caches of its chaperons in a target:
// their metadata and status whole, and of their template what it reads
// (proxy.TemplateAsRead), without managed fields. The template is the
// proxy's spec, which the source's own cache holds already; whoever
// writes a template reads the chaperon whole first.
func keepChaperonRead(obj any) (any, error) {
	if pc, ok := obj.(*v1alpha1.PodChaperon); ok {
		pc.ManagedFields = nil
		pc.Spec.Template = proxy.TemplateAsRead(&pc.Spec.Template)
	}
	return obj, nil
}

// newChaperonCache builds the cache of one namespace's chaperons.
func (c *Cluster) newChaperonCache(ctx context.Context, ns string) (*chaperonCache, error) {
	mapper := chaperonCacheMapper()
	ours := labels.SelectorFromSet(labels.Set{v1alpha1.LabelParentCluster: c.opts.SourceName})
	byObject := map[client.Object]cache.ByObject{
		&v1alpha1.PodChaperon{}: {Label: ours, Transform: keepChaperonRead},
		// The delegates and candidates themselves: their binding
		// shows here first, before the chaperon mirrors it. Their
		// metadata and status only (keepPodStatus).
		&corev1.Pod{}: {Label: ours, Transform: keepPodStatus},
	}
	watched := []client.Object{&v1alpha1.PodChaperon{}, &corev1.Pod{}}
	if c.opts.OnDelegateEvent != nil {
		// Events about pods (Events carry no labels to select ours by).
		byObject[&corev1.Event{}] = cache.ByObject{Field: fields.OneTermEqualSelector("involvedObject.kind", "Pod")}
		watched = append(watched, &corev1.Event{})
	}
	ch, err := cache.New(c.cacheCfg, cache.Options{
		Scheme:            c.scheme,
		Mapper:            mapper,
		DefaultNamespaces: map[string]cache.Config{ns: {}},
		ByObject:          byObject,
		// Nothing reads who wrote which field: a chaperon's, a pod's and
		// an Event's managed fields are most of their size.
		DefaultTransform: cache.TransformStripManagedFields(),
	})
	if err != nil {
		return nil, err
	}
	handle := func(obj any) {
		if t, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
			obj = t.Obj
		}
		switch o := obj.(type) {
		case *v1alpha1.PodChaperon:
			c.onChaperon(c.key, o)
		case *corev1.Pod:
			// Same parent annotations as the chaperon's.
			c.onChaperon(c.key, &v1alpha1.PodChaperon{ObjectMeta: metav1.ObjectMeta{Annotations: o.Annotations}})
		}
	}
	handleEvent := func(obj any) {
		if e, ok := obj.(*corev1.Event); ok && c.opts.OnDelegateEvent != nil {
			c.opts.OnDelegateEvent(c.key, e)
		}
	}
	var synced []func() bool
	for _, obj := range watched {
		if _, isEvent := obj.(*corev1.Event); isEvent {
			inf, err := ch.GetInformer(ctx, obj, cache.BlockUntilSynced(false))
			if err != nil {
				return nil, err
			}
			if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
				AddFunc:    handleEvent,
				UpdateFunc: func(_, obj any) { handleEvent(obj) },
			}); err != nil {
				return nil, err
			}
			continue // the chaperon reader does not wait for Events
		}
		inf, err := ch.GetInformer(ctx, obj, cache.BlockUntilSynced(false))
		if err != nil {
			return nil, err
		}
		if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
			AddFunc:    handle,
			UpdateFunc: func(_, obj any) { handle(obj) },
			DeleteFunc: handle,
		}); err != nil {
			return nil, err
		}
		synced = append(synced, inf.HasSynced)
	}
	return &chaperonCache{cache: ch, synced: func() bool {
		for _, s := range synced {
			if !s() {
				return false
			}
		}
		return true
	}}, nil
}

// requestTimeout bounds any one request to a target.
const requestTimeout = 30 * time.Second

// ReasonConnecting is the Ready reason before the first probe has answered.
const ReasonConnecting = "Connecting"

// start runs the probe loop until stop; chaperon caches start on demand.
func (c *Cluster) start(ctx context.Context) {
	ctx, c.cancel = context.WithCancel(ctx)
	c.cacheMu.Lock()
	c.runCtx = ctx
	c.cacheMu.Unlock()
	if c.key.Namespace != "" {
		c.WatchChaperons(c.key.Namespace)
	}
	go func() {
		defer close(c.done)
		defer c.cachesWG.Wait()
		c.probeLoop(ctx)
	}()
}

// chaperonCache watches this source's PodChaperons in one namespace of the
// target. A source's identity may read chaperons only in the namespaces it
// was admitted to, so there is one per namespace, never a cluster-wide one.
type chaperonCache struct {
	cache  cache.Cache
	synced func() bool
}

// WatchChaperons makes sure this source's PodChaperons in namespace ns are
// watched (every change reaches the registry's ChaperonSource). A namespaced
// Target watches its own namespace only.
func (c *Cluster) WatchChaperons(ns string) {
	if c.key.Namespace != "" && ns != c.key.Namespace {
		return
	}
	c.cacheMu.Lock()
	defer c.cacheMu.Unlock()
	if c.runCtx == nil || c.runCtx.Err() != nil {
		return
	}
	if _, ok := c.chaperons[ns]; ok {
		return
	}
	cc, err := c.newChaperonCache(c.runCtx, ns)
	if err != nil {
		ctrl.Log.WithName("target").Error(err, "Watching chaperons", "target", c.key.String(), "namespace", ns)
		return
	}
	if c.chaperons == nil {
		c.chaperons = map[string]*chaperonCache{}
	}
	c.chaperons[ns] = cc
	c.cachesWG.Add(2)
	go func() {
		defer c.cachesWG.Done()
		_ = cc.cache.Start(c.runCtx)
	}()
	go func() {
		defer c.cachesWG.Done()
		c.replayOnSync(c.runCtx, ns, cc)
	}()
}

// replayOnSync delivers every chaperon of the cache once more once it has
// synced. The events of its first list are delivered before it counts as
// synced, and a reader that skips an unsynced cache (the elector
// deleting losers) must be brought back when it may read it.
func (c *Cluster) replayOnSync(ctx context.Context, ns string, cc *chaperonCache) {
	if !toolscache.WaitForCacheSync(ctx.Done(), cc.synced) {
		return
	}
	var list v1alpha1.PodChaperonList
	if err := cc.cache.List(ctx, &list, client.InNamespace(ns)); err != nil {
		ctrl.Log.WithName("target").Error(err, "Listing the chaperons of a synced cache", "target", c.key.String(), "namespace", ns)
		return
	}
	for i := range list.Items {
		c.onChaperon(c.key, &list.Items[i])
	}
}

// Chaperons reads this source's PodChaperons, and the pods they hold, of
// namespace ns in the target: from the namespace's cache once it has synced,
// else from the API server.
func (c *Cluster) Chaperons(ns string) client.Reader {
	c.cacheMu.Lock()
	cc := c.chaperons[ns]
	c.cacheMu.Unlock()
	if cc != nil && cc.synced() {
		return cc.cache
	}
	return c.client
}

// ChaperonCache is the cache of namespace ns's chaperons and their pods;
// synced is false until it has synced (WatchChaperons starts it).
func (c *Cluster) ChaperonCache(ns string) (r client.Reader, synced bool) {
	c.cacheMu.Lock()
	cc := c.chaperons[ns]
	c.cacheMu.Unlock()
	if cc == nil || !cc.synced() {
		return nil, false
	}
	return cc.cache, true
}

// stop ends the probe loop and waits for it.
func (c *Cluster) stop() {
	if c.cancel != nil {
		c.cancel()
		<-c.done
	}
}

func summaryEqual(a, b *v1alpha1.ClusterSummaryStatus) bool {
	// Conditions and observedTime carry timestamps that do not change what
	// the node shows.
	// The candidate scheduler's condition is shown, on the Targets, but
	// for its lastTransitionTime.
	if sa, sb := schedulerCondition(a), schedulerCondition(b); (sa == nil) != (sb == nil) ||
		sa != nil && (sa.Status != sb.Status || sa.Reason != sb.Reason || sa.Message != sb.Message) {
		return false
	}
	ac, bc := a.DeepCopy(), b.DeepCopy()
	ac.Conditions, bc.Conditions = nil, nil
	ac.ObservedTime, bc.ObservedTime = nil, nil
	return apiequality.Semantic.DeepEqual(ac, bc)
}

func timeEqual(a, b *metav1.Time) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Equal(b)
}
