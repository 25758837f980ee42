package access

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
)

// ClusterSourceReconciler provisions the identity of a ClusterSource: its
// ServiceAccount and heartbeat Role in spec.serviceAccountNamespace, a
// RoleBinding to ClusterRoleSource in every namespace it selects (and in no
// other: bindings it made in namespaces no longer selected are deleted), and
// a ClusterRoleBinding to ClusterRoleSourceReader. The ClusterSource owns
// all of them, so the garbage collector removes them with it.
type ClusterSourceReconciler struct {
	// Client reads (from the cache) and writes.
	Client client.Client
	// APIReader reads what the cache does not hold (ServiceAccounts).
	APIReader client.Reader
	// RetryInterval is how often a ClusterSource in conflict with someone
	// else's objects is checked again; zero means DefaultRetryInterval.
	RetryInterval time.Duration

	roles *clusterRolesOnce
}

// SetupWithManager registers the controller: it watches ClusterSources,
// what they own, Namespaces (created, deleted, labels changed) and the
// metadata of ServiceAccounts.
func (r *ClusterSourceReconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Client == nil {
		r.Client = mgr.GetClient()
	}
	if r.APIReader == nil {
		r.APIReader = mgr.GetAPIReader()
	}
	if r.roles == nil {
		r.roles = &clusterRolesOnce{}
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named("clustersource").
		For(&v1alpha1.ClusterSource{}).
		Owns(&rbacv1.RoleBinding{}).
		Owns(&rbacv1.Role{}).
		Owns(&rbacv1.ClusterRoleBinding{}).
		Watches(&corev1.Namespace{}, handler.EnqueueRequestsFromMapFunc(r.allClusterSources), builder.WithPredicates(namespaceSelectionChanged())).
		Watches(&corev1.ServiceAccount{}, handler.EnqueueRequestsFromMapFunc(r.clusterSourcesInNamespace), builder.OnlyMetadata).
		Complete(r)
}

// namespaceSelectionChanged passes the namespace events that can change
// which namespaces a ClusterSource selects.
func namespaceSelectionChanged() predicate.Predicate {
	return predicate.Funcs{
		UpdateFunc: func(e event.UpdateEvent) bool {
			o, n := e.ObjectOld.(*corev1.Namespace), e.ObjectNew.(*corev1.Namespace)
			if o == nil || n == nil {
				return true
			}
			return !equality.Semantic.DeepEqual(o.Labels, n.Labels) ||
				o.Status.Phase != n.Status.Phase ||
				o.DeletionTimestamp.IsZero() != n.DeletionTimestamp.IsZero()
		},
	}
}

func (r *ClusterSourceReconciler) allClusterSources(ctx context.Context, _ client.Object) []reconcile.Request {
	return r.clusterSources(ctx, func(*v1alpha1.ClusterSource) bool { return true })
}

func (r *ClusterSourceReconciler) clusterSourcesInNamespace(ctx context.Context, obj client.Object) []reconcile.Request {
	return r.clusterSources(ctx, func(cs *v1alpha1.ClusterSource) bool {
		return cs.Spec.ServiceAccountNamespace == obj.GetNamespace()
	})
}

func (r *ClusterSourceReconciler) clusterSources(ctx context.Context, match func(*v1alpha1.ClusterSource) bool) []reconcile.Request {
	var list v1alpha1.ClusterSourceList
	if err := r.Client.List(ctx, &list); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Listing ClusterSources")
		return nil
	}
	var reqs []reconcile.Request
	for i := range list.Items {
		if match(&list.Items[i]) {
			reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Name: list.Items[i].Name}})
		}
	}
	return reqs
}

func (r *ClusterSourceReconciler) provisioner() *provisioner {
	if r.roles == nil {
		r.roles = &clusterRolesOnce{}
	}
	reader := r.APIReader
	if reader == nil {
		reader = r.Client
	}
	return &provisioner{client: r.Client, reader: reader, roles: r.roles}
}

