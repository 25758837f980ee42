package follow

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
)

// Stage says how far a proxy pod is in its life, which decides what
// Ensure copies.
type Stage int

const (
	// StageCandidate: before a candidate is created in the target —
	// ServiceAccounts, ConfigMaps and the allowed kinds but Secrets.
	StageCandidate Stage = iota
	// StageDelegate: the target was elected, before the delegate may bind
	// — everything, Secrets included.
	StageDelegate
)

func (s Stage) String() string {
	if s == StageDelegate {
		return "Delegate"
	}
	return "Candidate"
}

// Options configure a Follower.
type Options struct {
	// SourceName is this cluster's name in its targets: the parent-cluster
	// label of every copy. Required.
	SourceName string
	// AllowedKinds are the Kind names (ConfigMap, PersistentVolumeClaim)
	// the follow annotation may ask for (--follow-allowed-kinds). A Kind
	// is allowed in any API group.
	AllowedKinds []string
	// Source reads ConfigMaps and ServiceAccounts of the source, usually
	// from the manager's cache. Required.
	Source client.Reader
	// SourceAPI reads Secrets and the other allowed kinds of the source
	// from its API server (uncached: Secrets are read by name when
	// referenced, never cached cluster-wide). Required.
	SourceAPI client.Reader
	// Mapper resolves the kinds of the follow annotation and of the
	// allow-list in the source: their API group, version and scope.
	// Required.
	Mapper meta.RESTMapper
	// ServiceLoadBalancers keeps a followed LoadBalancer Service a
	// LoadBalancer in the targets (--service-load-balancers): each target
	// then provisions its own. Off, its copies are ClusterIP Services.
	ServiceLoadBalancers bool
	// ServiceNodePorts keeps a followed NodePort Service a NodePort in the
	// targets (--service-node-ports): each target then opens the port on
	// its nodes. Off, its copies are ClusterIP Services.
	ServiceNodePorts bool
	// SecretNamespaces, when not empty, are the only namespaces whose
	// Secrets fleetlet reads (--secret-namespaces): a pod referencing a
	// Secret elsewhere is refused (ReasonForbidden) without a read.
	SecretNamespaces []string
	// Logger defaults to ctrl.Log.WithName("follow").
	Logger logr.Logger
}

// Follower copies the objects proxy pods reference to their targets, keeps
// the copies in sync and removes them when no proxy needs them. It is safe
// for concurrent use.
type Follower struct {
	opts    Options
	allowed map[string]bool

	mu     sync.Mutex
	counts counts
	// targetDefaultSA are the namespaces of targets whose own default
	// ServiceAccount was seen lately.
	targetDefaultSA seen
	// written remembers what Ensure wrote for each proxy, for Release.
	written written
	// followsDRA is set once a pod referencing a
	// ResourceClaimTemplate or ResourceClaim was seen: until then Release
	// does not list their copies (the garbage collector always does).
	followsDRA atomic.Bool
}

// New returns a Follower.
func New(opts Options) (*Follower, error) {
	var errs []error
	if opts.SourceName == "" {
		errs = append(errs, errors.New("the source name must be set"))
	}
	if opts.Source == nil || opts.SourceAPI == nil {
		errs = append(errs, errors.New("the source readers must be set"))
	}
	if opts.Mapper == nil {
		errs = append(errs, errors.New("the REST mapper must be set"))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("follower: %w", err)
	}
	if opts.Logger.GetSink() == nil {
		opts.Logger = ctrl.Log.WithName("follow")
	}
	f := &Follower{opts: opts, allowed: map[string]bool{}, counts: counts{}}
	for _, k := range opts.AllowedKinds {
		f.allowed[k] = true
	}
	return f, nil
}

// item is one object to follow, resolved.
type item struct {
	gvk      schema.GroupVersionKind
	name     string
	optional bool
	// what names it in a Refusal.
	what string
}

var coreV1 = corev1.SchemeGroupVersion

// conflictBackoff paces retries after a conflict: the replicas of one
// workload share their copies, and their proxies are reconciled in
// parallel. About a second in all; then the caller requeues.
var conflictBackoff = wait.Backoff{Steps: 10, Duration: 10 * time.Millisecond, Factor: 1.5, Jitter: 0.5}

