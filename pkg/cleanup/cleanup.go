package cleanup

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
	"github.com/fleetlet/fleetlet/pkg/naming"
	"github.com/fleetlet/fleetlet/pkg/proxy"
	"github.com/fleetlet/fleetlet/pkg/source/fleet"
	"github.com/fleetlet/fleetlet/pkg/target/access"
)

// Defaults for Options.
const (
	DefaultTimeout      = 2 * time.Minute
	DefaultPollInterval = time.Second
)

// requestTimeout bounds one request to a target.
const requestTimeout = 30 * time.Second

// Options configure Run.
type Options struct {
	// Client is an administrator's client of this cluster, uncached, with
	// a scheme that knows fleetlet's types. Required.
	Client client.Client
	// SourceName, when set, is this cluster's name as a source: a chaperon
	// in a target is deleted only when it carries parent-cluster=SourceName
	// (it must carry the proxy's parent-uid in any case).
	SourceName string
	// Timeout bounds the wait for the chaperons in targets to be gone
	// (default DefaultTimeout).
	Timeout time.Duration
	// PollInterval is how often they are checked (default
	// DefaultPollInterval).
	PollInterval time.Duration
	// DryRun only counts what would be done.
	DryRun bool
	// Logger defaults to ctrl.Log.WithName("cleanup").
	Logger logr.Logger
}

// Summary counts what Run did (or, in a dry run, would do).
type Summary struct {
	// GatedProxiesDeleted: proxies never elected, deleted (never ungated).
	GatedProxiesDeleted int
	// RemoteChaperonsDeleted: this source's chaperons deleted in targets.
	RemoteChaperonsDeleted int
	// FinalizersRemoved: pods that lost the delegate finalizer.
	FinalizersRemoved int
	// VirtualNodesDeleted: virtual nodes deleted.
	VirtualNodesDeleted int
	// ChaperonsDeleted: PodChaperons of any source deleted in this cluster
	// (target side).
	ChaperonsDeleted int
	// SourceFinalizersRemoved: Sources that lost fleetlet's finalizer.
	SourceFinalizersRemoved int
	// TargetFinalizersRemoved: Targets and ClusterTargets that lost the
	// drain finalizer.
	TargetFinalizersRemoved int
	// ClusterObjectsDeleted: fleetlet's own ClusterRoles and PriorityClass.
	ClusterObjectsDeleted int
	// SourceIdentitiesDeleted: what the Source and ClusterSource
	// controllers made for sources (ServiceAccounts, Roles, RoleBindings,
	// ClusterRoleBindings).
	SourceIdentitiesDeleted int
	// Problems are what could not be done.
	Problems []string
}

// Print writes the summary for a user.
func (s Summary) Print(w io.Writer, dryRun bool) {
	verb := ""
	if dryRun {
		verb = " (dry run: would be)"
	}
	fmt.Fprintf(w, "fleetlet cleanup%s:\n", verb)
	for _, l := range []struct {
		n    int
		what string
	}{
		{s.GatedProxiesDeleted, "gated proxy pods deleted (never ungated)"},
		{s.RemoteChaperonsDeleted, "chaperons deleted in targets"},
		{s.FinalizersRemoved, "pods freed of the " + v1alpha1.FinalizerDelegate + " finalizer"},
		{s.VirtualNodesDeleted, "virtual nodes deleted"},
		{s.ChaperonsDeleted, "PodChaperons deleted in this cluster"},
		{s.SourceFinalizersRemoved, "Sources freed of fleetlet's finalizer"},
		{s.TargetFinalizersRemoved, "Targets and ClusterTargets freed of the " + v1alpha1.FinalizerDrain + " finalizer"},
		{s.ClusterObjectsDeleted, "ClusterRoles and PriorityClasses deleted"},
		{s.SourceIdentitiesDeleted, "sources' ServiceAccounts, Roles and bindings deleted"},
	} {
		fmt.Fprintf(w, "  %d %s\n", l.n, l.what)
	}
	if len(s.Problems) > 0 {
		fmt.Fprintf(w, "%d problems:\n", len(s.Problems))
		for _, p := range s.Problems {
			fmt.Fprintf(w, "  - %s\n", p)
		}
	}
}

