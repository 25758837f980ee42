package access

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
	"github.com/fleetlet/fleetlet/pkg/testenv"
)

// boundNamespaces lists the namespaces where the ClusterSource has its
// RoleBinding.
func boundNamespaces(name string) ([]string, error) {
	var list rbacv1.RoleBindingList
	if err := k8sClient.List(context.Background(), &list, client.MatchingLabels{LabelSourceKind: KindClusterSource, LabelSourceName: name}); err != nil {
		return nil, err
	}
	var out []string
	for _, rb := range list.Items {
		if rb.Name == ClusterSourceRoleBindingName(name) {
			out = append(out, rb.Namespace)
		}
	}
	sort.Strings(out)
	return out, nil
}

func waitBound(t *testing.T, name string, want ...string) {
	t.Helper()
	sort.Strings(want)
	testenv.Eventually(t, waitTimeout, fmt.Sprintf("ClusterSource %s bound in %v", name, want), func() error {
		got, err := boundNamespaces(name)
		if err != nil {
			return err
		}
		if diff := cmp.Diff(want, got); diff != "" {
			return fmt.Errorf("namespaces (-want,+got):\n%s", diff)
		}
		return nil
	})
}

func setLabel(t *testing.T, ns, key, value string) {
	t.Helper()
	var n corev1.Namespace
	if err := get(&n, "", ns); err != nil {
		t.Fatal(err)
	}
	orig := n.DeepCopy()
	if n.Labels == nil {
		n.Labels = map[string]string{}
	}
	if value == "" {
		delete(n.Labels, key)
	} else {
		n.Labels[key] = value
	}
	if err := k8sClient.Patch(context.Background(), &n, client.MergeFrom(orig)); err != nil {
		t.Fatal(err)
	}
}

func TestClusterSourceFollowsNamespaceLabels(t *testing.T) {
	testenv.Need(t, env)
	ctx := context.Background()
	const name = "cluster-10"
	label := DefaultNamespaceLabel(name)
	system := newNamespace(t, nil)
	a := newNamespace(t, map[string]string{label: "true"})
	b := newNamespace(t, nil)
	c := newNamespace(t, map[string]string{label: "false"})

	// Someone else's binding of the same name in a namespace that is not
	// selected: never touched.
	foreign := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: c, Name: ClusterSourceRoleBindingName(name)},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "view"},
		Subjects:   []rbacv1.Subject{{Kind: "User", Name: "alice"}},
	}
	if err := k8sClient.Create(ctx, foreign); err != nil {
		t.Fatal(err)
	}

	cs := newClusterSource(name, system)
	if err := k8sClient.Create(ctx, cs); err != nil {
		t.Fatal(err)
	}
	got := waitClusterSourceReady(t, name, metav1.ConditionTrue, v1alpha1.ReasonProvisioned, 1)
	if got.Status.ServiceAccountName != "fleetlet-source-cluster-10" || got.Status.ServiceAccountNamespace != system {
		t.Errorf("status service account = %s/%s", got.Status.ServiceAccountNamespace, got.Status.ServiceAccountName)
	}
	waitBound(t, name, a)

	var sa corev1.ServiceAccount
	if err := get(&sa, system, "fleetlet-source-cluster-10"); err != nil {
		t.Fatal(err)
	}
	if !isControlledBy(&sa, string(got.UID)) {
		t.Errorf("ServiceAccount owners = %v", sa.OwnerReferences)
	}
	var rb rbacv1.RoleBinding
	if err := get(&rb, a, ClusterSourceRoleBindingName(name)); err != nil {
		t.Fatal(err)
	}
	if rb.RoleRef.Name != ClusterRoleSource || !isControlledBy(&rb, string(got.UID)) {
		t.Errorf("RoleBinding = roleRef %v, owners %v", rb.RoleRef, rb.OwnerReferences)
	}
	if diff := cmp.Diff(wantSubjects(system, sa.Name), rb.Subjects); diff != "" {
		t.Errorf("RoleBinding subjects (-want,+got):\n%s", diff)
	}
	var crb rbacv1.ClusterRoleBinding
	if err := get(&crb, "", ClusterSourceClusterRoleBindingName(name)); err != nil {
		t.Fatal(err)
	}
	if crb.RoleRef.Name != ClusterRoleSourceReader || !isControlledBy(&crb, string(got.UID)) {
		t.Errorf("ClusterRoleBinding = roleRef %v, owners %v", crb.RoleRef, crb.OwnerReferences)
	}
	if err := get(&rbacv1.RoleBinding{}, system, HeartbeatRoleName(name)); err != nil {
		t.Errorf("heartbeat RoleBinding in the ServiceAccount's namespace: %v", err)
	}
	if err := get(&rbacv1.RoleBinding{}, system, ClusterSourceRoleBindingName(name)); !apierrors.IsNotFound(err) {
		t.Errorf("fleetlet-source bound in the ServiceAccount's namespace, which is not selected: %v", err)
	}

	cfg := tokenConfig(t, system, sa.Name)
	checkAccess(t, cfg, []access{
		{verb: "create", group: v1alpha1.GroupName, resource: "podchaperons", namespace: a, allowed: true},
		{verb: "create", group: v1alpha1.GroupName, resource: "podchaperons", namespace: b, allowed: false},
		{verb: "create", group: v1alpha1.GroupName, resource: "podchaperons", namespace: system, allowed: false},
		{verb: "update", group: "coordination.k8s.io", resource: "leases", namespace: system, name: HeartbeatLeaseName(name), allowed: true},
		{verb: "update", group: "coordination.k8s.io", resource: "leases", namespace: system, name: "fleetlet-manager", allowed: false},
		{verb: "list", resource: "namespaces", allowed: true},
	})

	t.Run("a namespace labelled later is bound", func(t *testing.T) {
		setLabel(t, b, label, "true")
		waitBound(t, name, a, b)
		waitClusterSourceReady(t, name, metav1.ConditionTrue, v1alpha1.ReasonProvisioned, 2)
		checkAccess(t, cfg, []access{{verb: "create", group: v1alpha1.GroupName, resource: "podchaperons", namespace: b, allowed: true}})
	})
	t.Run("a namespace unlabelled loses its binding", func(t *testing.T) {
		setLabel(t, a, label, "")
		waitBound(t, name, b)
		waitClusterSourceReady(t, name, metav1.ConditionTrue, v1alpha1.ReasonProvisioned, 1)
		checkAccess(t, cfg, []access{{verb: "create", group: v1alpha1.GroupName, resource: "podchaperons", namespace: a, allowed: false}})
	})
	t.Run("a binding it did not create is never touched", func(t *testing.T) {
		var after rbacv1.RoleBinding
		if err := get(&after, c, foreign.Name); err != nil {
			t.Fatal(err)
		}
		if after.ResourceVersion != foreign.ResourceVersion {
			t.Errorf("foreign RoleBinding modified")
		}
	})
	t.Run("a custom selector replaces the default label", func(t *testing.T) {
		setLabel(t, c, "tier", "batch")
		var cur v1alpha1.ClusterSource
		if err := get(&cur, "", name); err != nil {
			t.Fatal(err)
		}
		cur.Spec.NamespaceSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"tier": "batch"}}
		if err := k8sClient.Update(ctx, &cur); err != nil {
			t.Fatal(err)
		}
		// c holds someone else's binding of that name: reported, not
		// overwritten; b is no longer selected.
		waitClusterSourceReady(t, name, metav1.ConditionFalse, ReasonBindingNotOwned, 0)
		waitBound(t, name)
		if err := k8sClient.Delete(ctx, foreign); err != nil {
			t.Fatal(err)
		}
		waitClusterSourceReady(t, name, metav1.ConditionTrue, v1alpha1.ReasonProvisioned, 1)
		waitBound(t, name, c)
	})
}