// Check reports whether every kind refs asks for may be followed at all
// (known to the source, namespaced, in the allow-list): a *Refusal when
// not. Unlike a missing object or a clash, which filter one target, this
// refuses the pod everywhere — even in a self target, which follows
// SourceName is the name of the source cluster the copies are labelled
// with (Options.SourceName).
func (f *Follower) SourceName() string { return f.opts.SourceName }

// nothing: the pod asked for what the cluster does not allow.
func (f *Follower) Check(refs RefSet) error {
	_, err := f.resolve(refs)
	return err
}

// resolve turns refs into items: the annotation's kinds through the
// mapper and the allow-list, each object once, kube-root-ca.crt left out.
// A *Refusal is returned for the first reference that cannot be followed.
func (f *Follower) resolve(refs RefSet) ([]item, error) {
	var out []item
	index := map[string]int{}
	for _, r := range refs {
		it := item{name: r.Name, optional: r.Optional, what: r.String()}
		if r.Annotated {
			gvk, err := f.resolveKind(r)
			if err != nil {
				return nil, err
			}
			it.gvk = gvk
		} else {
			it.gvk = specGVK(r.Kind)
		}
		if it.gvk.Group == resourceV1.Group {
			f.followsDRA.Store(true)
		}
		if it.gvk.GroupKind() == configMapGK && it.name == RootCAConfigMap {
			continue
		}
		key := it.gvk.GroupKind().String() + "/" + it.name
		if i, ok := index[key]; ok {
			out[i].optional = out[i].optional && it.optional
			continue
		}
		index[key] = len(out)
		out = append(out, it)
	}
	return out, nil
}

// resolveKind resolves a kind of the follow annotation: known to the
// source, namespaced, allowed.
func (f *Follower) resolveKind(r Ref) (schema.GroupVersionKind, error) {
	refuse := func(reason Reason, format string, args ...any) (schema.GroupVersionKind, error) {
		return schema.GroupVersionKind{}, &Refusal{Object: r.String(), Reason: reason, Message: fmt.Sprintf(format, args...)}
	}
	gr := schema.ParseGroupResource(strings.ToLower(r.Kind))
	gvk, err := f.opts.Mapper.KindFor(gr.WithVersion(""))
	switch {
	case meta.IsNoMatchError(err):
		return refuse(ReasonNotAllowed, "the source serves no kind %q", r.Kind)
	case meta.IsAmbiguousError(err):
		return refuse(ReasonMalformed, "%q names more than one kind: qualify it with its API group (kind.group/name)", r.Kind)
	case err != nil:
		return schema.GroupVersionKind{}, fmt.Errorf("resolving the kind %q: %w", r.Kind, err)
	}
	mapping, err := f.opts.Mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return schema.GroupVersionKind{}, fmt.Errorf("resolving the kind %q: %w", r.Kind, err)
	}
	if mapping.Scope.Name() != meta.RESTScopeNameNamespace {
		return refuse(ReasonClusterScoped, "%s is cluster-scoped: only namespaced objects are followed", gvk.Kind)
	}
	if !f.allowed[gvk.Kind] {
		allowed := make([]string, 0, len(f.allowed))
		for k := range f.allowed {
			allowed = append(allowed, k)
		}
		slices.Sort(allowed)
		return refuse(ReasonNotAllowed, "the kind %s is not allowed to follow (allowed: %s)", gvk.Kind, strings.Join(allowed, ", "))
	}
	return gvk, nil
}

// Ensure places what proxy needs in its namespace of a target before the
// stage begins, and records proxy as a follower of each copy: it creates
// missing copies, and updates this source's own copies (follower added,
// content brought up to date). Objects whose optional references do not
// exist are skipped, as are service-account-token Secrets; an existing
// ServiceAccount of the same name, whoever made it, satisfies the need and
// is left alone.
//
// A *Refusal says why the target cannot have the pod: a kind not allowed
// or cluster-scoped, an object missing in the source, or a name taken in
// the target by an object this source did not create (which is left
// untouched). Every object is checked before any is written, so a refusal
// known beforehand writes nothing; copies already written when a refusal
// arises later (a clash created meanwhile) stay, and Release removes them.
//
// targetName is the target's key (fleet.Key.String()): the metrics'
// cluster label. Never call Ensure for a self target (it follows nothing)
// or for a proxy being deleted. Conflicts are retried.
func (f *Follower) Ensure(ctx context.Context, target client.Client, targetName string, proxy *corev1.Pod, refs RefSet, stage Stage) error {
	f.written.used(time.Now())
	err := f.ensure(ctx, target, targetName, proxy, refs, stage)
	f.countError(targetName, err)
	return err
}

