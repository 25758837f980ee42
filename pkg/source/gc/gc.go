package gc

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
	proxypod "github.com/fleetlet/fleetlet/pkg/proxy"
)

// Defaults for Options.
const (
	DefaultInterval     = 2 * time.Minute
	DefaultInitialDelay = 15 * time.Second
	DefaultMinAge       = time.Minute
)

// Options configure the collector.
type Options struct {
	// SourceName is this cluster's name in its targets: the parent-cluster
	// label of what it created there. Required.
	SourceName string
	// Targets lists the targets (RegistryTargets of the registry). Required.
	Targets Targets
	// Reader reads the source, usually from the manager's cache: enabled
	// namespaces and proxy pods. SetupWithManager fills it in.
	Reader client.Reader
	// APIReader reads the source from its API server: an orphan found in
	// the cache is confirmed there before it is deleted. SetupWithManager
	// fills it in.
	APIReader client.Reader
	// Interval between passes (default DefaultInterval).
	Interval time.Duration
	// InitialDelay is how long after start the first pass runs (default
	// DefaultInitialDelay): long enough for the targets' first probes.
	InitialDelay time.Duration
	// MinAge is how old a remote object must be before it may be collected
	// (default DefaultMinAge).
	MinAge time.Duration
	// Collectors collect more kinds of remote objects in the same pass,
	// after the chaperons.
	Collectors []Collector
	// Clock is the real clock unless a test sets it.
	Clock clock.Clock
	// Logger defaults to ctrl.Log.WithName("gc").
	Logger logr.Logger
}

