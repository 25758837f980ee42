package access

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
	"github.com/fleetlet/fleetlet/pkg/testenv"
)

func get(obj client.Object, namespace, name string) error {
	return k8sClient.Get(context.Background(), client.ObjectKey{Namespace: namespace, Name: name}, obj)
}

func gone(obj client.Object, namespace, name string) error {
	err := get(obj, namespace, name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	return fmt.Errorf("%T %s/%s still exists", obj, namespace, name)
}

func wantSubjects(namespace, name string) []rbacv1.Subject {
	return []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: namespace, Name: name}}
}

func isControlledBy(obj client.Object, uid string) bool {
	ref := metav1.GetControllerOf(obj)
	return ref != nil && string(ref.UID) == uid
}

func TestSourceProvisionsIdentity(t *testing.T) {
	testenv.Need(t, env)
	ctx := context.Background()
	ns := newNamespace(t, nil)
	src := newSource(ns, "cluster-1")
	require.NoError(t, k8sClient.Create(ctx, src))
	got := waitSourceReady(t, client.ObjectKeyFromObject(src), metav1.ConditionTrue, v1alpha1.ReasonProvisioned)
	uid := string(got.UID)
	assert.Equalf(t, "fleetlet-source-cluster-1", got.Status.ServiceAccountName, "status.serviceAccountName = %q", got.Status.ServiceAccountName)
	assert.Truef(t, controllerutil.ContainsFinalizer(got, FinalizerClusterRoleBinding), "finalizers = %v, want %s", got.Finalizers, FinalizerClusterRoleBinding)

	var sa corev1.ServiceAccount
	require.NoError(t, get(&sa, ns, "fleetlet-source-cluster-1"))
	assert.Truef(t, isControlledBy(&sa, uid), "ServiceAccount owners = %v, want the Source", sa.OwnerReferences)

	var rb rbacv1.RoleBinding
	require.NoError(t, get(&rb, ns, "fleetlet-source-cluster-1"))
	assert.Empty(t, cmp.Diff(rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "fleetlet-source"}, rb.RoleRef), "RoleBinding roleRef (-want,+got)")
	assert.Empty(t, cmp.Diff(wantSubjects(ns, sa.Name), rb.Subjects), "RoleBinding subjects (-want,+got)")
	assert.Truef(t, isControlledBy(&rb, uid), "RoleBinding owners = %v", rb.OwnerReferences)

	var hb rbacv1.Role
	require.NoError(t, get(&hb, ns, "fleetlet-heartbeat-cluster-1"))
	assert.Empty(t, cmp.Diff(HeartbeatRules("cluster-1"), hb.Rules), "heartbeat Role rules (-want,+got)")
	var hbb rbacv1.RoleBinding
	require.NoError(t, get(&hbb, ns, "fleetlet-heartbeat-cluster-1"))

	crbName := SourceClusterRoleBindingName(ns, "cluster-1")
	var crb rbacv1.ClusterRoleBinding
	require.NoError(t, get(&crb, "", crbName))
	assert.Equalf(t, "fleetlet-source-reader", crb.RoleRef.Name, "ClusterRoleBinding roleRef = %v", crb.RoleRef)
	assert.Empty(t, cmp.Diff(wantSubjects(ns, sa.Name), crb.Subjects), "ClusterRoleBinding subjects (-want,+got)")
	assert.Emptyf(t, crb.OwnerReferences, "ClusterRoleBinding has owners %v: a namespaced owner is unresolvable for the garbage collector", crb.OwnerReferences)
	for _, name := range []string{"fleetlet-source", "fleetlet-source-reader", "fleetlet-source-namespaces"} {
		assert.NoErrorf(t, get(&rbacv1.ClusterRole{}, "", name), "ClusterRole %s", name)
	}

	t.Run("repairs what is deleted", func(t *testing.T) {
		require.NoError(t, k8sClient.Delete(ctx, &rb))
		require.NoError(t, k8sClient.Delete(ctx, &crb))
		testenv.Eventually(t, waitTimeout, "bindings recreated", func() error {
			var rb2 rbacv1.RoleBinding
			if err := get(&rb2, ns, rb.Name); err != nil {
				return err
			}
			if rb2.UID == rb.UID {
				return errors.New("old RoleBinding still there")
			}
			var crb2 rbacv1.ClusterRoleBinding
			if err := get(&crb2, "", crb.Name); err != nil {
				return err
			}
			if crb2.UID == crb.UID {
				return errors.New("old ClusterRoleBinding still there")
			}
			return nil
		})
	})

	t.Run("deleting the Source deletes its ClusterRoleBinding", func(t *testing.T) {
		require.NoError(t, k8sClient.Delete(ctx, got))
		testenv.Eventually(t, waitTimeout, "ClusterRoleBinding and Source gone", func() error {
			return errors.Join(gone(&rbacv1.ClusterRoleBinding{}, "", crbName), gone(&v1alpha1.Source{}, ns, "cluster-1"))
		})
	})
}