func (f *Follower) ensure(ctx context.Context, target client.Client, targetName string, proxy *corev1.Pod, refs RefSet, stage Stage) error {
	items, err := f.resolve(refs)
	if err != nil {
		return err
	}
	type plan struct {
		it  item
		src *unstructured.Unstructured
	}
	var plans []plan
	for _, it := range items {
		// Secrets are copied to the elected target only, but checked in
		// every candidate's: a missing one or a clash filters the target
		// now rather than after its election.
		checkOnly := it.gvk.GroupKind() == secretGK && stage < StageDelegate
		if it.gvk.GroupKind() == secretGK && len(f.opts.SecretNamespaces) > 0 && !slices.Contains(f.opts.SecretNamespaces, proxy.Namespace) {
			return &Refusal{Object: it.what, Reason: ReasonForbidden, Message: fmt.Sprintf(
				"fleetlet reads no Secret in namespace %s (the manager's --secret-namespaces, chart value manager.secretNamespaces, leaves it out; the cluster admin can add it)", proxy.Namespace)}
		}
		src, err := f.readSource(ctx, it.gvk, proxy.Namespace, it.name)
		if apierrors.IsForbidden(err) {
			return &Refusal{Object: it.what, Reason: ReasonForbidden, Message: fmt.Sprintf(
				"fleetlet may not read it in the source (where the manager reads Secrets only in some namespaces, --secret-namespaces, chart value manager.secretNamespaces, the cluster admin can add this one): %v", err)}
		}
		if err != nil {
			return err
		}
		if src != nil && isTokenSecret(src) {
			continue
		}
		defaultSA := it.gvk.GroupKind() == serviceAccountGK && it.name == DefaultServiceAccount
		if defaultSA && f.targetDefaultSA.Has(targetName, proxy.Namespace) {
			// Seen moments ago: every candidate of a burst would read it.
			continue
		}
		existing, err := getCopy(ctx, target, it.gvk, proxy.Namespace, it.name)
		if err != nil {
			if r := unavailable(it, err); r != nil {
				return r
			}
			return fmt.Errorf("reading %s %s/%s in %s: %w", it.gvk.Kind, proxy.Namespace, it.name, targetName, err)
		}
		satisfied, err := f.check(it, src, existing)
		if err != nil {
			return err
		}
		if defaultSA && satisfied && existing != nil && !f.owned(existing) {
			f.targetDefaultSA.Add(targetName, proxy.Namespace)
		}
		if !satisfied && !checkOnly {
			plans = append(plans, plan{it, src})
		}
	}
	for _, p := range plans {
		if err := f.write(ctx, target, targetName, p.it, p.src, proxy); err != nil {
			return err
		}
	}
	return nil
}

// check decides what an item needs, given the source object and the
// object of that name in the target (nil when missing): nothing
// (satisfied), a write, or a refusal.
func (f *Follower) check(it item, src, existing *unstructured.Unstructured) (satisfied bool, err error) {
	gk := it.gvk.GroupKind()
	switch {
	case gk == serviceAccountGK && existing != nil && !f.owned(existing):
		// Running as a ServiceAccount of the target's is running with its
		// rights there: only "default" and one the target's admin marked
		// for this source may stand in for the source's.
		if it.name == DefaultServiceAccount || existing.GetLabels()[v1alpha1.SourceLabelPrefix+f.opts.SourceName] == "true" {
			return true, nil
		}
		return false, &Refusal{Object: it.what, Reason: ReasonClash, Message: fmt.Sprintf(
			"the target already has a ServiceAccount %s that fleetlet did not make: a delegate would run with its rights there; its admin can allow that with the label %s%s=true",
			it.name, v1alpha1.SourceLabelPrefix, f.opts.SourceName)}
	case gk == serviceAccountGK && existing != nil && src == nil:
		return true, nil
	case src == nil && it.optional:
		return true, nil
	case src == nil:
		return false, &Refusal{Object: it.what, Reason: ReasonNotFound,
			Message: fmt.Sprintf("%s %s does not exist in the source", it.gvk.Kind, it.name)}
	case existing != nil && !f.owned(existing):
		return false, f.clash(it, existing)
	}
	return false, nil
}