// Run cleans up this cluster, source side then target side. It goes on past
// what it cannot do and returns it all as the error.
func Run(ctx context.Context, opts Options) (Summary, error) {
	if opts.Client == nil {
		return Summary{}, errors.New("cleanup: no client")
	}
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultTimeout
	}
	if opts.PollInterval <= 0 {
		opts.PollInterval = DefaultPollInterval
	}
	if opts.Logger.GetSink() == nil {
		opts.Logger = ctrl.Log.WithName("cleanup")
	}
	r := &run{opts: opts, c: opts.Client, log: opts.Logger}
	r.sourceSide(ctx)
	r.targetSide(ctx)
	if len(r.sum.Problems) > 0 {
		return r.sum, fmt.Errorf("cleanup left %d problems: %s", len(r.sum.Problems), strings.Join(r.sum.Problems, "; "))
	}
	return r.sum, nil
}

type run struct {
	opts Options
	c    client.Client
	log  logr.Logger
	sum  Summary
}

func (r *run) problem(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	r.log.Error(errors.New(msg), "Cleanup step failed")
	r.sum.Problems = append(r.sum.Problems, msg)
}

// notInstalled reports an error that says a kind (a CRD) does not exist.
func notInstalled(err error) bool {
	return meta.IsNoMatchError(err) || apierrors.IsNotFound(err) || isNoResourceMatch(err)
}

func isNoResourceMatch(err error) bool {
	var d *meta.NoResourceMatchError
	return errors.As(err, &d)
}

func hasFinalizer(o client.Object) bool { return proxy.IsManaged(o) }

func gated(p *corev1.Pod) bool { return proxy.Gated(p) }

// remote is one target reached with its own credentials.
type remote struct {
	key proxy.TargetKey
	c   client.Client
}

// proxyState follows one pod carrying the delegate finalizer.
type proxyState struct {
	pod *corev1.Pod
	// blocked: a chaperon could not be confirmed gone; the finalizer stays.
	blocked bool
	// waiting are its chaperons deleted and not yet gone.
	waiting []waitingChaperon
}

type waitingChaperon struct {
	remote *remote
	key    types.NamespacedName
	uid    types.UID
}

func (r *run) sourceSide(ctx context.Context) {
	pods, err := r.proxies(ctx)
	if err != nil {
		r.problem("listing pods: %v", err)
		return
	}
	var proxies []*proxyState
	for i := range pods {
		p := &pods[i]
		if gated(p) && p.DeletionTimestamp == nil {
			r.log.Info("Deleting a proxy that was never elected", "pod", klog.KObj(p))
			r.sum.GatedProxiesDeleted++
			if !r.opts.DryRun {
				err := r.c.Delete(ctx, p, client.Preconditions{UID: ptr.To(p.UID)})
				if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
					r.problem("deleting gated proxy %s: %v", klog.KObj(p), err)
				}
			}
		}
		proxies = append(proxies, &proxyState{pod: p})
	}

	remotes, blockedNS, allBlocked := r.targets(ctx)
	for _, ps := range proxies {
		if allBlocked || blockedNS[ps.pod.Namespace] {
			ps.blocked = true
		}
		for _, rm := range remotes {
			if rm.key.Namespace != "" && rm.key.Namespace != ps.pod.Namespace {
				continue
			}
			r.deleteChaperon(ctx, rm, ps)
		}
	}
	if !r.opts.DryRun {
		r.waitChaperons(ctx, proxies)
	}

	bound := map[string]int{} // node → pods that keep the finalizer
	for _, ps := range proxies {
		if ps.blocked {
			if ps.pod.Spec.NodeName != "" {
				bound[ps.pod.Spec.NodeName]++
			}
			continue
		}
		r.log.Info("Removing the delegate finalizer", "pod", klog.KObj(ps.pod))
		r.sum.FinalizersRemoved++
		if !r.opts.DryRun {
			if err := RemoveFinalizer(ctx, r.c, ps.pod, v1alpha1.FinalizerDelegate); err != nil {
				r.problem("removing the finalizer of pod %s: %v", klog.KObj(ps.pod), err)
				if ps.pod.Spec.NodeName != "" {
					bound[ps.pod.Spec.NodeName]++
				}
			}
		}
	}
	r.deleteVirtualNodes(ctx, bound)
	r.releaseTargets(ctx)
}