// The identity a Source gets can do what a source does in its namespace
// and nothing else; checked by the API server's own authorizer with a
// real token.
func TestSourceIdentityIsLeastPrivilege(t *testing.T) {
	testenv.Need(t, env)
	ctx := context.Background()
	ns, other := newNamespace(t, nil), newNamespace(t, nil)
	src := newSource(ns, "cluster-2")
	require.NoError(t, k8sClient.Create(ctx, src))
	got := waitSourceReady(t, client.ObjectKeyFromObject(src), metav1.ConditionTrue, v1alpha1.ReasonProvisioned)
	cfg := tokenConfig(t, ns, got.Status.ServiceAccountName)
	g := v1alpha1.GroupName
	checkAccess(t, cfg, []access{
		{verb: "create", group: g, resource: "podchaperons", namespace: ns, allowed: true},
		{verb: "delete", group: g, resource: "podchaperons", namespace: ns, allowed: true},
		{verb: "watch", group: g, resource: "podchaperons", namespace: ns, allowed: true},
		{verb: "get", group: g, resource: "podchaperons", subresource: "status", namespace: ns, allowed: true},
		{verb: "update", group: g, resource: "podchaperons", subresource: "status", namespace: ns, allowed: false},
		{verb: "create", group: g, resource: "podchaperons", namespace: other, allowed: false},
		{verb: "list", group: g, resource: "podchaperons", namespace: "", allowed: false},
		{verb: "watch", resource: "pods", namespace: ns, allowed: true},
		{verb: "create", resource: "pods", namespace: ns, allowed: true}, // through the chaperon controller's impersonation
		{verb: "delete", resource: "pods", namespace: ns, allowed: false},
		{verb: "get", resource: "pods", subresource: "log", namespace: ns, allowed: true},
		{verb: "create", resource: "pods", subresource: "exec", namespace: ns, allowed: true},
		{verb: "create", resource: "secrets", namespace: ns, allowed: true},
		{verb: "get", resource: "secrets", namespace: other, allowed: false},
		{verb: "create", resource: "serviceaccounts", subresource: "token", namespace: ns, name: got.Status.ServiceAccountName, allowed: false},
		{verb: "create", resource: "events", namespace: ns, allowed: true},
		{verb: "list", resource: "namespaces", allowed: true},
		{verb: "create", resource: "namespaces", allowed: false},
		{verb: "get", group: g, resource: "clustersummaries", name: "default", allowed: true},
		{verb: "update", group: g, resource: "clustersummaries", name: "default", allowed: false},
		{verb: "delete", resource: "nodes", name: "node-1", allowed: false},
		{verb: "list", resource: "nodes", allowed: false},
		{verb: "create", group: "coordination.k8s.io", resource: "leases", namespace: ns, allowed: true},
		{verb: "update", group: "coordination.k8s.io", resource: "leases", namespace: ns, name: "fleetlet-source-cluster-2", allowed: true},
		{verb: "update", group: "coordination.k8s.io", resource: "leases", namespace: ns, name: "some-leader-election", allowed: false},
		{verb: "create", group: "coordination.k8s.io", resource: "leases", namespace: other, allowed: false},
		{verb: "create", group: "rbac.authorization.k8s.io", resource: "rolebindings", namespace: ns, allowed: false},
		{verb: "get", group: g, resource: "sources", namespace: ns, allowed: false},
	})
}

