package fleet

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"sync"
	"time"

	policyv1client "k8s.io/client-go/kubernetes/typed/policy/v1"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
	"github.com/fleetlet/fleetlet/pkg/indexer"
	"github.com/fleetlet/fleetlet/pkg/proxy"
	"github.com/fleetlet/fleetlet/pkg/source/vnode"
)

// Event reasons.
const (
	EventTargetReady    = "TargetReady"
	EventTargetNotReady = "TargetNotReady"
)

// Options configure the registry.
type Options struct {
	// SourceName is this cluster's name as its targets know it: the name of
	// its Source there and the parent-cluster label of what it creates.
	SourceName string
	// ProbeInterval is how often a healthy target is probed.
	ProbeInterval time.Duration
	// ProbeTimeout bounds one probe.
	ProbeTimeout time.Duration
	// ProbeBackoffInitial is the first retry delay after a failed probe; it
	// doubles up to ProbeInterval.
	ProbeBackoffInitial time.Duration
	// ProbeFailureThreshold is how many probes in a row must fail before a
	// Ready target is called NotReady: one slow answer from a loaded
	// apiserver is not an outage (the kubelet's probes count the same way).
	ProbeFailureThreshold int
	// HeartbeatDuration is the duration of the heartbeat Lease the source
	// renews in each target (at every probe).
	HeartbeatDuration time.Duration
	// SummaryStaleAfter is how long a target's ClusterSummary may go
	// without being renewed (its observedTime unchanged, by this process's
	// clock) before the target gets SummaryStale=True and no new
	// election: its fleetlet is down.
	SummaryStaleAfter time.Duration
	// QPS and Burst bound the requests to each target (client-side rate
	// limit); zero means DefaultQPS and DefaultBurst. Every candidate costs
	// a few requests per target, so this caps how fast pods are placed.
	QPS   float32
	Burst int
	// AllowedHosts are the API servers Targets may name; empty allows
	// any https host.
	AllowedHosts HostAllowList
	// SecretNamespaces, when not empty, are the only namespaces whose
	// Secrets the manager may read (--secret-namespaces): a Target whose
	// kubeconfig Secret lives elsewhere is refused without a read.
	SecretNamespaces []string
	// OnDelegateEvent, when set, makes the per-namespace chaperon caches
	// watch the Events about pods there too, and calls it for every Event
	// added or updated. The Events are not filtered: the callee looks the
	// pod up among this source's.
	OnDelegateEvent func(proxy.TargetKey, *corev1.Event)
}

// Defaults for Options.
const (
	DefaultProbeInterval       = 10 * time.Second
	DefaultProbeTimeout        = 5 * time.Second
	DefaultProbeBackoffInitial = time.Second
	// DefaultProbeFailureThreshold is the kubelet probes' default.
	DefaultProbeFailureThreshold = 3
	DefaultHeartbeatDuration     = 40 * time.Second
	// DefaultSummaryStaleAfter is four of the target side's 30 s summary
	// heartbeats: a leader change there is not an outage.
	DefaultSummaryStaleAfter = 2 * time.Minute
	DefaultQPS               = 200
	DefaultBurst             = 400
)

func (o *Options) validate() error {
	var errs []error
	if o.SourceName == "" {
		errs = append(errs, errors.New("the source name must be set"))
	}
	if o.ProbeInterval == 0 {
		o.ProbeInterval = DefaultProbeInterval
	}
	if o.ProbeTimeout == 0 {
		o.ProbeTimeout = DefaultProbeTimeout
	}
	if o.ProbeBackoffInitial == 0 {
		o.ProbeBackoffInitial = DefaultProbeBackoffInitial
	}
	if o.ProbeFailureThreshold == 0 {
		o.ProbeFailureThreshold = DefaultProbeFailureThreshold
	}
	if o.HeartbeatDuration == 0 {
		o.HeartbeatDuration = DefaultHeartbeatDuration
	}
	if o.SummaryStaleAfter == 0 {
		o.SummaryStaleAfter = DefaultSummaryStaleAfter
	}
	if o.SummaryStaleAfter < o.ProbeInterval {
		errs = append(errs, fmt.Errorf("summary staleness threshold %s is shorter than the probe interval %s", o.SummaryStaleAfter, o.ProbeInterval))
	}
	if o.ProbeFailureThreshold < 1 {
		errs = append(errs, fmt.Errorf("probe failure threshold %d must be at least 1", o.ProbeFailureThreshold))
	}
	if o.ProbeBackoffInitial > o.ProbeInterval {
		errs = append(errs, fmt.Errorf("probe backoff %s is longer than the probe interval %s", o.ProbeBackoffInitial, o.ProbeInterval))
	}
	if o.HeartbeatDuration < 2*o.ProbeInterval {
		errs = append(errs, fmt.Errorf("heartbeat lease duration %s must be at least twice the probe interval %s", o.HeartbeatDuration, o.ProbeInterval))
	}
	return errors.Join(errs...)
}

