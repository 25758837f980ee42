package access

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
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
	require.NoError(t, get(&n, "", ns))
	orig := n.DeepCopy()
	if n.Labels == nil {
		n.Labels = map[string]string{}
	}
	if value == "" {
		delete(n.Labels, key)
	} else {
		n.Labels[key] = value
	}
	require.NoError(t, k8sClient.Patch(context.Background(), &n, client.MergeFrom(orig)))
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
	require.NoError(t, k8sClient.Create(ctx, foreign))

	cs := newClusterSource(name, system)
	require.NoError(t, k8sClient.Create(ctx, cs))
	got := waitClusterSourceReady(t, name, metav1.ConditionTrue, v1alpha1.ReasonProvisioned, 1)
	assert.Falsef(t, got.Status.ServiceAccountName != "fleetlet-source-cluster-10" || got.Status.ServiceAccountNamespace != system, "status service account = %s/%s", got.Status.ServiceAccountNamespace, got.Status.ServiceAccountName)
	waitBound(t, name, a)

	var sa corev1.ServiceAccount
	require.NoError(t, get(&sa, system, "fleetlet-source-cluster-10"))
	assert.Truef(t, isControlledBy(&sa, string(got.UID)), "ServiceAccount owners = %v", sa.OwnerReferences)
	var rb rbacv1.RoleBinding
	require.NoError(t, get(&rb, a, ClusterSourceRoleBindingName(name)))
	assert.Falsef(t, rb.RoleRef.Name != ClusterRoleSource || !isControlledBy(&rb, string(got.UID)), "RoleBinding = roleRef %v, owners %v", rb.RoleRef, rb.OwnerReferences)
	assert.Empty(t, cmp.Diff(wantSubjects(system, sa.Name), rb.Subjects), "RoleBinding subjects (-want,+got)")
	var crb rbacv1.ClusterRoleBinding
	require.NoError(t, get(&crb, "", ClusterSourceClusterRoleBindingName(name)))
	assert.Falsef(t, crb.RoleRef.Name != ClusterRoleSourceReader || !isControlledBy(&crb, string(got.UID)), "ClusterRoleBinding = roleRef %v, owners %v", crb.RoleRef, crb.OwnerReferences)
	assert.NoError(t, get(&rbacv1.RoleBinding{}, system, HeartbeatRoleName(name)), "heartbeat RoleBinding in the ServiceAccount's namespace")
	err := get(&rbacv1.RoleBinding{}, system, ClusterSourceRoleBindingName(name))
	assert.Truef(t, apierrors.IsNotFound(err), "fleetlet-source bound in the ServiceAccount's namespace, which is not selected: %v", err)

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
		require.NoError(t, get(&after, c, foreign.Name))
		assert.Equal(t, foreign.ResourceVersion, after.ResourceVersion, "foreign RoleBinding modified")
	})
	t.Run("a custom selector replaces the default label", func(t *testing.T) {
		setLabel(t, c, "tier", "batch")
		var cur v1alpha1.ClusterSource
		require.NoError(t, get(&cur, "", name))
		cur.Spec.NamespaceSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"tier": "batch"}}
		require.NoError(t, k8sClient.Update(ctx, &cur))
		// c holds someone else's binding of that name: reported, not
		// overwritten; b is no longer selected.
		waitClusterSourceReady(t, name, metav1.ConditionFalse, ReasonBindingNotOwned, 0)
		waitBound(t, name)
		require.NoError(t, k8sClient.Delete(ctx, foreign))
		waitClusterSourceReady(t, name, metav1.ConditionTrue, v1alpha1.ReasonProvisioned, 1)
		waitBound(t, name, c)
	})
}