func TestClusterSourceNeedsItsServiceAccountNamespace(t *testing.T) {
	testenv.Need(t, env)
	ctx := context.Background()
	const name = "cluster-11"
	missing := fmt.Sprintf("later-%d", time.Now().UnixNano())
	if err := k8sClient.Create(ctx, newClusterSource(name, missing)); err != nil {
		t.Fatal(err)
	}
	waitClusterSourceReady(t, name, metav1.ConditionFalse, ReasonServiceAccountNamespaceNotFound, 0)
	if err := k8sClient.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: missing}}); err != nil {
		t.Fatal(err)
	}
	got := waitClusterSourceReady(t, name, metav1.ConditionTrue, v1alpha1.ReasonProvisioned, 0)
	testenv.Eventually(t, waitTimeout, "ServiceAccount created", func() error {
		return get(&corev1.ServiceAccount{}, missing, got.Status.ServiceAccountName)
	})
}

func TestClusterSourceRefusesServiceAccountOfAnotherSource(t *testing.T) {
	testenv.Need(t, env)
	ctx := context.Background()
	ns := newNamespace(t, nil)
	src := newSource(ns, "owner")
	if err := k8sClient.Create(ctx, src); err != nil {
		t.Fatal(err)
	}
	waitSourceReady(t, client.ObjectKeyFromObject(src), metav1.ConditionTrue, v1alpha1.ReasonProvisioned)
	cs := newClusterSource("cluster-12", ns)
	cs.Spec.ServiceAccountName = "fleetlet-source-owner"
	if err := k8sClient.Create(ctx, cs); err != nil {
		t.Fatal(err)
	}
	got := waitClusterSourceReady(t, "cluster-12", metav1.ConditionFalse, v1alpha1.ReasonServiceAccountNotOwned, 0)
	if got.Status.ServiceAccountName != "" {
		t.Errorf("status.serviceAccountName = %q", got.Status.ServiceAccountName)
	}
	err := get(&rbacv1.ClusterRoleBinding{}, "", ClusterSourceClusterRoleBindingName("cluster-12"))
	if !apierrors.IsNotFound(err) {
		t.Errorf("ClusterRoleBinding made for another source's ServiceAccount: %v", errors.Join(err, errors.New("exists")))
	}
}