// VirtualNodes is what the registry tells about each target: the virtual
// node controller.
type VirtualNodes interface {
	Upsert(ctx context.Context, s vnode.TargetState)
	Remove(ctx context.Context, key proxy.TargetKey) error
	// Release stops running the node of key without deleting it: its
	// name stands for another target.
	Release(key proxy.TargetKey)
}

// Registry keeps one live Cluster per Target and ClusterTarget, reconnects
// when a Target or its kubeconfig Secret changes, reports health in the
// Target's Ready condition and drives the virtual nodes.
type Registry struct {
	opts   Options
	nodes  VirtualNodes
	clock  clock.Clock
	scheme *runtime.Scheme

	client    client.Client
	apiReader client.Reader
	self      *rest.Config
	// policy posts evictions (drain.go).
	policy   rest.Interface
	recorder events.EventRecorder

	// ctx lives as long as the registry runs (Start); clusters run in it.
	ctx    context.Context
	cancel context.CancelFunc

	mu       sync.RWMutex
	clusters map[proxy.TargetKey]*Cluster
	// refused are the registrations refused for a conflict
	// (conflicts.go), told when a target goes: they may take its place.
	refused map[proxy.TargetKey]bool

	// hub delivers chaperon and target events to the controllers
	// watching them (sources.go).
	hub hub

	targetEvents        chan event.TypedGenericEvent[*v1alpha1.Target]
	clusterTargetEvents chan event.TypedGenericEvent[*v1alpha1.ClusterTarget]
}

