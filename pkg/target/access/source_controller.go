package access

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
)

// DefaultRetryInterval is how often a source whose objects conflict with
// someone else's is checked again when nothing else wakes it up.
const DefaultRetryInterval = time.Minute

// SourceReconciler provisions the identity of a namespaced Source: its
// ServiceAccount, a RoleBinding to ClusterRoleSource and the heartbeat Role
// in its namespace, and a ClusterRoleBinding to ClusterRoleSourceReader,
// which a finalizer removes (a namespaced owner cannot own it).
type SourceReconciler struct {
	// Client reads (from the cache) and writes.
	Client client.Client
	// APIReader reads what the cache does not hold (ServiceAccounts).
	APIReader client.Reader
	// RetryInterval is how often a Source in conflict with someone else's
	// objects is checked again; zero means DefaultRetryInterval.
	RetryInterval time.Duration

	roles *clusterRolesOnce
}

// SetupWithManager registers the controller: it watches Sources, the
// Roles and RoleBindings they own, the ClusterRoleBindings labelled for
// them, and the metadata of ServiceAccounts (so that a Source waiting for a
// ServiceAccount that belongs to another one recovers when it goes).
func (r *SourceReconciler) SetupWithManager(mgr ctrl.Manager) error {
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
		Named("source").
		For(&v1alpha1.Source{}).
		Owns(&rbacv1.RoleBinding{}).
		Owns(&rbacv1.Role{}).
		Watches(&rbacv1.ClusterRoleBinding{}, handler.EnqueueRequestsFromMapFunc(sourceOfLabels)).
		Watches(&corev1.ServiceAccount{}, handler.EnqueueRequestsFromMapFunc(r.sourcesInNamespace), builder.OnlyMetadata).
		Complete(r)
}

// sourceOfLabels maps an object labelled for a Source to it.
func sourceOfLabels(_ context.Context, obj client.Object) []reconcile.Request {
	l := obj.GetLabels()
	if l[LabelManagedBy] != ManagedBy || l[LabelSourceKind] != KindSource || l[LabelSourceName] == "" || l[LabelSourceNamespace] == "" {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: l[LabelSourceNamespace], Name: l[LabelSourceName]}}}
}

// sourcesInNamespace maps a ServiceAccount to every Source of its
// namespace.
func (r *SourceReconciler) sourcesInNamespace(ctx context.Context, obj client.Object) []reconcile.Request {
	var list v1alpha1.SourceList
	if err := r.Client.List(ctx, &list, client.InNamespace(obj.GetNamespace())); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Listing Sources", "namespace", obj.GetNamespace())
		return nil
	}
	reqs := make([]reconcile.Request, 0, len(list.Items))
	for _, s := range list.Items {
		reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&s)})
	}
	return reqs
}

func (r *SourceReconciler) provisioner() *provisioner {
	if r.roles == nil {
		r.roles = &clusterRolesOnce{}
	}
	reader := r.APIReader
	if reader == nil {
		reader = r.Client
	}
	return &provisioner{client: r.Client, reader: reader, roles: r.roles}
}