func (f *Follower) clash(it item, existing metav1.Object) *Refusal {
	who := "was not created by fleetlet"
	if other := existing.GetLabels()[v1alpha1.LabelParentCluster]; other != "" {
		who = fmt.Sprintf("belongs to the source %q", other)
	}
	return &Refusal{Object: it.what, Reason: ReasonClash,
		Message: fmt.Sprintf("the target already has a %s %s that %s", it.gvk.Kind, it.name, who)}
}

// write creates or updates the copy of src for it, adding proxy (if not
// nil) to its followers.
func (f *Follower) write(ctx context.Context, target client.Client, targetName string, it item, src *unstructured.Unstructured, proxy *corev1.Pod) error {
	log := f.opts.Logger.WithValues("target", targetName, "kind", it.gvk.Kind, "object", klog.KObj(src))
	if proxy != nil {
		// Before the write: one that fails after the API server took it
		// is released all the same.
		f.written.add(targetName, proxy.UID, copyRef{gvk: it.gvk, namespace: src.GetNamespace(), name: src.GetName()})
	}
	desired := desiredCopy(src, f.opts.SourceName)
	err := retry.OnError(conflictBackoff, retriable, func() error {
		existing, err := getCopy(ctx, target, it.gvk, src.GetNamespace(), src.GetName())
		if err != nil {
			return err
		}
		if existing == nil {
			if proxy == nil {
				return nil
			}
			obj := desired.DeepCopy()
			setFollowers(obj, followers{proxy.UID: proxy.Name})
			log.V(2).Info("Creating a copy", "proxy", klog.KObj(proxy))
			if err := target.Create(ctx, obj); err != nil {
				return err
			}
			f.addCount(targetName, it.gvk.Kind, src.GetNamespace(), 1)
			return nil
		}
		if satisfied, err := f.check(it, src, existing); satisfied || err != nil {
			return err
		}
		if existing.GetDeletionTimestamp() != nil {
			return fmt.Errorf("the copy of %s %s in %s is being deleted; retrying later", it.gvk.Kind, klog.KObj(src), targetName)
		}
		fl := followersOf(existing)
		if proxy != nil {
			fl[proxy.UID] = proxy.Name
		}
		want := mergeInto(existing, desired)
		setFollowers(want, fl)
		if mustRecreate(existing, want) {
			log.Info("Recreating a copy whose source changed an immutable field")
			if err := deleteCopy(ctx, target, existing); err != nil {
				return err
			}
			f.addCount(targetName, it.gvk.Kind, src.GetNamespace(), -1)
			obj := desired.DeepCopy()
			setFollowers(obj, fl)
			if err := target.Create(ctx, obj); err != nil {
				return err
			}
			f.addCount(targetName, it.gvk.Kind, src.GetNamespace(), 1)
			return nil
		}
		if equality.Semantic.DeepEqual(existing.Object, want.Object) {
			return nil
		}
		log.V(2).Info("Updating a copy", "followers", len(fl))
		return target.Update(ctx, want)
	})
	if err != nil {
		var refusal *Refusal
		if errors.As(err, &refusal) {
			return err
		}
		if r := unavailable(it, err); r != nil {
			return r
		}
		return fmt.Errorf("copying %s %s to %s: %w", it.gvk.Kind, klog.KObj(src), targetName, err)
	}
	return nil
}

// Release removes a proxy pod from the followers of this source's copies in
// a namespace of a target, and deletes the copies no one follows any
// more. Call it when a candidate is deleted (another target won, the
// proxy went) and when a target is filtered after Ensure wrote to it.
// It reads by name the copies this Follower wrote for the proxy; for a
// proxy it may not have seen from the start, it lists every followed kind.
func (f *Follower) Release(ctx context.Context, target client.Client, targetName string, proxy *corev1.Pod) error {
	f.written.used(time.Now())
	var err error
	if refs, known := f.written.take(targetName, proxy.UID, proxy.CreationTimestamp.Time); known {
		err = f.releaseWritten(ctx, target, targetName, proxy.UID, refs)
	} else {
		err = f.releaseListed(ctx, target, targetName, proxy.UID, proxy.Namespace)
	}
	f.countError(targetName, err)
	return err
}