func (o *Options) validate() error {
	var errs []error
	if o.SourceName == "" {
		errs = append(errs, errors.New("the source name must be set"))
	}
	if o.Targets == nil {
		errs = append(errs, errors.New("no targets"))
	}
	if o.Interval == 0 {
		o.Interval = DefaultInterval
	}
	if o.InitialDelay == 0 {
		o.InitialDelay = DefaultInitialDelay
	}
	if o.MinAge == 0 {
		o.MinAge = DefaultMinAge
	}
	if o.Interval < 0 || o.InitialDelay < 0 || o.MinAge < 0 {
		errs = append(errs, fmt.Errorf("interval %s, initial delay %s and minimum age %s must not be negative", o.Interval, o.InitialDelay, o.MinAge))
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	if o.Logger.GetSink() == nil {
		o.Logger = ctrl.Log.WithName("gc")
	}
	return errors.Join(errs...)
}

// Reason says why a remote object is an orphan.
type Reason string

// Reasons a remote object is collected.
const (
	// ReasonProxyNotFound: no pod parent-namespace/parent-name exists.
	ReasonProxyNotFound Reason = "ProxyNotFound"
	// ReasonProxyReplaced: the pod of that name has another UID (a
	// StatefulSet pod recreated, say).
	ReasonProxyReplaced Reason = "ProxyReplaced"
	// ReasonProxyNotManaged: the pod no longer carries the delegate
	// finalizer, so fleetlet no longer manages it.
	ReasonProxyNotManaged Reason = "ProxyNotManaged"
	// ReasonNoParent: the object carries this source's label but no
	// parent UID or name, so no proxy can claim it.
	ReasonNoParent Reason = "NoParent"
	// ReasonLostElection: a chaperon of a live proxy whose election
	// record stands and names another target (a loser the elector could
	// not delete, or created by a crashed election after the record).
	ReasonLostElection Reason = "LostElection"
	// ReasonSourceGone: a copy whose source object (a followed Service)
	// no longer exists in the source.
	ReasonSourceGone Reason = "SourceGone"
)

// Parent names the proxy pod a remote object belongs to, from its
// parent-uid label and parent-name/parent-namespace annotations.
type Parent struct {
	Namespace string
	Name      string
	UID       types.UID
}

// ParentOf reads the parent of a remote object; the namespace defaults to
// the object's own (remote objects live in their proxy's namespace).
func ParentOf(obj metav1.Object) Parent {
	p := Parent{
		Namespace: obj.GetAnnotations()[v1alpha1.AnnotationParentNamespace],
		Name:      obj.GetAnnotations()[v1alpha1.AnnotationParentName],
		UID:       types.UID(obj.GetLabels()[v1alpha1.LabelParentUID]),
	}
	if p.Namespace == "" {
		p.Namespace = obj.GetNamespace()
	}
	return p
}

// Judge says why a remote object of parent is an orphan, given its proxy as
// read from the source (nil when there is no pod of that name), or "" when
// the proxy is live and the object must stay.
func Judge(parent Parent, proxy *corev1.Pod) Reason {
	switch {
	case parent.UID == "" || parent.Name == "":
		return ReasonNoParent
	case proxy == nil:
		return ReasonProxyNotFound
	case proxy.UID != parent.UID:
		return ReasonProxyReplaced
	case !proxypod.IsManaged(proxy):
		return ReasonProxyNotManaged
	}
	return ""
}

// JudgeChaperon is Judge for a chaperon in target: a chaperon of a live
// proxy is also an orphan when the proxy's election record stands and
// names another target. A proxy with no record standing keeps its
// chaperons (candidates, or pending ones the elector trims itself).
func JudgeChaperon(parent Parent, proxy *corev1.Pod, target string) Reason {
	if r := Judge(parent, proxy); r != "" {
		return r
	}
	if rec, ok := proxypod.Elected(proxy); ok && rec.Target().String() != target {
		return ReasonLostElection
	}
	return ""
}

// Finding is one remote object the collector judged an orphan.
type Finding struct {
	// Target is the Target's key.
	Target    string
	Kind      string
	Namespace string
	Name      string
	Parent    Parent
	Reason    Reason
}

func (f Finding) String() string {
	return fmt.Sprintf("%s %s/%s in %s (proxy %s/%s %s: %s)", f.Kind, f.Namespace, f.Name, f.Target, f.Parent.Namespace, f.Parent.Name, f.Parent.UID, f.Reason)
}

// Report is what one pass found and did.
type Report struct {
	// Checked counts the remote objects of this source examined.
	Checked int
	// Deleted are the orphans deleted.
	Deleted []Finding
	// Young are orphans kept because they are younger than MinAge.
	Young []Finding
	// SkippedTargets are the targets not Ready, left for a later pass.
	SkippedTargets []string
}

func (r *Report) add(o Report) {
	r.Checked += o.Checked
	r.Deleted = append(r.Deleted, o.Deleted...)
	r.Young = append(r.Young, o.Young...)
}

// Collector collects one kind of remote object in one namespace of one
// target. The chaperon collector is always first; the copies of followed
// objects plug in here.
type Collector interface {
	// Kind names what is collected, for logs, metrics and the Report.
	Kind() string
	// Collect examines this source's objects in s.Namespace of s.Target
	// and deletes the orphans through s.Delete.
	Collect(ctx context.Context, s *Scope) error
}

// Scope is what a Collector works on: one namespace of one Ready target.
type Scope struct {
	Target     Target
	Namespace  string
	SourceName string

	gc     *GC
	kind   string
	report Report
}

// OwnedSelector selects the objects of this source.
func (s *Scope) OwnedSelector() client.MatchingLabels {
	return client.MatchingLabels{v1alpha1.LabelParentCluster: s.SourceName}
}

// Owned reports whether obj carries this source's parent-cluster label:
// nothing else is ever deleted.
func (s *Scope) Owned(obj metav1.Object) bool {
	return obj.GetLabels()[v1alpha1.LabelParentCluster] == s.SourceName
}

// ListError is what a Collector returns when listing its objects failed:
// nil when the target refuses this namespace to the source (not admitted
// there), does not have it, or does not know the kind (logged at V(2): no
// object of ours can be there), else err.
func (s *Scope) ListError(err error) error {
	if apierrors.IsForbidden(err) || apierrors.IsNotFound(err) || meta.IsNoMatchError(err) {
		s.gc.opts.Logger.V(2).Info("Skipping a namespace", "target", s.Target.Key().String(), "namespace", s.Namespace, "kind", s.kind, "reason", err.Error())
		return nil
	}
	return err
}

// Checked counts n objects examined.
func (s *Scope) Checked(n int) { s.report.Checked += n }

// Orphan judges a remote object with a single parent: "" keeps it. An
// object younger than MinAge is kept and reported young. An orphan in the
// cache is confirmed from the API server.
func (s *Scope) Orphan(ctx context.Context, obj client.Object) (Reason, error) {
	return s.orphan(ctx, obj, func(parent Parent, proxy *corev1.Pod) Reason { return Judge(parent, proxy) })
}

// orphanChaperon is Orphan for a chaperon (JudgeChaperon).
func (s *Scope) orphanChaperon(ctx context.Context, obj client.Object) (Reason, error) {
	target := s.Target.Key().String()
	return s.orphan(ctx, obj, func(parent Parent, proxy *corev1.Pod) Reason { return JudgeChaperon(parent, proxy, target) })
}

func (s *Scope) orphan(ctx context.Context, obj client.Object, judge func(Parent, *corev1.Pod) Reason) (Reason, error) {
	parent := ParentOf(obj)
	reason, err := s.judge(ctx, parent, s.gc.opts.Reader, judge)
	if reason == "" || err != nil {
		return "", err
	}
	if age := s.gc.opts.Clock.Since(obj.GetCreationTimestamp().Time); age < s.gc.opts.MinAge {
		s.report.Young = append(s.report.Young, s.finding(obj, parent, reason))
		s.gc.opts.Logger.V(3).Info("Keeping a young orphan", "target", s.Target.Key().String(), "kind", s.kind, "object", klog.KObj(obj), "age", age, "reason", reason)
		return "", nil
	}
	return s.judge(ctx, parent, s.gc.opts.APIReader, judge)
}

func (s *Scope) judge(ctx context.Context, parent Parent, r client.Reader, judge func(Parent, *corev1.Pod) Reason) (Reason, error) {
	if parent.UID == "" || parent.Name == "" {
		return ReasonNoParent, nil
	}
	var pod corev1.Pod
	err := r.Get(ctx, types.NamespacedName{Namespace: parent.Namespace, Name: parent.Name}, &pod)
	if apierrors.IsNotFound(err) {
		return judge(parent, nil), nil
	}
	if err != nil {
		return "", fmt.Errorf("reading proxy %s/%s: %w", parent.Namespace, parent.Name, err)
	}
	return judge(parent, &pod), nil
}

// Delete deletes an orphan with Foreground propagation and a UID
// precondition, logging and counting it. An object already gone or
// replaced is not counted.
func (s *Scope) Delete(ctx context.Context, obj client.Object, reason Reason) error {
	if !s.Owned(obj) {
		return fmt.Errorf("refusing to delete %s %s: it does not carry %s=%s", s.kind, klog.KObj(obj), v1alpha1.LabelParentCluster, s.SourceName)
	}
	f := s.finding(obj, ParentOf(obj), reason)
	s.gc.opts.Logger.Info("Deleting an orphan", "target", f.Target, "kind", f.Kind, "object", klog.KObj(obj),
		"proxy", f.Parent.Namespace+"/"+f.Parent.Name, "proxyUID", f.Parent.UID, "reason", reason)
	err := s.Target.Client().Delete(ctx, obj,
		client.PropagationPolicy(metav1.DeletePropagationForeground),
		client.Preconditions{UID: ptr.To(obj.GetUID())})
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("deleting %s %s in %s: %w", f.Kind, klog.KObj(obj), f.Target, err)
	}
	s.report.Deleted = append(s.report.Deleted, f)
	deletedTotal.WithLabelValues(f.Target, f.Kind).Inc()
	return nil
}