// New returns a registry. Call SetupWithManager before the manager starts.
func New(opts Options, nodes VirtualNodes) (*Registry, error) {
	if err := opts.validate(); err != nil {
		return nil, fmt.Errorf("target registry: %w", err)
	}
	if nodes == nil {
		return nil, errors.New("target registry: no virtual node controller")
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &Registry{
		opts:                opts,
		nodes:               nodes,
		clock:               clock.RealClock{},
		ctx:                 ctx,
		cancel:              cancel,
		clusters:            map[proxy.TargetKey]*Cluster{},
		refused:             map[proxy.TargetKey]bool{},
		targetEvents:        make(chan event.TypedGenericEvent[*v1alpha1.Target], 1024),
		clusterTargetEvents: make(chan event.TypedGenericEvent[*v1alpha1.ClusterTarget], 1024),
	}
	r.hub.view = func(key proxy.TargetKey) View { c, _ := r.Get(key); return viewOf(c) }
	r.hub.last = map[proxy.TargetKey]View{}
	return r, nil
}

// Get returns the live cluster of a target.
func (r *Registry) Get(key proxy.TargetKey) (*Cluster, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	c, ok := r.clusters[key]
	return c, ok
}

// List returns every live cluster.
func (r *Registry) List() []*Cluster {
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := make([]*Cluster, 0, len(r.clusters))
	for _, c := range r.clusters {
		out = append(out, c)
	}
	return out
}

// Known lists, at one instant, the connected clusters (as List) and the
// targets the source has (a Target or ClusterTarget not deleted) that are
// not connected: their credentials cannot be read or used, or the first
// connection has not been made yet. Known but unreachable: what runs there
// is unknown, never gone. Every target is in exactly one of the two.
func (r *Registry) Known(ctx context.Context) (connected []*Cluster, unconnected []proxy.TargetKey, err error) {
	all, err := r.registrations(ctx)
	if err != nil {
		return nil, nil, err
	}
	keys := make([]proxy.TargetKey, 0, len(all))
	for _, o := range all {
		keys = append(keys, keyOfObject(o))
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	for _, c := range r.clusters {
		connected = append(connected, c)
	}
	for _, k := range keys {
		if _, ok := r.clusters[k]; !ok {
			unconnected = append(unconnected, k)
		}
	}
	return connected, unconnected, nil
}

// Start implements manager.Runnable: it runs until ctx ends, then stops every
// cluster's probes (nodes are left alone: a fleetlet outage lets their
// leases lapse, it deletes nothing).
func (r *Registry) Start(ctx context.Context) error {
	<-ctx.Done()
	r.cancel()
	r.mu.Lock()
	defer r.mu.Unlock()
	for k, c := range r.clusters {
		c.stop()
		delete(r.clusters, k)
	}
	return nil
}

// SetupWithManager registers the Target and ClusterTarget controllers.
func (r *Registry) SetupWithManager(ctx context.Context, mgr ctrl.Manager) error {
	r.client = mgr.GetClient()
	r.apiReader = mgr.GetAPIReader()
	r.scheme = mgr.GetScheme()
	r.self = mgr.GetConfig()
	r.recorder = mgr.GetEventRecorder("fleetlet-target-registry")
	policy, err := policyv1client.NewForConfig(r.self)
	if err != nil {
		return err
	}
	r.policy = policy.RESTClient()

	if err := mgr.Add(r); err != nil {
		return err
	}
	if err := mgr.Add(orphanNodes{r}); err != nil {
		return err
	}

	// Secrets are watched by metadata only: their data is read, uncached,
	// when a Target that references one is reconciled.
	if err := ctrl.NewControllerManagedBy(mgr).
		Named("target").
		For(&v1alpha1.Target{}).
		WatchesMetadata(&corev1.Secret{}, handler.EnqueueRequestsFromMapFunc(r.targetsForSecret)).
		WatchesRawSource(source.Channel(r.targetEvents, &handler.TypedEnqueueRequestForObject[*v1alpha1.Target]{})).
		Complete(reconcile.Func(func(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
			return resultOf(r.reconcile(ctx, proxy.TargetKey{Namespace: req.Namespace, Name: req.Name}))
		})); err != nil {
		return err
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named("clustertarget").
		For(&v1alpha1.ClusterTarget{}).
		WatchesMetadata(&corev1.Secret{}, handler.EnqueueRequestsFromMapFunc(r.clusterTargetsForSecret)).
		WatchesRawSource(source.Channel(r.clusterTargetEvents, &handler.TypedEnqueueRequestForObject[*v1alpha1.ClusterTarget]{})).
		Complete(reconcile.Func(func(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
			return resultOf(r.reconcile(ctx, proxy.TargetKey{Name: req.Name}))
		}))
}

// resultOf turns a drain that waits into a requeue, not an error.
func resultOf(err error) (reconcile.Result, error) {
	var d errDraining
	if errors.As(err, &d) {
		return reconcile.Result{RequeueAfter: drainRecheck}, nil
	}
	var refused errRefused
	if errors.As(err, &refused) {
		return reconcile.Result{RequeueAfter: conflictRecheck}, nil
	}
	return reconcile.Result{}, err
}

func (r *Registry) targetsForSecret(ctx context.Context, o client.Object) []reconcile.Request {
	var list v1alpha1.TargetList
	if err := r.client.List(ctx, &list, client.InNamespace(o.GetNamespace()), client.MatchingFields{indexer.TargetSecret.Field: o.GetName()}); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Listing Targets for a Secret", "secret", klog.KObj(o))
		return nil
	}
	reqs := make([]reconcile.Request, 0, len(list.Items))
	for _, t := range list.Items {
		reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: t.Namespace, Name: t.Name}})
	}
	return reqs
}

func (r *Registry) clusterTargetsForSecret(ctx context.Context, o client.Object) []reconcile.Request {
	var list v1alpha1.ClusterTargetList
	if err := r.client.List(ctx, &list, client.MatchingFields{indexer.ClusterTargetSecret.Field: o.GetNamespace() + "/" + o.GetName()}); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Listing ClusterTargets for a Secret", "secret", klog.KObj(o))
		return nil
	}
	reqs := make([]reconcile.Request, 0, len(list.Items))
	for _, t := range list.Items {
		reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Name: t.Name}})
	}
	return reqs
}

// notify asks for a reconcile of key; called by a cluster's probe loop.
func (r *Registry) notify(key proxy.TargetKey) {
	go func() {
		if key.Namespace == "" {
			ev := event.TypedGenericEvent[*v1alpha1.ClusterTarget]{Object: &v1alpha1.ClusterTarget{ObjectMeta: metav1.ObjectMeta{Name: key.Name}}}
			select {
			case r.clusterTargetEvents <- ev:
			case <-r.ctx.Done():
			}
			return
		}
		ev := event.TypedGenericEvent[*v1alpha1.Target]{Object: &v1alpha1.Target{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}}
		select {
		case r.targetEvents <- ev:
		case <-r.ctx.Done():
		}
	}()
}

