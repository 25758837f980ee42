package access

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
)

// Reasons of the Ready condition of a Source or ClusterSource besides
// v1alpha1.ReasonProvisioned, v1alpha1.ReasonServiceAccountNotOwned and
// v1alpha1.ReasonInvalidSpec.
const (
	// ReasonBindingNotOwned: a Role, RoleBinding or ClusterRoleBinding of
	// the name the controller would use exists and was not created for
	// this source; it is left alone.
	ReasonBindingNotOwned = "BindingNotOwned"

	// ReasonServiceAccountNamespaceNotFound: a ClusterSource's
	// serviceAccountNamespace does not exist (or is being deleted).
	ReasonServiceAccountNamespaceNotFound = "ServiceAccountNamespaceNotFound"

	// ReasonProvisioningFailed: the API server refused or failed a write;
	// the message says which and the controller retries with backoff.
	ReasonProvisioningFailed = "ProvisioningFailed"
)

// conditionError is a failure that the Ready condition reports with its
// own reason. Retry says whether to retry with backoff (an API error) or
// only when something changes or after the retry interval (a conflict a
// user has to resolve).
type conditionError struct {
	reason  string
	message string
	retry   bool
}

func (e *conditionError) Error() string { return e.message }

// asCondition turns any error into a reason and message for Ready.
func asCondition(err error) *conditionError {
	var ce *conditionError
	if errors.As(err, &ce) {
		return ce
	}
	return &conditionError{reason: ReasonProvisioningFailed, message: err.Error(), retry: true}
}

// clusterRolesOnce ensures the ClusterRoles once per process, before the
// first binding to them is made, so that a new fleetlet version's rules
// are in place before any source is declared Ready.
type clusterRolesOnce struct {
	mu   sync.Mutex
	done bool
}

func (o *clusterRolesOnce) ensure(ctx context.Context, c client.Client) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.done {
		return nil
	}
	ctrl.LoggerFrom(ctx).Info("Ensuring the ClusterRoles of sources", "clusterRoles", []string{ClusterRoleSource, ClusterRoleSourceReader})
	if err := EnsureClusterRoles(ctx, c); err != nil {
		return err
	}
	o.done = true
	return nil
}

// uncachedClient reads from the API server and writes through the
// embedded client: for objects the manager need not cache.
type uncachedClient struct {
	client.Client
	reader client.Reader
}

func (u uncachedClient) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	return u.reader.Get(ctx, key, obj, opts...)
}

func (u uncachedClient) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	return u.reader.List(ctx, list, opts...)
}

// provisioner holds what both controllers share.
type provisioner struct {
	client client.Client
	// reader reads ServiceAccounts, which are not cached, and objects the
	// cache may not show (a label-filtered cache, or one not yet synced).
	reader client.Reader
	roles  *clusterRolesOnce
}

// isSourceOwner reports whether ref points at a Source or ClusterSource.
func isSourceOwner(ref metav1.OwnerReference) bool {
	return (ref.Kind == KindSource || ref.Kind == KindClusterSource) && apiGroup(ref.APIVersion) == v1alpha1.GroupName
}

func apiGroup(apiVersion string) string {
	group, _, found := strings.Cut(apiVersion, "/")
	if !found {
		return "" // the core group: "v1"
	}
	return group
}

// ownerRef is the controller reference to a Source or ClusterSource.
func ownerRef(obj client.Object, kind string) metav1.OwnerReference {
	return *metav1.NewControllerRef(obj, v1alpha1.GroupVersion.WithKind(kind))
}