func (s *Scope) finding(obj client.Object, parent Parent, reason Reason) Finding {
	return Finding{
		Target: s.Target.Key().String(), Kind: s.kind,
		Namespace: obj.GetNamespace(), Name: obj.GetName(),
		Parent: parent, Reason: reason,
	}
}

// GC is the garbage collector: a manager.Runnable run by the leader only.
type GC struct {
	opts       Options
	collectors []Collector

	// mu serializes passes (the periodic one and Collect calls).
	mu sync.Mutex
	// clusters are the targets with metric series, forgotten when gone.
	clusters map[string]bool
}

var (
	_ manager.Runnable               = &GC{}
	_ manager.LeaderElectionRunnable = &GC{}
)

// New returns a collector.
func New(opts Options) (*GC, error) {
	if err := opts.validate(); err != nil {
		return nil, fmt.Errorf("garbage collector: %w", err)
	}
	return &GC{
		opts:       opts,
		collectors: append([]Collector{ChaperonCollector{}}, opts.Collectors...),
		clusters:   map[string]bool{},
	}, nil
}

// SetupWithManager reads the source through the manager (cache and API
// reader, unless set) and adds the collector to it.
func (g *GC) SetupWithManager(mgr ctrl.Manager) error {
	if g.opts.Reader == nil {
		g.opts.Reader = mgr.GetClient()
	}
	if g.opts.APIReader == nil {
		g.opts.APIReader = mgr.GetAPIReader()
	}
	return mgr.Add(g)
}