// targetObject is what the registry needs of a Target or ClusterTarget.
type targetObject interface {
	client.Object
	// object is the Target or ClusterTarget itself, for the client.
	object() client.Object
	spec() *v1alpha1.TargetSpec
	status() *v1alpha1.TargetStatus
}

type targetWrapper struct{ *v1alpha1.Target }

func (t targetWrapper) object() client.Object          { return t.Target }
func (t targetWrapper) spec() *v1alpha1.TargetSpec     { return &t.Spec }
func (t targetWrapper) status() *v1alpha1.TargetStatus { return &t.Status }

type clusterTargetWrapper struct{ *v1alpha1.ClusterTarget }

func (t clusterTargetWrapper) object() client.Object          { return t.ClusterTarget }
func (t clusterTargetWrapper) spec() *v1alpha1.TargetSpec     { return &t.Spec }
func (t clusterTargetWrapper) status() *v1alpha1.TargetStatus { return &t.Status }

func (r *Registry) get(ctx context.Context, key proxy.TargetKey) (targetObject, error) {
	return getTarget(ctx, r.client, key)
}

// getTarget reads a Target or ClusterTarget with reader (the cache, or the
// API server).
func getTarget(ctx context.Context, reader client.Reader, key proxy.TargetKey) (targetObject, error) {
	nn := types.NamespacedName{Namespace: key.Namespace, Name: key.Name}
	if key.Namespace == "" {
		var t v1alpha1.ClusterTarget
		if err := reader.Get(ctx, nn, &t); err != nil {
			return nil, err
		}
		return clusterTargetWrapper{&t}, nil
	}
	var t v1alpha1.Target
	if err := reader.Get(ctx, nn, &t); err != nil {
		return nil, err
	}
	return targetWrapper{&t}, nil
}

// reconcile brings the live cluster, the Target's status and the virtual node
// of one target in line with its spec and the last probe.
func (r *Registry) reconcile(ctx context.Context, key proxy.TargetKey) (err error) {
	log := ctrl.LoggerFrom(ctx).WithValues("target", key.String(), "kind", key.Kind())
	ctx = ctrl.LoggerInto(ctx, log)

	obj, err := r.get(ctx, key)
	if apierrors.IsNotFound(err) {
		r.removeCluster(key)
		r.setRefused(key, false)
		defer r.notifyRefused()
		defer r.hub.targetChanged(key)
		log.V(2).Info("Removing the virtual node of a deleted target")
		return r.nodes.Remove(ctx, key)
	}
	if err != nil {
		return err
	}
	if obj.GetDeletionTimestamp() != nil {
		return r.drain(ctx, obj, key)
	}
	nodeName := proxy.NodeName(key)
	if refused, err := r.refuseTakenNodeName(ctx, obj, key, nodeName); refused || err != nil {
		return err
	}
	spec := obj.spec()

	var (
		health  Health
		summary *v1alpha1.ClusterSummaryStatus
		// fromSummary: the conditions the summary implies.
		fromSummary summaryConditions
	)
	conn, reason, msg, retry := r.connectionFor(ctx, key, spec)
	if retry != nil {
		if _, ok := r.Get(key); ok {
			// A read that failed once: the connection made with the
			// last credentials read stays, and the read is tried again
			// with backoff.
			return retry
		}
		// Nothing connected yet: the status says why, and the read is
		// tried again with backoff.
		defer func() {
			if err == nil {
				err = retry
			}
		}()
	}
	if reason != "" {
		// A target that cannot be connected to is not probed with old
		// credentials either.
		r.removeCluster(key)
		health = Health{Reason: reason, Message: msg}
	} else {
		cl, err := r.ensureCluster(key, conn)
		if err != nil {
			health = Health{Reason: v1alpha1.ReasonBadKubeconfig, Message: err.Error()}
		} else {
			classes := maps.Clone(spec.StorageClasses)
			cl.storageClasses.Store(&classes)
			cl.priority.Store(spec.Priority)
			summary = cl.Summary()
			if err := r.refuseSameCluster(ctx, obj, cl, summary); err != nil {
				return err
			}
			health, fromSummary = cl.Health(), summaryConditions{stale: staleness(cl), scheduler: schedulerState(cl)}
			if health.Reason == v1alpha1.ReasonDuplicateCluster {
				defer func() {
					if err == nil {
						err = errRefused{reason: health.Message}
					}
				}()
			}
		}
	}
	if _, err := regexp.Compile(spec.ExcludedLabelsRegexp); err != nil {
		health = Health{Reason: v1alpha1.ReasonInvalidSpec, Message: fmt.Sprintf("spec.excludedLabelsRegexp does not compile: %v", err)}
	}

	defer r.hub.targetChanged(key)
	if obj.status().VirtualNodeName != nodeName && (health.Reason == v1alpha1.ReasonDuplicateCluster || health.Reason == ReasonConnecting) {
		// A registration that never had a node gets none, nor the drain
		// finalizer, before its first probe says which cluster it reaches
		// (the cluster's notify brings it back then), nor once it is
		// refused for another registration of the same cluster: nothing
		// of it is there to drain. (One refused after it held a node
		// keeps the node, and its drain: proxies may be bound there.)
		if err := r.updateStatus(ctx, obj, health, "", fromSummary); err != nil {
			return err
		}
		if health.Reason == v1alpha1.ReasonDuplicateCluster {
			return r.nodes.Remove(ctx, key)
		}
		return nil
	}
	// The drain finalizer before the node: a Target that may hold
	// delegates is never deleted without its drain.
	if err := r.ensureDrainFinalizer(ctx, obj); err != nil {
		return err
	}
	if err := r.updateStatus(ctx, obj, health, nodeName, fromSummary); err != nil {
		return err
	}
	r.nodes.Upsert(ctx, vnode.TargetState{
		Key:                  key,
		Ready:                health.Ready,
		Partitioned:          !health.Ready && health.Reason == v1alpha1.ReasonUnreachable,
		Reason:               health.Reason,
		Message:              health.Message,
		Summary:              summary,
		SourceName:           r.opts.SourceName,
		ExcludedLabelsRegexp: spec.ExcludedLabelsRegexp,
	})
	return nil
}