// ensureServiceAccount creates the ServiceAccount if it does not exist
// (owned by the source), and otherwise checks that no other source owns it.
// It never modifies an existing ServiceAccount.
func (p *provisioner) ensureServiceAccount(ctx context.Context, owner metav1.OwnerReference, labels map[string]string, key types.NamespacedName) error {
	log := ctrl.LoggerFrom(ctx)
	var sa corev1.ServiceAccount
	err := p.reader.Get(ctx, key, &sa)
	if apierrors.IsNotFound(err) {
		sa = corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{
			Namespace:       key.Namespace,
			Name:            key.Name,
			Labels:          copyLabels(labels),
			OwnerReferences: []metav1.OwnerReference{owner},
		}}
		log.Info("Creating ServiceAccount", "serviceAccount", klog.KObj(&sa))
		// Created meanwhile (AlreadyExists): it is checked on the retry.
		if err := p.client.Create(ctx, &sa); err != nil {
			return fmt.Errorf("creating ServiceAccount %s: %w", key, err)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading ServiceAccount %s: %w", key, err)
	}
	for _, ref := range sa.OwnerReferences {
		if isSourceOwner(ref) && ref.UID != owner.UID {
			return &conditionError{
				reason:  v1alpha1.ReasonServiceAccountNotOwned,
				message: fmt.Sprintf("ServiceAccount %s belongs to %s %s; choose another spec.serviceAccountName", key, ref.Kind, ref.Name),
			}
		}
	}
	return nil
}

// deleteOwnedServiceAccount deletes a ServiceAccount this source created
// and no longer uses (its spec changed). Anything else is left alone.
func (p *provisioner) deleteOwnedServiceAccount(ctx context.Context, ownerUID types.UID, key types.NamespacedName) error {
	var sa corev1.ServiceAccount
	if err := p.reader.Get(ctx, key, &sa); err != nil {
		return client.IgnoreNotFound(err)
	}
	if !metav1.IsControlledBy(&sa, &metav1.ObjectMeta{UID: ownerUID}) {
		return nil
	}
	ctrl.LoggerFrom(ctx).Info("Deleting ServiceAccount no longer used", "serviceAccount", klog.KObj(&sa))
	err := p.client.Delete(ctx, &sa, client.Preconditions{UID: &sa.UID})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("deleting ServiceAccount %s: %w", key, err)
	}
	return nil
}

// syncFunc copies the desired state into got and reports whether got
// changed, or whether it must be recreated (an immutable field differs).
type syncFunc func(got client.Object) (changed, recreate bool)

// ensureObject creates want, or updates the existing object of its name
// with sync when it was created for the same source (its labels say so).
// An object of that name created by anyone else is left alone and reported
// as ReasonBindingNotOwned.
func (p *provisioner) ensureObject(ctx context.Context, want client.Object, empty func() client.Object, sync syncFunc) error {
	log := ctrl.LoggerFrom(ctx)
	key := client.ObjectKeyFromObject(want)
	kind := kindOf(want)
	got := empty()
	err := p.client.Get(ctx, key, got)
	if apierrors.IsNotFound(err) {
		log.Info("Creating "+kind, lowerFirst(kind), klog.KObj(want))
		err = p.client.Create(ctx, want)
		if err == nil {
			return nil
		}
		if !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating %s %s: %w", kind, key, err)
		}
		// The cache does not show it (not synced yet, or filtered).
		got = empty()
		err = p.reader.Get(ctx, key, got)
	}
	if err != nil {
		return fmt.Errorf("reading %s %s: %w", kind, key, err)
	}
	if !hasLabels(got.GetLabels(), want.GetLabels()) {
		return &conditionError{
			reason:  ReasonBindingNotOwned,
			message: fmt.Sprintf("%s %s exists and was not created by fleetlet for this source; delete or rename it", kind, key),
		}
	}
	if got.GetDeletionTimestamp() != nil {
		return fmt.Errorf("%s %s is being deleted", kind, key)
	}
	changed, recreate := sync(got)
	labels := got.GetLabels()
	for k, v := range want.GetLabels() {
		if labels[k] != v {
			labels[k] = v
			changed = true
		}
	}
	got.SetLabels(labels)
	if refs, refsChanged := mergeOwnerRefs(got.GetOwnerReferences(), want.GetOwnerReferences()); refsChanged {
		got.SetOwnerReferences(refs)
		changed = true
	}
	if recreate {
		log.Info("Recreating "+kind+" whose immutable fields changed", lowerFirst(kind), klog.KObj(want))
		uid := got.GetUID()
		if err := p.client.Delete(ctx, got, client.Preconditions{UID: &uid}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("deleting %s %s: %w", kind, key, err)
		}
		if err := p.client.Create(ctx, want); err != nil {
			return fmt.Errorf("creating %s %s: %w", kind, key, err)
		}
		return nil
	}
	if !changed {
		return nil
	}
	log.Info("Updating "+kind, lowerFirst(kind), klog.KObj(want))
	if err := p.client.Update(ctx, got); err != nil {
		return fmt.Errorf("updating %s %s: %w", kind, key, err)
	}
	return nil
}