func TestClusterSourceNeedsItsServiceAccountNamespace(t *testing.T) {
	testenv.Need(t, env)
	ctx := context.Background()
	const name = "cluster-11"
	missing := fmt.Sprintf("later-%d", time.Now().UnixNano())
	require.NoError(t, k8sClient.Create(ctx, newClusterSource(name, missing)))
	waitClusterSourceReady(t, name, metav1.ConditionFalse, ReasonServiceAccountNamespaceNotFound, 0)
	require.NoError(t, k8sClient.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: missing}}))
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
	require.NoError(t, k8sClient.Create(ctx, src))
	waitSourceReady(t, client.ObjectKeyFromObject(src), metav1.ConditionTrue, v1alpha1.ReasonProvisioned)
	cs := newClusterSource("cluster-12", ns)
	cs.Spec.ServiceAccountName = "fleetlet-source-owner"
	require.NoError(t, k8sClient.Create(ctx, cs))
	got := waitClusterSourceReady(t, "cluster-12", metav1.ConditionFalse, v1alpha1.ReasonServiceAccountNotOwned, 0)
	assert.Emptyf(t, got.Status.ServiceAccountName, "status.serviceAccountName = %q", got.Status.ServiceAccountName)
	err := get(&rbacv1.ClusterRoleBinding{}, "", ClusterSourceClusterRoleBindingName("cluster-12"))
	assert.Truef(t, apierrors.IsNotFound(err), "ClusterRoleBinding made for another source's ServiceAccount: %v", errors.Join(err, errors.New("exists")))
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

	require.NoError(t, k8sClient.Create(ctx, newClusterSource(name, system)))
	waitClusterSourceReady(t, name, metav1.ConditionTrue, v1alpha1.ReasonProvisioned, 1)
	waitBound(t, name, a)
	for _, ns := range []string{metav1.NamespaceSystem, system} {
		err := get(&rbacv1.RoleBinding{}, ns, ClusterSourceRoleBindingName(name))
		assert.Truef(t, apierrors.IsNotFound(err), "fleetlet-source bound in %s: %v", ns, err)
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
	require.NoError(t, k8sClient.Create(ctx, cs))
	waitClusterSourceReady(t, name, metav1.ConditionTrue, v1alpha1.ReasonProvisioned, 2)
	waitBound(t, name, selected, created)
	assert.NoError(t, gone(&rbacv1.ClusterRoleBinding{}, "", ClusterSourceNamespacesBindingName(name)), "without spec.namespaces")

	// Opt in.
	require.NoError(t, k8sClient.Get(ctx, client.ObjectKey{Name: name}, cs))
	cs.Spec.Namespaces = &v1alpha1.NamespacePolicy{Prefixes: []string{"src-"}}
	require.NoError(t, k8sClient.Update(ctx, cs))
	waitBound(t, name, selected, created)
	var crb rbacv1.ClusterRoleBinding
	testenv.Eventually(t, waitTimeout, "the namespaces ClusterRoleBinding", func() error {
		return get(&crb, "", ClusterSourceNamespacesBindingName(name))
	})
	assert.Falsef(t, crb.RoleRef.Name != ClusterRoleSourceNamespaces || !isControlledBy(&crb, string(cs.UID)), "ClusterRoleBinding = roleRef %v, owners %v", crb.RoleRef, crb.OwnerReferences)
	assert.Empty(t, cmp.Diff(wantSubjects(system, DefaultServiceAccountName(name)), crb.Subjects), "ClusterRoleBinding subjects (-want,+got)")

	// Opt out: the binding goes; the namespace it created stays its own
	// (removing the label takes it back).
	require.NoError(t, k8sClient.Get(ctx, client.ObjectKey{Name: name}, cs))
	cs.Spec.Namespaces = nil
	require.NoError(t, k8sClient.Update(ctx, cs))
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
	require.Truef(t, apierrors.IsInvalid(err), "creating a ClusterSource with spec.namespaces naming no name or prefix: %v, want Invalid", err)
	assert.Containsf(t, err.Error(), "at least one name or prefix", "refusal %q does not say why", err)
}