// NamespaceSelector is the selector of the namespaces a ClusterSource may
// act in: spec.namespaceSelector, or the label
// source.multicluster.fleetlet.io/<name>=true. A selector that selects
// every namespace is refused.
func NamespaceSelector(cs *v1alpha1.ClusterSource) (labels.Selector, error) {
	ls := cs.Spec.NamespaceSelector
	if ls == nil {
		ls = &metav1.LabelSelector{MatchLabels: map[string]string{DefaultNamespaceLabel(cs.Name): "true"}}
	}
	sel, err := metav1.LabelSelectorAsSelector(ls)
	if err != nil {
		return nil, fmt.Errorf("spec.namespaceSelector: %w", err)
	}
	if sel.Empty() {
		return nil, errors.New("spec.namespaceSelector selects every namespace: a ClusterSource only acts in namespaces labelled for it")
	}
	return sel, nil
}

// Selects reports whether a ClusterSource admits its source to namespace
// ns: its selector selects it, or its source created it there (label
// created-by-source, see selectedNamespaces).
func Selects(cs *v1alpha1.ClusterSource, ns *corev1.Namespace) (bool, error) {
	if ns.Labels[v1alpha1.LabelCreatedBySource] == cs.Name {
		return true, nil
	}
	sel, err := NamespaceSelector(cs)
	if err != nil {
		return false, err
	}
	return sel.Matches(labels.Set(ns.Labels)), nil
}

// Reconcile brings one ClusterSource's identity and namespaces in line
// with its spec and the namespaces' labels.
func (r *ClusterSourceReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	p := r.provisioner()
	var cs v1alpha1.ClusterSource
	if err := r.Client.Get(ctx, req.NamespacedName, &cs); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !cs.DeletionTimestamp.IsZero() {
		// It owns everything made for it: the garbage collector cleans up.
		return ctrl.Result{}, nil
	}

	orig := cs.DeepCopy()
	sa := types.NamespacedName{Namespace: cs.Spec.ServiceAccountNamespace, Name: ServiceAccountNameFor(cs.Name, cs.Spec.ServiceAccountName)}
	count, saOK, err := r.provision(ctx, p, &cs, sa)
	cs.Status.ObservedGeneration = cs.Generation
	cs.Status.NamespaceCount = int32(count)
	if saOK {
		cs.Status.ServiceAccountName, cs.Status.ServiceAccountNamespace = sa.Name, sa.Namespace
	} else {
		cs.Status.ServiceAccountName, cs.Status.ServiceAccountNamespace = "", ""
	}
	meta.SetStatusCondition(&cs.Status.Conditions, readyCondition(cs.Generation, err,
		fmt.Sprintf("ServiceAccount %s/%s is bound to ClusterRole %s in %d namespace(s)", sa.Namespace, sa.Name, ClusterRoleSource, count)))
	if !equality.Semantic.DeepEqual(orig.Status, cs.Status) {
		if perr := r.Client.Status().Patch(ctx, &cs, client.MergeFrom(orig)); perr != nil {
			return ctrl.Result{}, errors.Join(err, fmt.Errorf("patching status: %w", perr))
		}
	}
	return result(err, r.RetryInterval)
}

// neverAdmitted reports whether a namespace is one no ClusterSource acts
// in, whatever its labels say: the cluster's own (kube-system,
// kube-public, kube-node-lease), where a source's pods would run beside the
// control plane's and its rights reach their Secrets, and the one of the
// sources' ServiceAccounts (fleetlet's own, usually).
func neverAdmitted(ns, serviceAccountNamespace string) bool {
	switch ns {
	case metav1.NamespaceSystem, metav1.NamespacePublic, corev1.NamespaceNodeLease, serviceAccountNamespace:
		return true
	}
	return false
}