// releaseTargets removes the drain finalizer from every Target and
// ClusterTarget: with fleetlet gone, nothing would ever drain them.
func (r *run) releaseTargets(ctx context.Context) {
	var cts v1alpha1.ClusterTargetList
	var ts v1alpha1.TargetList
	var objs []client.Object
	if err := r.c.List(ctx, &cts); err != nil {
		if !notInstalled(err) {
			r.problem("listing ClusterTargets: %v", err)
		}
	}
	for i := range cts.Items {
		objs = append(objs, &cts.Items[i])
	}
	if err := r.c.List(ctx, &ts); err != nil {
		if !notInstalled(err) {
			r.problem("listing Targets: %v", err)
		}
	}
	for i := range ts.Items {
		objs = append(objs, &ts.Items[i])
	}
	for _, o := range objs {
		if !containsString(o.GetFinalizers(), v1alpha1.FinalizerDrain) {
			continue
		}
		r.sum.TargetFinalizersRemoved++
		if r.opts.DryRun {
			continue
		}
		if err := RemoveFinalizer(ctx, r.c, o, v1alpha1.FinalizerDrain); err != nil {
			r.problem("removing the drain finalizer of %s: %v", klog.KObj(o), err)
		}
	}
}

// proxies lists, page by page, every pod that carries the delegate
// finalizer.
func (r *run) proxies(ctx context.Context) ([]corev1.Pod, error) {
	var out []corev1.Pod
	cont := ""
	for {
		var list corev1.PodList
		if err := r.c.List(ctx, &list, client.Limit(500), client.Continue(cont)); err != nil {
			return nil, err
		}
		for i := range list.Items {
			if hasFinalizer(&list.Items[i]) {
				out = append(out, list.Items[i])
			}
		}
		if cont = list.Continue; cont == "" {
			return out, nil
		}
	}
}

// targets connects to every Target and ClusterTarget that still exists. A
// target that cannot be reached blocks the proxies in its scope: those of
// its namespace (blockedNS) or all of them (allBlocked).
func (r *run) targets(ctx context.Context) (remotes []*remote, blockedNS map[string]bool, allBlocked bool) {
	blockedNS = map[string]bool{}
	var keys []proxy.TargetKey
	specs := map[proxy.TargetKey]v1alpha1.TargetSpec{}
	var tl v1alpha1.TargetList
	if err := r.c.List(ctx, &tl); err != nil {
		if !notInstalled(err) {
			r.problem("listing Targets: %v", err)
			allBlocked = true
		}
	}
	for _, t := range tl.Items {
		k := proxy.TargetKey{Namespace: t.Namespace, Name: t.Name}
		keys = append(keys, k)
		specs[k] = t.Spec
	}
	var ctl v1alpha1.ClusterTargetList
	if err := r.c.List(ctx, &ctl); err != nil {
		if !notInstalled(err) {
			r.problem("listing ClusterTargets: %v", err)
			allBlocked = true
		}
	}
	for _, t := range ctl.Items {
		k := proxy.TargetKey{Name: t.Name}
		keys = append(keys, k)
		specs[k] = t.Spec
	}
	for _, k := range keys {
		spec := specs[k]
		c, err := r.connect(ctx, k, &spec)
		if err != nil {
			r.problem("%s %s: %v", k.Kind(), k, err)
			if k.Namespace == "" {
				allBlocked = true
			} else {
				blockedNS[k.Namespace] = true
			}
			continue
		}
		remotes = append(remotes, &remote{key: k, c: c})
	}
	return remotes, blockedNS, allBlocked
}