// mergeOwnerRefs puts want's references to sources in place of any other
// reference to a source (an earlier incarnation of the same one), keeping
// every other owner.
func mergeOwnerRefs(got, want []metav1.OwnerReference) ([]metav1.OwnerReference, bool) {
	var out []metav1.OwnerReference
	for _, ref := range got {
		if !isSourceOwner(ref) {
			out = append(out, ref)
		}
	}
	out = append(out, want...)
	return out, !equality.Semantic.DeepEqual(normalizeRefs(got), normalizeRefs(out))
}

func normalizeRefs(refs []metav1.OwnerReference) []metav1.OwnerReference {
	if len(refs) == 0 {
		return nil
	}
	return refs
}

func kindOf(obj client.Object) string {
	switch obj.(type) {
	case *rbacv1.Role:
		return "Role"
	case *rbacv1.RoleBinding:
		return "RoleBinding"
	case *rbacv1.ClusterRoleBinding:
		return "ClusterRoleBinding"
	default:
		return fmt.Sprintf("%T", obj)
	}
}

func lowerFirst(s string) string {
	if s == "" {
		return s
	}
	return string(s[0]+'a'-'A') + s[1:]
}

// serviceAccountSubject is the one subject of every binding.
func serviceAccountSubject(sa types.NamespacedName) []rbacv1.Subject {
	return []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: sa.Namespace, Name: sa.Name}}
}

func clusterRoleRef(name string) rbacv1.RoleRef {
	return rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name}
}

// ensureRoleBinding binds sa in namespace to roleRef.
func (p *provisioner) ensureRoleBinding(ctx context.Context, namespace, name string, roleRef rbacv1.RoleRef, sa types.NamespacedName, labels map[string]string, owner metav1.OwnerReference) error {
	want := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, Labels: copyLabels(labels), OwnerReferences: []metav1.OwnerReference{owner}},
		RoleRef:    roleRef,
		Subjects:   serviceAccountSubject(sa),
	}
	return p.ensureObject(ctx, want, func() client.Object { return &rbacv1.RoleBinding{} }, func(obj client.Object) (bool, bool) {
		got := obj.(*rbacv1.RoleBinding)
		if got.RoleRef != want.RoleRef {
			return false, true
		}
		if equality.Semantic.DeepEqual(got.Subjects, want.Subjects) {
			return false, false
		}
		got.Subjects = want.Subjects
		return true, false
	})
}

// ensureHeartbeat creates the Role that lets a source renew its heartbeat
// Lease in the namespace of its ServiceAccount, and binds it.
func (p *provisioner) ensureHeartbeat(ctx context.Context, sourceName string, sa types.NamespacedName, labels map[string]string, owner metav1.OwnerReference) error {
	name := HeartbeatRoleName(sourceName)
	want := &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Namespace: sa.Namespace, Name: name, Labels: copyLabels(labels), OwnerReferences: []metav1.OwnerReference{owner}},
		Rules:      HeartbeatRules(sourceName),
	}
	err := p.ensureObject(ctx, want, func() client.Object { return &rbacv1.Role{} }, func(obj client.Object) (bool, bool) {
		got := obj.(*rbacv1.Role)
		if equality.Semantic.DeepEqual(got.Rules, want.Rules) {
			return false, false
		}
		got.Rules = want.Rules
		return true, false
	})
	if err != nil {
		return err
	}
	roleRef := rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name}
	return p.ensureRoleBinding(ctx, sa.Namespace, name, roleRef, sa, labels, owner)
}