// provision returns how many namespaces the source may act in now, and
// whether its ServiceAccount is in place.
func (r *ClusterSourceReconciler) provision(ctx context.Context, p *provisioner, cs *v1alpha1.ClusterSource, sa types.NamespacedName) (int, bool, error) {
	if err := p.roles.ensure(ctx, uncachedClient{Client: p.client, reader: p.reader}); err != nil {
		return 0, false, err
	}
	sel, err := NamespaceSelector(cs)
	if err != nil {
		return 0, false, &conditionError{reason: v1alpha1.ReasonInvalidSpec, message: err.Error()}
	}
	var saNS corev1.Namespace
	if err := r.Client.Get(ctx, types.NamespacedName{Name: sa.Namespace}, &saNS); err != nil || !saNS.DeletionTimestamp.IsZero() {
		if err != nil && !apierrors.IsNotFound(err) {
			return 0, false, fmt.Errorf("reading Namespace %s: %w", sa.Namespace, err)
		}
		return 0, false, &conditionError{
			reason:  ReasonServiceAccountNamespaceNotFound,
			message: fmt.Sprintf("spec.serviceAccountNamespace %s does not exist or is being deleted", sa.Namespace),
		}
	}

	labels := clusterSourceLabels(cs.Name)
	owner := ownerRef(cs, KindClusterSource)
	if old := (types.NamespacedName{Namespace: cs.Status.ServiceAccountNamespace, Name: cs.Status.ServiceAccountName}); old.Name != "" && old != sa {
		if err := p.deleteOwnedServiceAccount(ctx, cs.UID, old); err != nil {
			return 0, false, err
		}
	}
	if err := p.ensureServiceAccount(ctx, owner, labels, sa); err != nil {
		return 0, false, err
	}
	if err := p.ensureHeartbeat(ctx, cs.Name, sa, labels, owner); err != nil {
		return 0, true, err
	}
	crbName := ClusterSourceClusterRoleBindingName(cs.Name)
	if err := p.ensureClusterRoleBinding(ctx, crbName, ClusterRoleSourceReader, sa, labels, &owner); err != nil {
		return 0, true, err
	}
	nsCRBName := ClusterSourceNamespacesBindingName(cs.Name)
	if cs.Spec.Namespaces != nil {
		if err := p.ensureClusterRoleBinding(ctx, nsCRBName, ClusterRoleSourceNamespaces, sa, labels, &owner); err != nil {
			return 0, true, err
		}
	}

	namespaces, err := r.selectedNamespaces(ctx, cs, sel)
	if err != nil {
		return 0, true, err
	}
	rbName := ClusterSourceRoleBindingName(cs.Name)
	selected := map[string]bool{}
	var errs []error
	count := 0
	for _, ns := range namespaces {
		if !ns.DeletionTimestamp.IsZero() || ns.Status.Phase == corev1.NamespaceTerminating || neverAdmitted(ns.Name, sa.Namespace) || selected[ns.Name] {
			continue
		}
		selected[ns.Name] = true
		if err := p.ensureRoleBinding(ctx, ns.Name, rbName, clusterRoleRef(ClusterRoleSource), sa, labels, owner); err != nil {
			errs = append(errs, err)
			continue
		}
		count++
	}

	heartbeat := HeartbeatRoleName(cs.Name)
	errs = append(errs,
		p.deleteLabelled(ctx, &rbacv1.RoleBindingList{}, labels, func(obj client.Object) bool {
			return (obj.GetName() == rbName && selected[obj.GetNamespace()]) ||
				(obj.GetName() == heartbeat && obj.GetNamespace() == sa.Namespace)
		}),
		p.deleteLabelled(ctx, &rbacv1.RoleList{}, labels, func(obj client.Object) bool {
			return obj.GetName() == heartbeat && obj.GetNamespace() == sa.Namespace
		}),
		p.deleteLabelled(ctx, &rbacv1.ClusterRoleBindingList{}, labels, func(obj client.Object) bool {
			return obj.GetName() == crbName || (obj.GetName() == nsCRBName && cs.Spec.Namespaces != nil)
		}),
	)
	return count, true, errors.Join(errs...)
}

// selectedNamespaces lists the namespaces sel selects and those its source
// created (labelled created-by-source=<name>): a namespace made on demand is
// the source's to use, whatever labels the selector wants, and stays so when
// spec.namespaces is removed (that only stops new ones; removing the label
// takes one back). A namespace may come twice.
func (r *ClusterSourceReconciler) selectedNamespaces(ctx context.Context, cs *v1alpha1.ClusterSource, sel labels.Selector) ([]corev1.Namespace, error) {
	var namespaces corev1.NamespaceList
	if err := r.Client.List(ctx, &namespaces, client.MatchingLabelsSelector{Selector: sel}); err != nil {
		return nil, fmt.Errorf("listing namespaces: %w", err)
	}
	var created corev1.NamespaceList
	if err := r.Client.List(ctx, &created, client.MatchingLabels{v1alpha1.LabelCreatedBySource: cs.Name}); err != nil {
		return nil, fmt.Errorf("listing namespaces: %w", err)
	}
	return append(namespaces.Items, created.Items...), nil
}