// connect builds a client for a target as the registry does: this
// cluster's own client for a self target, else the kubeconfig of its
// Secret, sanitised by fleet.RESTConfigFromKubeconfig.
func (r *run) connect(ctx context.Context, k proxy.TargetKey, spec *v1alpha1.TargetSpec) (client.Client, error) {
	if spec.Self {
		return r.c, nil
	}
	ref := spec.KubeconfigSecret
	if ref == nil {
		return nil, errors.New("neither self nor kubeconfigSecret is set")
	}
	ns := k.Namespace
	if ns == "" {
		ns = ref.Namespace
	}
	dataKey := ref.Key
	if dataKey == "" {
		dataKey = v1alpha1.DefaultKubeconfigKey
	}
	var secret corev1.Secret
	if err := r.c.Get(ctx, types.NamespacedName{Namespace: ns, Name: ref.Name}, &secret); err != nil {
		return nil, fmt.Errorf("reading its kubeconfig Secret %s/%s: %w", ns, ref.Name, err)
	}
	data, ok := secret.Data[dataKey]
	if !ok {
		return nil, fmt.Errorf("its kubeconfig Secret %s/%s has no key %q", ns, ref.Name, dataKey)
	}
	cfg, err := fleet.RESTConfigFromKubeconfig(data, ref.Context)
	if err != nil {
		return nil, fmt.Errorf("its kubeconfig Secret %s/%s key %q: %w", ns, ref.Name, dataKey, err)
	}
	cfg.Timeout = requestTimeout
	cfg.UserAgent = "fleetlet-cleanup"
	return client.New(cfg, client.Options{Scheme: r.c.Scheme()})
}

// deleteChaperon deletes, Foreground, the proxy's chaperon in one target,
// if there is one of this proxy's (and this source's, when named).
func (r *run) deleteChaperon(ctx context.Context, rm *remote, ps *proxyState) {
	p := ps.pod
	key := types.NamespacedName{Namespace: p.Namespace, Name: naming.RemoteName(p.Name, p.UID)}
	var pc v1alpha1.PodChaperon
	err := rm.c.Get(ctx, key, &pc)
	switch {
	case err == nil:
	case notInstalled(err):
		return // no such chaperon, namespace or CRD there
	case apierrors.IsForbidden(err):
		// Not admitted to this namespace there: no chaperon of ours can
		// be there.
		r.log.V(1).Info("Target refuses the namespace", "target", rm.key.String(), "namespace", p.Namespace, "reason", err.Error())
		return
	default:
		ps.blocked = true
		r.problem("%s %s: reading chaperon %s of pod %s: %v", rm.key.Kind(), rm.key, key, klog.KObj(p), err)
		return
	}
	if pc.Labels[v1alpha1.LabelParentUID] != string(p.UID) ||
		(r.opts.SourceName != "" && pc.Labels[v1alpha1.LabelParentCluster] != r.opts.SourceName) {
		return // not ours
	}
	if pc.DeletionTimestamp == nil {
		r.log.Info("Deleting a chaperon in a target", "target", rm.key.String(), "chaperon", klog.KObj(&pc), "pod", klog.KObj(p))
		r.sum.RemoteChaperonsDeleted++
		if r.opts.DryRun {
			return
		}
		err := rm.c.Delete(ctx, &pc, client.PropagationPolicy(metav1.DeletePropagationForeground), client.Preconditions{UID: ptr.To(pc.UID)})
		if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
			return
		}
		if err != nil {
			ps.blocked = true
			r.problem("%s %s: deleting chaperon %s: %v", rm.key.Kind(), rm.key, key, err)
			return
		}
	}
	// The target's chaperon controller may be gone (uninstalled first, or
	// with this cluster when the target is the source itself): fleetlet's
	// finalizer goes here, and the garbage collector's Foreground
	// propagation keeps the chaperon until its pod is gone.
	if !r.opts.DryRun && containsString(pc.Finalizers, v1alpha1.FinalizerDelegatePod) {
		if err := RemoveFinalizer(ctx, rm.c, &pc, v1alpha1.FinalizerDelegatePod); err != nil {
			ps.blocked = true
			r.problem("%s %s: removing %s from chaperon %s: %v", rm.key.Kind(), rm.key, v1alpha1.FinalizerDelegatePod, key, err)
			return
		}
	}
	ps.waiting = append(ps.waiting, waitingChaperon{remote: rm, key: key, uid: pc.UID})
}