// ensureClusterRoleBinding binds sa cluster-wide to the ClusterRole role.
// owner is nil for a namespaced Source, which cannot own it.
func (p *provisioner) ensureClusterRoleBinding(ctx context.Context, name, role string, sa types.NamespacedName, labels map[string]string, owner *metav1.OwnerReference) error {
	want := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: copyLabels(labels)},
		RoleRef:    clusterRoleRef(role),
		Subjects:   serviceAccountSubject(sa),
	}
	if owner != nil {
		want.OwnerReferences = []metav1.OwnerReference{*owner}
	}
	return p.ensureObject(ctx, want, func() client.Object { return &rbacv1.ClusterRoleBinding{} }, func(obj client.Object) (bool, bool) {
		got := obj.(*rbacv1.ClusterRoleBinding)
		if got.RoleRef != want.RoleRef {
			return false, true
		}
		if equality.Semantic.DeepEqual(got.Subjects, want.Subjects) {
			return false, false
		}
		got.Subjects = want.Subjects
		return true, false
	})
}

// deleteLabelled deletes the objects of list's kind that carry labels and
// for which keep is false.
func (p *provisioner) deleteLabelled(ctx context.Context, list client.ObjectList, labels map[string]string, keep func(client.Object) bool, opts ...client.ListOption) error {
	opts = append(opts, client.MatchingLabels(labels))
	if err := p.client.List(ctx, list, opts...); err != nil {
		return fmt.Errorf("listing %T: %w", list, err)
	}
	var errs []error
	eachObject(list, func(obj client.Object) {
		if keep(obj) || obj.GetDeletionTimestamp() != nil {
			return
		}
		ctrl.LoggerFrom(ctx).Info("Deleting "+kindOf(obj)+" no longer needed", lowerFirst(kindOf(obj)), klog.KObj(obj))
		uid := obj.GetUID()
		if err := p.client.Delete(ctx, obj, client.Preconditions{UID: &uid}); err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			errs = append(errs, fmt.Errorf("deleting %s %s: %w", kindOf(obj), client.ObjectKeyFromObject(obj), err))
		}
	})
	return errors.Join(errs...)
}

func eachObject(list client.ObjectList, fn func(client.Object)) {
	switch l := list.(type) {
	case *rbacv1.RoleBindingList:
		for i := range l.Items {
			fn(&l.Items[i])
		}
	case *rbacv1.RoleList:
		for i := range l.Items {
			fn(&l.Items[i])
		}
	case *rbacv1.ClusterRoleBindingList:
		for i := range l.Items {
			fn(&l.Items[i])
		}
	}
}

func copyLabels(in map[string]string) map[string]string {
	out := make(map[string]string, len(in))
	for k, v := range in {
		out[k] = v
	}
	return out
}

// readyCondition is the Ready condition for err (nil: provisioned).
func readyCondition(generation int64, err error, provisioned string) metav1.Condition {
	if err == nil {
		return metav1.Condition{
			Type:               v1alpha1.ConditionReady,
			Status:             metav1.ConditionTrue,
			Reason:             v1alpha1.ReasonProvisioned,
			Message:            provisioned,
			ObservedGeneration: generation,
		}
	}
	ce := asCondition(err)
	return metav1.Condition{
		Type:               v1alpha1.ConditionReady,
		Status:             metav1.ConditionFalse,
		Reason:             ce.reason,
		Message:            ce.message,
		ObservedGeneration: generation,
	}
}

// deleteClusterRoleBinding deletes the named ClusterRoleBinding, read from
// the API server, if it carries labels.
func (p *provisioner) deleteClusterRoleBinding(ctx context.Context, name string, labels map[string]string) error {
	var crb rbacv1.ClusterRoleBinding
	if err := p.reader.Get(ctx, types.NamespacedName{Name: name}, &crb); err != nil {
		return client.IgnoreNotFound(err)
	}
	if !hasLabels(crb.Labels, labels) {
		return nil
	}
	ctrl.LoggerFrom(ctx).Info("Deleting ClusterRoleBinding", "clusterRoleBinding", klog.KObj(&crb))
	if err := p.client.Delete(ctx, &crb, client.Preconditions{UID: &crb.UID}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting ClusterRoleBinding %s: %w", name, err)
	}
	return nil
}
