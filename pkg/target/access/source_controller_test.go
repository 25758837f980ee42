package access

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
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
	if err := k8sClient.Create(ctx, src); err != nil {
		t.Fatal(err)
	}
	got := waitSourceReady(t, client.ObjectKeyFromObject(src), metav1.ConditionTrue, v1alpha1.ReasonProvisioned)
	uid := string(got.UID)
	if got.Status.ServiceAccountName != "fleetlet-source-cluster-1" {
		t.Errorf("status.serviceAccountName = %q", got.Status.ServiceAccountName)
	}
	if !controllerutil.ContainsFinalizer(got, FinalizerClusterRoleBinding) {
		t.Errorf("finalizers = %v, want %s", got.Finalizers, FinalizerClusterRoleBinding)
	}

	var sa corev1.ServiceAccount
	if err := get(&sa, ns, "fleetlet-source-cluster-1"); err != nil {
		t.Fatal(err)
	}
	if !isControlledBy(&sa, uid) {
		t.Errorf("ServiceAccount owners = %v, want the Source", sa.OwnerReferences)
	}

	var rb rbacv1.RoleBinding
	if err := get(&rb, ns, "fleetlet-source-cluster-1"); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "fleetlet-source"}, rb.RoleRef); diff != "" {
		t.Errorf("RoleBinding roleRef (-want,+got):\n%s", diff)
	}
	if diff := cmp.Diff(wantSubjects(ns, sa.Name), rb.Subjects); diff != "" {
		t.Errorf("RoleBinding subjects (-want,+got):\n%s", diff)
	}
	if !isControlledBy(&rb, uid) {
		t.Errorf("RoleBinding owners = %v", rb.OwnerReferences)
	}

	var hb rbacv1.Role
	if err := get(&hb, ns, "fleetlet-heartbeat-cluster-1"); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(HeartbeatRules("cluster-1"), hb.Rules); diff != "" {
		t.Errorf("heartbeat Role rules (-want,+got):\n%s", diff)
	}
	var hbb rbacv1.RoleBinding
	if err := get(&hbb, ns, "fleetlet-heartbeat-cluster-1"); err != nil {
		t.Fatal(err)
	}

	crbName := SourceClusterRoleBindingName(ns, "cluster-1")
	var crb rbacv1.ClusterRoleBinding
	if err := get(&crb, "", crbName); err != nil {
		t.Fatal(err)
	}
	if crb.RoleRef.Name != "fleetlet-source-reader" {
		t.Errorf("ClusterRoleBinding roleRef = %v", crb.RoleRef)
	}
	if diff := cmp.Diff(wantSubjects(ns, sa.Name), crb.Subjects); diff != "" {
		t.Errorf("ClusterRoleBinding subjects (-want,+got):\n%s", diff)
	}
	if len(crb.OwnerReferences) != 0 {
		t.Errorf("ClusterRoleBinding has owners %v: a namespaced owner is unresolvable for the garbage collector", crb.OwnerReferences)
	}
	for _, name := range []string{"fleetlet-source", "fleetlet-source-reader", "fleetlet-source-namespaces"} {
		if err := get(&rbacv1.ClusterRole{}, "", name); err != nil {
			t.Errorf("ClusterRole %s: %v", name, err)
		}
	}

	t.Run("repairs what is deleted", func(t *testing.T) {
		if err := k8sClient.Delete(ctx, &rb); err != nil {
			t.Fatal(err)
		}
		if err := k8sClient.Delete(ctx, &crb); err != nil {
			t.Fatal(err)
		}
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
		if err := k8sClient.Delete(ctx, got); err != nil {
			t.Fatal(err)
		}
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
	if err := k8sClient.Create(ctx, src); err != nil {
		t.Fatal(err)
	}
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
	if err := k8sClient.Create(ctx, sa); err != nil {
		t.Fatal(err)
	}
	src := newSource(ns, "cluster-3")
	src.Spec.ServiceAccountName = "mine"
	if err := k8sClient.Create(ctx, src); err != nil {
		t.Fatal(err)
	}
	got := waitSourceReady(t, client.ObjectKeyFromObject(src), metav1.ConditionTrue, v1alpha1.ReasonProvisioned)
	if got.Status.ServiceAccountName != "mine" {
		t.Errorf("status.serviceAccountName = %q, want mine", got.Status.ServiceAccountName)
	}
	var after corev1.ServiceAccount
	if err := get(&after, ns, "mine"); err != nil {
		t.Fatal(err)
	}
	if after.ResourceVersion != sa.ResourceVersion || len(after.OwnerReferences) != 0 {
		t.Errorf("existing ServiceAccount was modified: owners %v, resourceVersion %s → %s", after.OwnerReferences, sa.ResourceVersion, after.ResourceVersion)
	}
	if err := get(&corev1.ServiceAccount{}, ns, "fleetlet-source-cluster-3"); !apierrors.IsNotFound(err) {
		t.Errorf("default ServiceAccount created anyway: %v", err)
	}

	t.Run("changing spec.serviceAccountName moves the bindings and deletes only what it created", func(t *testing.T) {
		// Back to the default: the controller creates it...
		got.Spec.ServiceAccountName = ""
		if err := k8sClient.Update(ctx, got); err != nil {
			t.Fatal(err)
		}
		moved := waitSourceReady(t, client.ObjectKeyFromObject(src), metav1.ConditionTrue, v1alpha1.ReasonProvisioned)
		if moved.Status.ServiceAccountName != "fleetlet-source-cluster-3" {
			t.Fatalf("status.serviceAccountName = %q", moved.Status.ServiceAccountName)
		}
		var rb rbacv1.RoleBinding
		if err := get(&rb, ns, SourceRoleBindingName("cluster-3")); err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(wantSubjects(ns, "fleetlet-source-cluster-3"), rb.Subjects); diff != "" {
			t.Errorf("RoleBinding subjects (-want,+got):\n%s", diff)
		}
		var crb rbacv1.ClusterRoleBinding
		if err := get(&crb, "", SourceClusterRoleBindingName(ns, "cluster-3")); err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(wantSubjects(ns, "fleetlet-source-cluster-3"), crb.Subjects); diff != "" {
			t.Errorf("ClusterRoleBinding subjects (-want,+got):\n%s", diff)
		}
		// ... the user's ServiceAccount stays.
		if err := get(&corev1.ServiceAccount{}, ns, "mine"); err != nil {
			t.Errorf("the user's ServiceAccount: %v", err)
		}
		// And moving again deletes the one it created.
		moved.Spec.ServiceAccountName = "mine"
		if err := k8sClient.Update(ctx, moved); err != nil {
			t.Fatal(err)
		}
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
	if err := k8sClient.Create(ctx, first); err != nil {
		t.Fatal(err)
	}
	waitSourceReady(t, client.ObjectKeyFromObject(first), metav1.ConditionTrue, v1alpha1.ReasonProvisioned)

	second := newSource(ns, "second")
	second.Spec.ServiceAccountName = "fleetlet-source-first"
	if err := k8sClient.Create(ctx, second); err != nil {
		t.Fatal(err)
	}
	got := waitSourceReady(t, client.ObjectKeyFromObject(second), metav1.ConditionFalse, v1alpha1.ReasonServiceAccountNotOwned)
	if got.Status.ServiceAccountName != "" {
		t.Errorf("status.serviceAccountName = %q for a ServiceAccount it may not use", got.Status.ServiceAccountName)
	}
	if err := get(&rbacv1.RoleBinding{}, ns, SourceRoleBindingName("second")); !apierrors.IsNotFound(err) {
		t.Errorf("RoleBinding for another Source's ServiceAccount: %v", err)
	}

	// The garbage collector does not run here: delete the first Source
	// and its ServiceAccount by hand.
	if err := k8sClient.Delete(ctx, first); err != nil {
		t.Fatal(err)
	}
	if err := k8sClient.Delete(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "fleetlet-source-first"}}); err != nil {
		t.Fatal(err)
	}
	got = waitSourceReady(t, client.ObjectKeyFromObject(second), metav1.ConditionTrue, v1alpha1.ReasonProvisioned)
	var sa corev1.ServiceAccount
	if err := get(&sa, ns, "fleetlet-source-first"); err != nil {
		t.Fatal(err)
	}
	if !isControlledBy(&sa, string(got.UID)) {
		t.Errorf("ServiceAccount owners = %v, want the second Source", sa.OwnerReferences)
	}
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
	if err := k8sClient.Create(ctx, foreign); err != nil {
		t.Fatal(err)
	}
	src := newSource(ns, "cluster-4")
	if err := k8sClient.Create(ctx, src); err != nil {
		t.Fatal(err)
	}
	waitSourceReady(t, client.ObjectKeyFromObject(src), metav1.ConditionFalse, ReasonBindingNotOwned)
	var after rbacv1.RoleBinding
	if err := get(&after, ns, foreign.Name); err != nil {
		t.Fatal(err)
	}
	if after.ResourceVersion != foreign.ResourceVersion {
		t.Errorf("foreign RoleBinding modified: %+v", after)
	}
	// Removing it lets the Source become Ready (after the retry interval).
	if err := k8sClient.Delete(ctx, foreign); err != nil {
		t.Fatal(err)
	}
	waitSourceReady(t, client.ObjectKeyFromObject(src), metav1.ConditionTrue, v1alpha1.ReasonProvisioned)
}