// Forget drops what the Follower remembers of a proxy that is gone (its
// finalizer removed): a copy a Release missed keeps its follower until the
// garbage collector drops it.
func (f *Follower) Forget(proxyUID types.UID) { f.written.forget(proxyUID) }

// releaseWritten releases the proxy from the copies refs names; those it
// could not are remembered again, for the next Release.
func (f *Follower) releaseWritten(ctx context.Context, target client.Client, targetName string, proxyUID types.UID, refs []copyRef) error {
	var errs []error
	for _, ref := range refs {
		if err := f.releaseOne(ctx, target, targetName, proxyUID, ref); err != nil {
			errs = append(errs, err)
			f.written.add(targetName, proxyUID, ref)
		}
	}
	return errors.Join(errs...)
}

func (f *Follower) releaseOne(ctx context.Context, target client.Client, targetName string, proxyUID types.UID, ref copyRef) error {
	cp, err := getCopy(ctx, target, ref.gvk, ref.namespace, ref.name)
	if err != nil {
		if skippable(ref.gvk, err) {
			return nil
		}
		return fmt.Errorf("reading the copy of %s %s/%s in %s: %w", ref.gvk.Kind, ref.namespace, ref.name, targetName, err)
	}
	if cp == nil || !f.owned(cp) {
		return nil
	}
	if _, ok := followersOf(cp)[proxyUID]; !ok {
		return nil
	}
	_, err = f.dropFollowers(ctx, target, targetName, cp, map[types.UID]bool{proxyUID: true}, "released by proxy "+string(proxyUID))
	return err
}