// waitChaperons waits, up to Timeout, until every deleted chaperon is gone;
// the proxies of those that are not keep their finalizer.
func (r *run) waitChaperons(ctx context.Context, proxies []*proxyState) {
	pending := func(ctx context.Context) int {
		n := 0
		for _, ps := range proxies {
			left := ps.waiting[:0]
			for _, w := range ps.waiting {
				var pc v1alpha1.PodChaperon
				err := w.remote.c.Get(ctx, w.key, &pc)
				if notInstalled(err) || (err == nil && pc.UID != w.uid) {
					continue
				}
				left = append(left, w)
			}
			ps.waiting = left
			n += len(left)
		}
		return n
	}
	if pending(ctx) == 0 {
		return
	}
	r.log.Info("Waiting for the chaperons in targets to be gone (their pods first)", "timeout", r.opts.Timeout)
	_ = wait.PollUntilContextTimeout(ctx, r.opts.PollInterval, r.opts.Timeout, false, func(ctx context.Context) (bool, error) {
		return pending(ctx) == 0, nil
	})
	for _, ps := range proxies {
		for _, w := range ps.waiting {
			ps.blocked = true
			r.problem("%s %s: chaperon %s of pod %s still exists after %s (its pod is still being deleted there); pod %s keeps its finalizer",
				w.remote.key.Kind(), w.remote.key, w.key, klog.KObj(ps.pod), r.opts.Timeout, klog.KObj(ps.pod))
		}
	}
}

// VirtualNodeSelector selects the virtual nodes fleetlet creates.
func VirtualNodeSelector() labels.Selector {
	typ, _ := labels.NewRequirement(v1alpha1.LabelNodeType, selection.Equals, []string{v1alpha1.NodeTypeVirtualKubelet})
	cluster, _ := labels.NewRequirement(v1alpha1.LabelCluster, selection.Exists, nil)
	return labels.NewSelector().Add(*typ, *cluster)
}

// deleteVirtualNodes deletes the virtual nodes, except those that pods
// keeping the finalizer are bound to: they stay visible where they are.
func (r *run) deleteVirtualNodes(ctx context.Context, bound map[string]int) {
	var nodes corev1.NodeList
	if err := r.c.List(ctx, &nodes, client.MatchingLabelsSelector{Selector: VirtualNodeSelector()}); err != nil {
		r.problem("listing virtual nodes: %v", err)
		return
	}
	for i := range nodes.Items {
		n := &nodes.Items[i]
		if n.DeletionTimestamp != nil {
			continue
		}
		if k := bound[n.Name]; k > 0 {
			r.problem("virtual node %s kept: %d pods bound to it keep the %s finalizer", n.Name, k, v1alpha1.FinalizerDelegate)
			continue
		}
		r.log.Info("Deleting a virtual node", "node", n.Name)
		r.sum.VirtualNodesDeleted++
		if r.opts.DryRun {
			continue
		}
		if err := r.c.Delete(ctx, n, client.Preconditions{UID: ptr.To(n.UID)}); err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			r.problem("deleting virtual node %s: %v", n.Name, err)
		}
	}
}