// NeedLeaderElection implements manager.LeaderElectionRunnable: only the
// leader collects.
func (g *GC) NeedLeaderElection() bool { return true }

// Start runs a pass InitialDelay after start and every Interval after,
// until ctx ends. A failed pass is logged and retried at the next one.
func (g *GC) Start(ctx context.Context) error {
	wait := g.opts.InitialDelay
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-g.opts.Clock.After(wait):
		}
		wait = g.opts.Interval
		r, err := g.Collect(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			g.opts.Logger.Error(err, "Garbage collection pass failed; retrying at the next pass", "deleted", len(r.Deleted), "interval", g.opts.Interval)
			continue
		}
		g.opts.Logger.V(1).Info("Garbage collection pass done", "checked", r.Checked, "deleted", len(r.Deleted), "young", len(r.Young), "skippedTargets", r.SkippedTargets)
	}
}

// Collect runs one pass synchronously: every Ready target, every namespace
// that matters, every collector. It goes on after an error and returns them
// all, with the report of what it did.
func (g *GC) Collect(ctx context.Context) (Report, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.opts.Reader == nil || g.opts.APIReader == nil {
		return Report{}, errors.New("garbage collector: no source reader (call SetupWithManager)")
	}
	var report Report
	var errs []error
	namespaces, err := g.namespaces(ctx)
	if err != nil {
		passesTotal.WithLabelValues("error").Inc()
		return report, err
	}
	seen := map[string]bool{}
	targets := g.opts.Targets.List()
	sort.Slice(targets, func(i, j int) bool { return targets[i].Key().String() < targets[j].Key().String() })
	for _, t := range targets {
		key := t.Key()
		seen[key.String()] = true
		if !t.Ready() {
			report.SkippedTargets = append(report.SkippedTargets, key.String())
			continue
		}
		nss := namespaces
		if key.Namespace != "" {
			nss = []string{key.Namespace}
		} else if !t.Self() {
			if err := g.collectNamespaces(ctx, t, &report); err != nil {
				errs = append(errs, fmt.Errorf("%s %s, namespaces: %w", key.Kind(), key, err))
			}
		}
		for _, ns := range nss {
			if ctx.Err() != nil {
				return report, ctx.Err()
			}
			for _, c := range g.collectors {
				s := &Scope{Target: t, Namespace: ns, SourceName: g.opts.SourceName, gc: g, kind: c.Kind()}
				err := c.Collect(ctx, s)
				report.add(s.report)
				if err != nil {
					errs = append(errs, fmt.Errorf("%s %s, namespace %s, %s: %w", key.Kind(), key, ns, c.Kind(), err))
				}
			}
		}
	}
	for cluster := range g.clusters {
		if !seen[cluster] {
			forgetCluster(cluster)
		}
	}
	g.clusters = seen
	result := "success"
	if len(errs) > 0 {
		result = "error"
	}
	passesTotal.WithLabelValues(result).Inc()
	return report, errors.Join(errs...)
}

// namespaces are the source namespaces that matter (proxy.Namespaces).
func (g *GC) namespaces(ctx context.Context) ([]string, error) {
	return proxypod.Namespaces(ctx, g.opts.Reader)
}

// ChaperonCollector collects PodChaperons (and with them, by owner
// reference, the delegates and candidates they hold).
type ChaperonCollector struct{}

// Kind implements Collector.
func (ChaperonCollector) Kind() string { return "PodChaperon" }

// Collect implements Collector: it lists this source's chaperons uncached
// and deletes the orphans.
func (ChaperonCollector) Collect(ctx context.Context, s *Scope) error {
	var list v1alpha1.PodChaperonList
	if err := s.Target.Client().List(ctx, &list, client.InNamespace(s.Namespace), s.OwnedSelector()); err != nil {
		return s.ListError(err)
	}
	s.Checked(len(list.Items))
	var errs []error
	for i := range list.Items {
		pc := &list.Items[i]
		if pc.DeletionTimestamp != nil || !s.Owned(pc) {
			continue
		}
		reason, err := s.orphanChaperon(ctx, pc)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if reason == "" {
			continue
		}
		if err := s.Delete(ctx, pc, reason); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