// Reconcile brings one Source's identity in line with its spec.
func (r *SourceReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	log := ctrl.LoggerFrom(ctx)
	p := r.provisioner()

	var src v1alpha1.Source
	if err := r.Client.Get(ctx, req.NamespacedName, &src); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	crbName := SourceClusterRoleBindingName(src.Namespace, src.Name)
	labels := sourceLabels(src.Namespace, src.Name)

	if !src.DeletionTimestamp.IsZero() {
		if !controllerutil.ContainsFinalizer(&src, FinalizerClusterRoleBinding) {
			return ctrl.Result{}, nil
		}
		// Everything in the namespace is owned by the Source and goes
		// with it; only the ClusterRoleBinding needs us. It is looked up
		// by name on the API server too, in case the cache has not seen
		// it yet.
		if err := p.deleteClusterRoleBinding(ctx, crbName, labels); err != nil {
			return ctrl.Result{}, err
		}
		if err := p.deleteLabelled(ctx, &rbacv1.ClusterRoleBindingList{}, labels, func(client.Object) bool { return false }); err != nil {
			return ctrl.Result{}, err
		}
		log.Info("Removing finalizer", "finalizer", FinalizerClusterRoleBinding)
		orig := src.DeepCopy()
		controllerutil.RemoveFinalizer(&src, FinalizerClusterRoleBinding)
		if err := r.Client.Patch(ctx, &src, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil {
			return ctrl.Result{}, client.IgnoreNotFound(err)
		}
		return ctrl.Result{}, nil
	}

	if !controllerutil.ContainsFinalizer(&src, FinalizerClusterRoleBinding) {
		log.Info("Adding finalizer", "finalizer", FinalizerClusterRoleBinding)
		orig := src.DeepCopy()
		controllerutil.AddFinalizer(&src, FinalizerClusterRoleBinding)
		if err := r.Client.Patch(ctx, &src, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil {
			return ctrl.Result{}, err
		}
	}

	orig := src.DeepCopy()
	sa := types.NamespacedName{Namespace: src.Namespace, Name: ServiceAccountNameFor(src.Name, src.Spec.ServiceAccountName)}
	err := r.provision(ctx, p, &src, sa, crbName, labels)
	src.Status.ObservedGeneration = src.Generation
	if err == nil {
		src.Status.ServiceAccountName = sa.Name
	} else if ce := asCondition(err); ce.reason == v1alpha1.ReasonServiceAccountNotOwned {
		src.Status.ServiceAccountName = ""
	}
	meta.SetStatusCondition(&src.Status.Conditions, readyCondition(src.Generation, err,
		fmt.Sprintf("ServiceAccount %s is bound to ClusterRole %s in namespace %s", sa.Name, ClusterRoleSource, src.Namespace)))
	if !equality.Semantic.DeepEqual(orig.Status, src.Status) {
		if perr := r.Client.Status().Patch(ctx, &src, client.MergeFrom(orig)); perr != nil {
			return ctrl.Result{}, errors.Join(err, fmt.Errorf("patching status: %w", perr))
		}
	}
	return result(err, r.RetryInterval)
}

func (r *SourceReconciler) provision(ctx context.Context, p *provisioner, src *v1alpha1.Source, sa types.NamespacedName, crbName string, labels map[string]string) error {
	if err := p.roles.ensure(ctx, uncachedClient{Client: p.client, reader: p.reader}); err != nil {
		return err
	}
	owner := ownerRef(src, KindSource)
	if old := src.Status.ServiceAccountName; old != "" && old != sa.Name {
		if err := p.deleteOwnedServiceAccount(ctx, src.UID, types.NamespacedName{Namespace: src.Namespace, Name: old}); err != nil {
			return err
		}
	}
	if err := p.ensureServiceAccount(ctx, owner, labels, sa); err != nil {
		return err
	}
	if err := p.ensureRoleBinding(ctx, src.Namespace, SourceRoleBindingName(src.Name), clusterRoleRef(ClusterRoleSource), sa, labels, owner); err != nil {
		return err
	}
	if err := p.ensureHeartbeat(ctx, src.Name, sa, labels, owner); err != nil {
		return err
	}
	if err := p.ensureClusterRoleBinding(ctx, crbName, ClusterRoleSourceReader, sa, labels, nil); err != nil {
		return err
	}
	// A ClusterRoleBinding under an older naming scheme would grant
	// access nobody tracks.
	return p.deleteLabelled(ctx, &rbacv1.ClusterRoleBindingList{}, labels, func(obj client.Object) bool { return obj.GetName() == crbName })
}

// result turns a provisioning error into a reconcile result: API errors
// are retried with backoff, conflicts a user must resolve after interval.
func result(err error, interval time.Duration) (ctrl.Result, error) {
	if err == nil {
		return ctrl.Result{}, nil
	}
	if ce := asCondition(err); !ce.retry {
		if interval <= 0 {
			interval = DefaultRetryInterval
		}
		return ctrl.Result{RequeueAfter: interval}, nil
	}
	return ctrl.Result{}, err
}

// SetupWithManager registers the Source and ClusterSource controllers with
// mgr. retryInterval is how often a source in conflict with someone else's
// objects is checked again (zero: DefaultRetryInterval).
func SetupWithManager(mgr ctrl.Manager, retryInterval time.Duration) error {
	roles := &clusterRolesOnce{}
	if err := (&SourceReconciler{RetryInterval: retryInterval, roles: roles}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("setting up the Source controller: %w", err)
	}
	if err := (&ClusterSourceReconciler{RetryInterval: retryInterval, roles: roles}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("setting up the ClusterSource controller: %w", err)
	}
	return nil
}

// CacheByObject restricts the manager's cache of Roles, RoleBindings and
// ClusterRoleBindings to those fleetlet created, for a manager that wants
// to hold no other cluster's RBAC in memory (merge it into
// cache.Options.ByObject). The controllers work with or without it.
func CacheByObject() map[client.Object]cache.ByObject {
	sel := labels.SelectorFromSet(labels.Set{LabelManagedBy: ManagedBy})
	return map[client.Object]cache.ByObject{
		&rbacv1.Role{}:               {Label: sel},
		&rbacv1.RoleBinding{}:        {Label: sel},
		&rbacv1.ClusterRoleBinding{}: {Label: sel},
	}
}