// An existing ServiceAccount no other source owns is used and never
// modified.
func TestSourceUsesExistingServiceAccountAsIs(t *testing.T) {
	testenv.Need(t, env)
	ctx := context.Background()
	ns := newNamespace(t, nil)
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "mine", Labels: map[string]string{"team": "a"}}}
	require.NoError(t, k8sClient.Create(ctx, sa))
	src := newSource(ns, "cluster-3")
	src.Spec.ServiceAccountName = "mine"
	require.NoError(t, k8sClient.Create(ctx, src))
	got := waitSourceReady(t, client.ObjectKeyFromObject(src), metav1.ConditionTrue, v1alpha1.ReasonProvisioned)
	assert.Equalf(t, "mine", got.Status.ServiceAccountName, "status.serviceAccountName = %q, want mine", got.Status.ServiceAccountName)
	var after corev1.ServiceAccount
	require.NoError(t, get(&after, ns, "mine"))
	assert.Falsef(t, after.ResourceVersion != sa.ResourceVersion || len(after.OwnerReferences) != 0, "existing ServiceAccount was modified: owners %v, resourceVersion %s → %s", after.OwnerReferences, sa.ResourceVersion, after.ResourceVersion)
	err := get(&corev1.ServiceAccount{}, ns, "fleetlet-source-cluster-3")
	assert.Truef(t, apierrors.IsNotFound(err), "default ServiceAccount created anyway: %v", err)

	t.Run("changing spec.serviceAccountName moves the bindings and deletes only what it created", func(t *testing.T) {
		// Back to the default: the controller creates it...
		got.Spec.ServiceAccountName = ""
		require.NoError(t, k8sClient.Update(ctx, got))
		moved := waitSourceReady(t, client.ObjectKeyFromObject(src), metav1.ConditionTrue, v1alpha1.ReasonProvisioned)
		require.Equalf(t, "fleetlet-source-cluster-3", moved.Status.ServiceAccountName, "status.serviceAccountName = %q", moved.Status.ServiceAccountName)
		var rb rbacv1.RoleBinding
		require.NoError(t, get(&rb, ns, SourceRoleBindingName("cluster-3")))
		assert.Empty(t, cmp.Diff(wantSubjects(ns, "fleetlet-source-cluster-3"), rb.Subjects), "RoleBinding subjects (-want,+got)")
		var crb rbacv1.ClusterRoleBinding
		require.NoError(t, get(&crb, "", SourceClusterRoleBindingName(ns, "cluster-3")))
		assert.Empty(t, cmp.Diff(wantSubjects(ns, "fleetlet-source-cluster-3"), crb.Subjects), "ClusterRoleBinding subjects (-want,+got)")
		// ... the user's ServiceAccount stays.
		assert.NoError(t, get(&corev1.ServiceAccount{}, ns, "mine"), "the user's ServiceAccount")
		// And moving again deletes the one it created.
		moved.Spec.ServiceAccountName = "mine"
		require.NoError(t, k8sClient.Update(ctx, moved))
		waitSourceReady(t, client.ObjectKeyFromObject(src), metav1.ConditionTrue, v1alpha1.ReasonProvisioned)
		testenv.Eventually(t, waitTimeout, "created ServiceAccount deleted", func() error {
			return gone(&corev1.ServiceAccount{}, ns, "fleetlet-source-cluster-3")
		})
	})
}

// A ServiceAccount that belongs to another Source is not used; the Source
// recovers when it is gone.
func TestSourceServiceAccountOwnedByAnother(t *testing.T) {
	testenv.Need(t, env)
	ctx := context.Background()
	ns := newNamespace(t, nil)
	first := newSource(ns, "first")
	require.NoError(t, k8sClient.Create(ctx, first))
	waitSourceReady(t, client.ObjectKeyFromObject(first), metav1.ConditionTrue, v1alpha1.ReasonProvisioned)

	second := newSource(ns, "second")
	second.Spec.ServiceAccountName = "fleetlet-source-first"
	require.NoError(t, k8sClient.Create(ctx, second))
	got := waitSourceReady(t, client.ObjectKeyFromObject(second), metav1.ConditionFalse, v1alpha1.ReasonServiceAccountNotOwned)
	assert.Emptyf(t, got.Status.ServiceAccountName, "status.serviceAccountName = %q for a ServiceAccount it may not use", got.Status.ServiceAccountName)
	err := get(&rbacv1.RoleBinding{}, ns, SourceRoleBindingName("second"))
	assert.Truef(t, apierrors.IsNotFound(err), "RoleBinding for another Source's ServiceAccount: %v", err)

	// The garbage collector does not run here: delete the first Source
	// and its ServiceAccount by hand.
	require.NoError(t, k8sClient.Delete(ctx, first))
	require.NoError(t, k8sClient.Delete(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "fleetlet-source-first"}}))
	got = waitSourceReady(t, client.ObjectKeyFromObject(second), metav1.ConditionTrue, v1alpha1.ReasonProvisioned)
	var sa corev1.ServiceAccount
	require.NoError(t, get(&sa, ns, "fleetlet-source-first"))
	assert.Truef(t, isControlledBy(&sa, string(got.UID)), "ServiceAccount owners = %v, want the second Source", sa.OwnerReferences)
}

// A binding of the same name that fleetlet did not create is left alone.
func TestSourceLeavesForeignBindingAlone(t *testing.T) {
	testenv.Need(t, env)
	ctx := context.Background()
	ns := newNamespace(t, nil)
	foreign := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: SourceRoleBindingName("cluster-4")},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "view"},
		Subjects:   []rbacv1.Subject{{Kind: "User", Name: "alice"}},
	}
	require.NoError(t, k8sClient.Create(ctx, foreign))
	src := newSource(ns, "cluster-4")
	require.NoError(t, k8sClient.Create(ctx, src))
	waitSourceReady(t, client.ObjectKeyFromObject(src), metav1.ConditionFalse, ReasonBindingNotOwned)
	var after rbacv1.RoleBinding
	require.NoError(t, get(&after, ns, foreign.Name))
	assert.Equalf(t, foreign.ResourceVersion, after.ResourceVersion, "foreign RoleBinding modified: %+v", after)
	// Removing it lets the Source become Ready (after the retry interval).
	require.NoError(t, k8sClient.Delete(ctx, foreign))
	waitSourceReady(t, client.ObjectKeyFromObject(src), metav1.ConditionTrue, v1alpha1.ReasonProvisioned)
}