// A ClusterSource never acts in the cluster's own namespaces nor in its
// ServiceAccount's, whatever their labels say. Before: a kube-system
// labelled for a source (by mistake, or by a tenant allowed to label it)
// got a RoleBinding to fleetlet-source there, and the source could run
// pods beside the control plane's.
func TestClusterSourceNeverActsInSystemNamespaces(t *testing.T) {
	testenv.Need(t, env)
	ctx := context.Background()
	const name = "cluster-sysns"
	label := DefaultNamespaceLabel(name)
	system := newNamespace(t, map[string]string{label: "true"})
	a := newNamespace(t, map[string]string{label: "true"})
	setLabel(t, metav1.NamespaceSystem, label, "true")
	t.Cleanup(func() { setLabel(t, metav1.NamespaceSystem, label, "") })

	if err := k8sClient.Create(ctx, newClusterSource(name, system)); err != nil {
		t.Fatal(err)
	}
	waitClusterSourceReady(t, name, metav1.ConditionTrue, v1alpha1.ReasonProvisioned, 1)
	waitBound(t, name, a)
	for _, ns := range []string{metav1.NamespaceSystem, system} {
		if err := get(&rbacv1.RoleBinding{}, ns, ClusterSourceRoleBindingName(name)); !apierrors.IsNotFound(err) {
			t.Errorf("fleetlet-source bound in %s: %v", ns, err)
		}
	}
}

// A ClusterSource that lets its source create namespaces binds it to
// fleetlet-source-namespaces, and only then. The namespaces its source
// created are its own whatever its selector says, with the policy or
// without (it only stops new ones), until their label is removed.
func TestClusterSourceNamespacePolicy(t *testing.T) {
	testenv.Need(t, env)
	ctx := context.Background()
	const name = "cluster-ns"
	system := newNamespace(t, nil)
	selected := newNamespace(t, map[string]string{DefaultNamespaceLabel(name): "true"})
	created := newNamespace(t, map[string]string{v1alpha1.LabelCreatedBySource: name})
	// Another source's: never this one's (waitBound wants exactly).
	newNamespace(t, map[string]string{v1alpha1.LabelCreatedBySource: "another"})

	cs := newClusterSource(name, system)
	if err := k8sClient.Create(ctx, cs); err != nil {
		t.Fatal(err)
	}
	waitClusterSourceReady(t, name, metav1.ConditionTrue, v1alpha1.ReasonProvisioned, 2)
	waitBound(t, name, selected, created)
	if err := gone(&rbacv1.ClusterRoleBinding{}, "", ClusterSourceNamespacesBindingName(name)); err != nil {
		t.Errorf("without spec.namespaces: %v", err)
	}

	// Opt in.
	if err := k8sClient.Get(ctx, client.ObjectKey{Name: name}, cs); err != nil {
		t.Fatal(err)
	}
	cs.Spec.Namespaces = &v1alpha1.NamespacePolicy{Prefixes: []string{"src-"}}
	if err := k8sClient.Update(ctx, cs); err != nil {
		t.Fatal(err)
	}
	waitBound(t, name, selected, created)
	var crb rbacv1.ClusterRoleBinding
	testenv.Eventually(t, waitTimeout, "the namespaces ClusterRoleBinding", func() error {
		return get(&crb, "", ClusterSourceNamespacesBindingName(name))
	})
	if crb.RoleRef.Name != ClusterRoleSourceNamespaces || !isControlledBy(&crb, string(cs.UID)) {
		t.Errorf("ClusterRoleBinding = roleRef %v, owners %v", crb.RoleRef, crb.OwnerReferences)
	}
	if diff := cmp.Diff(wantSubjects(system, DefaultServiceAccountName(name)), crb.Subjects); diff != "" {
		t.Errorf("ClusterRoleBinding subjects (-want,+got):\n%s", diff)
	}

	// Opt out: the binding goes; the namespace it created stays its own
	// (removing the label takes it back).
	if err := k8sClient.Get(ctx, client.ObjectKey{Name: name}, cs); err != nil {
		t.Fatal(err)
	}
	cs.Spec.Namespaces = nil
	if err := k8sClient.Update(ctx, cs); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, waitTimeout, "the namespaces ClusterRoleBinding gone", func() error {
		return gone(&rbacv1.ClusterRoleBinding{}, "", ClusterSourceNamespacesBindingName(name))
	})
	waitBound(t, name, selected, created)
	setLabel(t, created, v1alpha1.LabelCreatedBySource, "")
	waitBound(t, name, selected)
}

// An empty namespace policy is refused by the API server.
func TestClusterSourceNamespacePolicyNeedsANameOrPrefix(t *testing.T) {
	testenv.Need(t, env)
	cs := newClusterSource("cluster-ns-empty", "default")
	cs.Spec.Namespaces = &v1alpha1.NamespacePolicy{Labels: []string{"team"}}
	err := k8sClient.Create(context.Background(), cs)
	if !apierrors.IsInvalid(err) {
		t.Fatalf("creating a ClusterSource with spec.namespaces naming no name or prefix: %v, want Invalid", err)
	}
	if !strings.Contains(err.Error(), "at least one name or prefix") {
		t.Errorf("refusal %q does not say why", err)
	}
}