func (r *run) targetSide(ctx context.Context) {
	var chaperons v1alpha1.PodChaperonList
	if err := r.c.List(ctx, &chaperons); err != nil {
		if !notInstalled(err) {
			r.problem("listing PodChaperons: %v", err)
		}
	}
	for i := range chaperons.Items {
		pc := &chaperons.Items[i]
		if pc.DeletionTimestamp == nil {
			r.log.Info("Deleting a PodChaperon", "chaperon", klog.KObj(pc), "source", pc.Labels[v1alpha1.LabelParentCluster])
			r.sum.ChaperonsDeleted++
			if r.opts.DryRun {
				continue
			}
			err := r.c.Delete(ctx, pc, client.PropagationPolicy(metav1.DeletePropagationBackground), client.Preconditions{UID: ptr.To(pc.UID)})
			if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
				r.problem("deleting PodChaperon %s: %v", klog.KObj(pc), err)
				continue
			}
		}
		// No chaperon controller may be left to let it go once its pod
		// is: the garbage collector deletes the pod after it.
		if !r.opts.DryRun && containsString(pc.Finalizers, v1alpha1.FinalizerDelegatePod) {
			if err := RemoveFinalizer(ctx, r.c, pc, v1alpha1.FinalizerDelegatePod); err != nil {
				r.problem("removing %s from PodChaperon %s: %v", v1alpha1.FinalizerDelegatePod, klog.KObj(pc), err)
			}
		}
	}
	r.deleteSourceIdentities(ctx)
	r.releaseSources(ctx)
	r.deleteOwned(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: access.ClusterRoleSource}})
	r.deleteOwned(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: access.ClusterRoleSourceReader}})
	r.deleteOwned(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: access.ClusterRoleSourceNamespaces}})
	r.deleteOwned(ctx, &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: v1alpha1.PriorityClassCandidate}})
}

// releaseSources does what the Source controller does for a deleted Source:
// deletes the ClusterRoleBinding it made for it, then removes its finalizer,
// so that neither the Source nor the CRD's deletion waits for a manager
// that is gone.
func (r *run) releaseSources(ctx context.Context) {
	var list v1alpha1.SourceList
	if err := r.c.List(ctx, &list); err != nil {
		if !notInstalled(err) {
			r.problem("listing Sources: %v", err)
		}
		return
	}
	for i := range list.Items {
		src := &list.Items[i]
		if !containsString(src.Finalizers, access.FinalizerClusterRoleBinding) {
			continue
		}
		r.log.Info("Releasing a Source", "source", klog.KObj(src))
		r.sum.SourceFinalizersRemoved++
		if r.opts.DryRun {
			continue
		}
		want := map[string]string{
			access.LabelManagedBy:       access.ManagedBy,
			access.LabelSourceKind:      access.KindSource,
			access.LabelSourceName:      src.Name,
			access.LabelSourceNamespace: src.Namespace,
		}
		var crbs rbacv1.ClusterRoleBindingList
		if err := r.c.List(ctx, &crbs, client.MatchingLabels(want)); err != nil {
			r.problem("listing the ClusterRoleBindings of Source %s: %v", klog.KObj(src), err)
			continue
		}
		failed := false
		for j := range crbs.Items {
			crb := &crbs.Items[j]
			if err := r.c.Delete(ctx, crb, client.Preconditions{UID: ptr.To(crb.UID)}); err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
				r.problem("deleting ClusterRoleBinding %s of Source %s: %v", crb.Name, klog.KObj(src), err)
				failed = true
			}
		}
		if failed {
			continue
		}
		if err := RemoveFinalizer(ctx, r.c, src, access.FinalizerClusterRoleBinding); err != nil {
			r.problem("removing the finalizer of Source %s: %v", klog.KObj(src), err)
		}
	}
}