// releaseListed releases the proxy from every copy of the namespace that
// lists it as a follower.
func (f *Follower) releaseListed(ctx context.Context, target client.Client, targetName string, proxyUID types.UID, namespace string) error {
	var errs []error
	for _, gvk := range f.followedKinds(f.followsDRA.Load()) {
		list, err := f.listOwned(ctx, target, gvk, namespace)
		if err != nil {
			if skippable(gvk, err) {
				continue
			}
			errs = append(errs, fmt.Errorf("listing %s copies in %s/%s: %w", gvk.Kind, targetName, namespace, err))
			continue
		}
		for i := range list {
			if _, ok := followersOf(&list[i])[proxyUID]; !ok {
				continue
			}
			drop := map[types.UID]bool{proxyUID: true}
			if _, err := f.dropFollowers(ctx, target, targetName, &list[i], drop, "released by proxy "+string(proxyUID)); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// Sync pushes the source object's current content (data, labels,
// annotations) to this source's copy of it in a target, if there is one;
// followers are unchanged. Call it for every target when a ConfigMap,
// Secret, ServiceAccount or followed object changes in the source.
//
// When the source object is gone, a copy without followers is deleted,
// and a copy that proxies still follow is kept: Sync returns a
// *SourceGone, which the caller reports with an Event.
func (f *Follower) Sync(ctx context.Context, target client.Client, targetName string, gk schema.GroupKind, namespace, name string) error {
	err := f.sync(ctx, target, targetName, gk, namespace, name)
	f.countError(targetName, err)
	return err
}

func (f *Follower) sync(ctx context.Context, target client.Client, targetName string, gk schema.GroupKind, namespace, name string) error {
	gvk := coreV1.WithKind(gk.Kind)
	if gk.Group != "" || exactFields[gk] == nil {
		mapping, err := f.opts.Mapper.RESTMapping(gk)
		if err != nil {
			return fmt.Errorf("resolving %s: %w", gk, err)
		}
		gvk = mapping.GroupVersionKind
	}
	existing, err := getCopy(ctx, target, gvk, namespace, name)
	if err != nil {
		if skippable(gvk, err) {
			return nil
		}
		return fmt.Errorf("reading the copy of %s %s/%s in %s: %w", gk.Kind, namespace, name, targetName, err)
	}
	if existing == nil || !f.owned(existing) {
		return nil
	}
	src, err := f.readSource(ctx, gvk, namespace, name)
	if err != nil {
		return err
	}
	if src == nil {
		fl := followersOf(existing)
		if len(fl) > 0 {
			return &SourceGone{Kind: gvk.Kind, Namespace: namespace, Name: name, Followers: fl.uids()}
		}
		_, err := f.dropFollowers(ctx, target, targetName, existing, nil, "its source is gone")
		return err
	}
	it := item{gvk: gvk, name: name, what: gvk.Kind + " " + name}
	return f.write(ctx, target, targetName, it, src, nil)
}

// dropFollowers removes the followers in drop from a copy (retrying on
// conflicts from a fresh read) and deletes it when none is left, with UID
// and resourceVersion preconditions so that a follower added meanwhile
// keeps it. It reports whether the copy was deleted.
func (f *Follower) dropFollowers(ctx context.Context, target client.Client, targetName string, obj *unstructured.Unstructured, drop map[types.UID]bool, why string) (bool, error) {
	cur := obj.DeepCopy()
	first, deleted := true, false
	err := retry.RetryOnConflict(conflictBackoff, func() error {
		if !first {
			fresh, err := getCopy(ctx, target, cur.GroupVersionKind(), cur.GetNamespace(), cur.GetName())
			if err != nil {
				return err
			}
			if fresh == nil || fresh.GetUID() != obj.GetUID() {
				return nil
			}
			cur = fresh
		}
		first = false
		fl := followersOf(cur)
		before := len(fl)
		for uid := range drop {
			delete(fl, uid)
		}
		if len(fl) == 0 && cur.GroupVersionKind().GroupKind() != pvcGK {
			// (A claim stays, with no follower: see deleteCopy.)
			f.opts.Logger.Info("Deleting a copy no proxy follows", "target", targetName, "kind", cur.GetKind(), "object", klog.KObj(cur), "reason", why)
			if err := deleteCopy(ctx, target, cur); err != nil {
				return err
			}
			deleted = true
			f.addCount(targetName, cur.GetKind(), cur.GetNamespace(), -1)
			return nil
		}
		if len(fl) == before {
			return nil
		}
		setFollowers(cur, fl)
		return target.Update(ctx, cur)
	})
	if err != nil {
		return false, fmt.Errorf("releasing %s %s in %s: %w", obj.GetKind(), klog.KObj(obj), targetName, err)
	}
	return deleted, nil
}

// owned reports whether a target object is this source's copy.
func (f *Follower) owned(obj metav1.Object) bool {
	return obj.GetLabels()[v1alpha1.LabelParentCluster] == f.opts.SourceName
}

// followedKinds are the kinds copies may have: ConfigMap, Secret,
// ServiceAccount, ResourceClaimTemplate and ResourceClaim when
// withClaimTemplates, and the
// allowed kinds the source knows.
func (f *Follower) followedKinds(withClaimTemplates bool) []schema.GroupVersionKind {
	out := []schema.GroupVersionKind{coreV1.WithKind(KindConfigMap), coreV1.WithKind(KindSecret), coreV1.WithKind(KindServiceAccount)}
	if withClaimTemplates {
		out = append(out, specGVK(KindResourceClaimTemplate), specGVK(KindResourceClaim))
	}
	kinds := make([]string, 0, len(f.allowed))
	for k := range f.allowed {
		kinds = append(kinds, k)
	}
	slices.Sort(kinds)
	for _, k := range kinds {
		if gvk, ok := f.allowedGVK(k); ok && exactFields[gvk.GroupKind()] == nil {
			out = append(out, gvk)
		}
	}
	return out
}

// allowedGVK resolves an allowed Kind name in the source; false when the
// source does not serve it (or serves it cluster-scoped).
func (f *Follower) allowedGVK(kind string) (schema.GroupVersionKind, bool) {
	gvks, err := f.opts.Mapper.KindsFor(schema.GroupVersionResource{Resource: strings.ToLower(kind)})
	if err != nil {
		return schema.GroupVersionKind{}, false
	}
	for _, gvk := range gvks {
		if gvk.Kind != kind {
			continue
		}
		mapping, err := f.opts.Mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err == nil && mapping.Scope.Name() == meta.RESTScopeNameNamespace {
			return gvk, true
		}
	}
	return schema.GroupVersionKind{}, false
}

func (f *Follower) listOwned(ctx context.Context, target client.Client, gvk schema.GroupVersionKind, namespace string) ([]unstructured.Unstructured, error) {
	list := &unstructured.UnstructuredList{}
	list.SetGroupVersionKind(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
	if err := target.List(ctx, list, client.InNamespace(namespace), client.MatchingLabels{v1alpha1.LabelParentCluster: f.opts.SourceName}); err != nil {
		return nil, err
	}
	for i := range list.Items {
		list.Items[i].SetGroupVersionKind(gvk)
	}
	return list.Items, nil
}

// readSource reads a source object, nil when it does not exist:
// ConfigMaps and ServiceAccounts through Source, Secrets and other kinds
// through SourceAPI.
func (f *Follower) readSource(ctx context.Context, gvk schema.GroupVersionKind, namespace, name string) (*unstructured.Unstructured, error) {
	key := types.NamespacedName{Namespace: namespace, Name: name}
	var obj client.Object
	reader := f.opts.SourceAPI
	switch gvk.GroupKind() {
	case configMapGK:
		obj, reader = &corev1.ConfigMap{}, f.opts.Source
	case serviceAccountGK:
		obj, reader = &corev1.ServiceAccount{}, f.opts.Source
	case secretGK:
		obj = &corev1.Secret{}
	default:
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(gvk)
		obj = u
	}
	if err := reader.Get(ctx, key, obj); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("reading %s %s in the source: %w", gvk.Kind, key, err)
	}
	if u, ok := obj.(*unstructured.Unstructured); ok {
		return u, nil
	}
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return nil, fmt.Errorf("converting %s %s: %w", gvk.Kind, key, err)
	}
	u := &unstructured.Unstructured{Object: m}
	u.SetGroupVersionKind(gvk)
	return u, nil
}

// getCopy reads an object of a target, nil when it does not exist.
func getCopy(ctx context.Context, target client.Client, gvk schema.GroupVersionKind, namespace, name string) (*unstructured.Unstructured, error) {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(gvk)
	if err := target.Get(ctx, types.NamespacedName{Namespace: namespace, Name: name}, u); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, err
	}
	return u, nil
}

// deleteCopy deletes exactly the copy read: a copy changed or replaced
// meanwhile is a conflict, one already gone is fine. A claim is never
// deleted here, whatever its followers: its data goes only with its source
// claim (package claims, which adopts the copies an earlier fleetlet made
// through the follow annotation).
func deleteCopy(ctx context.Context, target client.Client, obj *unstructured.Unstructured) error {
	if obj.GroupVersionKind().GroupKind() == pvcGK {
		return nil
	}
	err := target.Delete(ctx, obj, client.Preconditions{UID: ptr.To(obj.GetUID()), ResourceVersion: ptr.To(obj.GetResourceVersion())})
	return client.IgnoreNotFound(err)
}

// unavailable turns a target's refusal to serve a kind to this source
// into a *Refusal: the target cannot have the pod until its admin grants
// it (or installs the kind).
func unavailable(it item, err error) *Refusal {
	switch {
	case apierrors.IsForbidden(err):
		return &Refusal{Object: it.what, Reason: ReasonForbidden,
			Message: fmt.Sprintf("the target does not let this source manage %s objects here: %v", it.gvk.Kind, err)}
	case meta.IsNoMatchError(err):
		return &Refusal{Object: it.what, Reason: ReasonForbidden,
			Message: fmt.Sprintf("the target does not serve %s", it.gvk.GroupKind())}
	}
	return nil
}

func isTokenSecret(src *unstructured.Unstructured) bool {
	return src.GroupVersionKind().GroupKind() == secretGK && src.Object["type"] == secretTypeServiceAccountToken
}

func retriable(err error) bool {
	return apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err)
}

// skippable reports whether a kind's error in a target means no copy of
// ours can be there: the target does not serve an allowed kind, or does
// not let this source read it.
func skippable(gvk schema.GroupVersionKind, err error) bool {
	if meta.IsNoMatchError(err) {
		return true
	}
	return exactFields[gvk.GroupKind()] == nil && apierrors.IsForbidden(err)
}

// countError counts a failed call in fleetlet_follow_errors_total.
func (f *Follower) countError(targetName string, err error) {
	if err == nil {
		return
	}
	reason := "Error"
	var refusal *Refusal
	var gone *SourceGone
	switch {
	case errors.As(err, &refusal):
		reason = string(refusal.Reason)
	case errors.As(err, &gone):
		reason = "SourceGone"
	}
	errorsTotal.WithLabelValues(targetName, reason).Inc()
}