// updateStatus writes the Ready condition, the virtual node name and the
// observed generation, when they change, and records an Event when
// readiness changes.
func (r *Registry) updateStatus(ctx context.Context, obj targetObject, h Health, nodeName string, fromSummary summaryConditions) error {
	before := obj.DeepCopyObject().(client.Object)
	st := obj.status()
	cond := metav1.Condition{Type: v1alpha1.ConditionReady, Status: metav1.ConditionFalse, Reason: h.Reason, Message: h.Message, ObservedGeneration: obj.GetGeneration()}
	if h.Ready {
		cond.Status = metav1.ConditionTrue
	}
	old := meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionReady)
	wasReady := old != nil && old.Status == metav1.ConditionTrue
	changed := meta.SetStatusCondition(&st.Conditions, cond)
	changed = fromSummary.set(&st.Conditions, obj.GetGeneration()) || changed
	if st.VirtualNodeName != nodeName || st.ObservedGeneration != obj.GetGeneration() {
		st.VirtualNodeName = nodeName
		st.ObservedGeneration = obj.GetGeneration()
		changed = true
	}
	if !changed {
		return nil
	}
	if err := r.client.Status().Patch(ctx, obj.object(), client.MergeFrom(before)); err != nil {
		return fmt.Errorf("updating the status of %s: %w", klog.KObj(obj), err)
	}
	if old == nil || wasReady != h.Ready || old.Reason != h.Reason {
		if h.Ready {
			r.recorder.Eventf(obj.object(), nil, corev1.EventTypeNormal, EventTargetReady, "Probe", "Target is ready: %s", h.Message)
		} else if h.Reason != ReasonConnecting {
			r.recorder.Eventf(obj.object(), nil, corev1.EventTypeWarning, EventTargetNotReady, "Probe", "Target is not ready (%s): %s", h.Reason, h.Message)
		}
	}
	return nil
}