// deleteSourceIdentities deletes everything the Source and ClusterSource
// controllers made (labelled managed-by=fleetlet with a source kind): the
// CRDs are kept on uninstall by default, so the Sources and ClusterSources
// that own them stay, and their ServiceAccounts and bindings would go on
// granting remote sources access to a cluster fleetlet has left.
func (r *run) deleteSourceIdentities(ctx context.Context) {
	selector := labels.SelectorFromSet(labels.Set{access.LabelManagedBy: access.ManagedBy})
	kinds, err := labels.NewRequirement(access.LabelSourceKind, selection.In, []string{access.KindSource, access.KindClusterSource})
	if err != nil {
		r.problem("%v", err)
		return
	}
	selector = selector.Add(*kinds)
	for _, list := range []client.ObjectList{&rbacv1.ClusterRoleBindingList{}, &rbacv1.RoleBindingList{}, &rbacv1.RoleList{}, &corev1.ServiceAccountList{}} {
		if err := r.c.List(ctx, list, client.MatchingLabelsSelector{Selector: selector}); err != nil {
			r.problem("listing %T: %v", list, err)
			continue
		}
		_ = meta.EachListItem(list, func(o runtime.Object) error {
			obj := o.(client.Object)
			if obj.GetDeletionTimestamp() != nil {
				return nil
			}
			r.log.Info("Deleting what fleetlet made for a source", "kind", fmt.Sprintf("%T", obj), "object", klog.KObj(obj),
				"source", obj.GetLabels()[access.LabelSourceName])
			r.sum.SourceIdentitiesDeleted++
			if r.opts.DryRun {
				return nil
			}
			if err := r.c.Delete(ctx, obj, client.Preconditions{UID: ptr.To(obj.GetUID())}); err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
				r.problem("deleting %s: %v", klog.KObj(obj), err)
			}
			return nil
		})
	}
}

// deleteOwned deletes a cluster-scoped object fleetlet made, only when it
// carries app.kubernetes.io/managed-by=fleetlet.
func (r *run) deleteOwned(ctx context.Context, obj client.Object) {
	kind := fmt.Sprintf("%T", obj)
	kind = kind[strings.LastIndex(kind, ".")+1:]
	if err := r.c.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
		if !apierrors.IsNotFound(err) {
			r.problem("reading %s %s: %v", kind, obj.GetName(), err)
		}
		return
	}
	if obj.GetLabels()[access.LabelManagedBy] != access.ManagedBy || obj.GetDeletionTimestamp() != nil {
		r.log.V(1).Info("Leaving an object fleetlet does not manage", "kind", kind, "name", obj.GetName())
		return
	}
	r.log.Info("Deleting", "kind", kind, "name", obj.GetName())
	r.sum.ClusterObjectsDeleted++
	if r.opts.DryRun {
		return
	}
	if err := r.c.Delete(ctx, obj, client.Preconditions{UID: ptr.To(obj.GetUID())}); err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		r.problem("deleting %s %s: %v", kind, obj.GetName(), err)
	}
}

// RemoveFinalizer removes one finalizer, and only it, with a JSON patch
// whose test op names it at its index; when the finalizers moved in
// between, it reads the object again and retries.
func RemoveFinalizer(ctx context.Context, c client.Client, obj client.Object, finalizer string) error {
	for attempt := 0; ; attempt++ {
		data, ok := proxy.RemoveFinalizerPatch(obj.GetUID(), obj.GetFinalizers(), finalizer)
		if !ok {
			return nil
		}
		err := c.Patch(ctx, obj, client.RawPatch(types.JSONPatchType, data))
		if err == nil || apierrors.IsNotFound(err) {
			return nil
		}
		if !apierrors.IsInvalid(err) || attempt >= 4 {
			return err
		}
		// The test op failed: read the finalizers again.
		if err := c.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
			return client.IgnoreNotFound(err)
		}
	}
}

func containsString(s []string, v string) bool { return proxy.FinalizerIndex(s, v) >= 0 }