// connectionFor works out how to reach a target. A non-empty reason means it
// cannot be reached as configured, and says why; retry is set when that
// may pass on its own (the Secret could not be read).
func (r *Registry) connectionFor(ctx context.Context, key proxy.TargetKey, spec *v1alpha1.TargetSpec) (conn connection, reason, message string, retry error) {
	if spec.Self && key.Namespace != "" {
		// One made before the CRD refused it: never handed the
		// manager's own credentials.
		return conn, v1alpha1.ReasonInvalidSpec, "spec.self is allowed on ClusterTargets only: a Target with self would act in its namespace with the manager's own credentials", nil
	}
	if spec.Self {
		return connection{config: r.self, self: true, fingerprint: "self"}, "", "", nil
	}
	ref := spec.KubeconfigSecret
	if ref == nil {
		return conn, v1alpha1.ReasonInvalidSpec, "neither self nor kubeconfigSecret is set", nil
	}
	ns := key.Namespace
	if ns == "" {
		ns = ref.Namespace
	}
	dataKey := ref.Key
	if dataKey == "" {
		dataKey = v1alpha1.DefaultKubeconfigKey
	}
	if len(r.opts.SecretNamespaces) > 0 && !slices.Contains(r.opts.SecretNamespaces, ns) {
		return conn, v1alpha1.ReasonKubeconfigSecretNotFound, fmt.Sprintf(
			"Secret %s/%s is in a namespace whose Secrets fleetlet does not read (the manager's --secret-namespaces, chart value manager.secretNamespaces); the cluster admin can add it", ns, ref.Name), nil
	}
	var secret corev1.Secret
	if err := r.apiReader.Get(ctx, types.NamespacedName{Namespace: ns, Name: ref.Name}, &secret); err != nil {
		if apierrors.IsNotFound(err) {
			return conn, v1alpha1.ReasonKubeconfigSecretNotFound, fmt.Sprintf("Secret %s/%s not found", ns, ref.Name), nil
		}
		msg := fmt.Sprintf("reading Secret %s/%s: %v", ns, ref.Name, err)
		return conn, v1alpha1.ReasonKubeconfigSecretNotFound, msg, errors.New(msg)
	}
	data, ok := secret.Data[dataKey]
	if !ok {
		return conn, v1alpha1.ReasonBadKubeconfig, fmt.Sprintf("Secret %s/%s has no key %q", ns, ref.Name, dataKey), nil
	}
	cfg, err := RESTConfigFromKubeconfig(data, ref.Context)
	if err != nil {
		return conn, v1alpha1.ReasonBadKubeconfig, fmt.Sprintf("Secret %s/%s key %q: %v", ns, ref.Name, dataKey, err), nil
	}
	if !r.opts.AllowedHosts.Allows(cfg.Host) {
		return conn, v1alpha1.ReasonHostNotAllowed, fmt.Sprintf(
			"the kubeconfig's server %s is not one of the hosts targets may name (the manager's --allowed-target-hosts); the cluster admin can allow it", hostOf(cfg.Host)), nil
	}
	leaseNS := kubeconfigNamespace(data, ref.Context)
	if leaseNS == "" {
		leaseNS = key.Namespace
	}
	if leaseNS == "" {
		leaseNS = metav1.NamespaceDefault
	}
	return connection{config: cfg, leaseNamespace: leaseNS, fingerprint: fingerprint(cfg, leaseNS)}, "", "", nil
}

// kubeconfigNamespace is the namespace of the kubeconfig context used: where
// the source's identity lives in the target.
func kubeconfigNamespace(data []byte, contextName string) string {
	cfg, err := clientcmd.Load(data)
	if err != nil {
		return ""
	}
	if contextName == "" {
		contextName = cfg.CurrentContext
	}
	if c := cfg.Contexts[contextName]; c != nil {
		return c.Namespace
	}
	return ""
}

func fingerprint(cfg *rest.Config, leaseNS string) string {
	h := sha256.New()
	for _, part := range [][]byte{[]byte(cfg.Host), []byte(cfg.ServerName), cfg.CAData, cfg.CertData, cfg.KeyData, []byte(cfg.BearerToken), []byte(leaseNS)} {
		h.Write(part)
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil))
}

// ensureCluster returns the live cluster for key, (re)connecting when the
// connection changed. Other targets are never touched.
func (r *Registry) ensureCluster(key proxy.TargetKey, conn connection) (*Cluster, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if c, ok := r.clusters[key]; ok {
		if c.conn.fingerprint == conn.fingerprint {
			return c, nil
		}
		c.stop()
		delete(r.clusters, key)
	}
	c, err := newCluster(r.ctx, key, conn, r.scheme, &r.opts, r.clock, r.notify, r.hub.chaperonChanged)
	if err != nil {
		return nil, err
	}
	c.start(r.ctx)
	r.clusters[key] = c
	return c, nil
}

func (r *Registry) removeCluster(key proxy.TargetKey) {
	r.mu.Lock()
	c, ok := r.clusters[key]
	delete(r.clusters, key)
	r.mu.Unlock()
	if ok {
		c.stop()
	}
	forgetTarget(key)
}
