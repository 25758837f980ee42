package access

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
)

// The rules are the contract of least privilege: any change must show up
// here.
func TestRulesAreExactlyLeastPrivilege(t *testing.T) {
	tests := []struct {
		name string
		got  []rbacv1.PolicyRule
		want []rbacv1.PolicyRule
	}{
		{
			name: "fleetlet-source",
			got:  SourceRules(),
			want: []rbacv1.PolicyRule{
				{APIGroups: []string{"multicluster.fleetlet.io"}, Resources: []string{"podchaperons"}, Verbs: []string{"get", "list", "watch", "create", "update", "patch", "delete"}},
				{APIGroups: []string{"multicluster.fleetlet.io"}, Resources: []string{"podchaperons/status"}, Verbs: []string{"get"}},
				{APIGroups: []string{"multicluster.fleetlet.io"}, Resources: []string{"podchaperons/finalizers"}, Verbs: []string{"update"}},
				{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list", "watch", "create", "patch"}},
				{APIGroups: []string{""}, Resources: []string{"pods/resize", "pods/ephemeralcontainers"}, Verbs: []string{"patch"}},
				{APIGroups: []string{""}, Resources: []string{"pods/log"}, Verbs: []string{"get"}},
				{APIGroups: []string{"metrics.k8s.io"}, Resources: []string{"pods"}, Verbs: []string{"get", "list"}},
				{APIGroups: []string{""}, Resources: []string{"pods/exec", "pods/attach", "pods/portforward"}, Verbs: []string{"get", "create"}},
				{APIGroups: []string{"", "events.k8s.io"}, Resources: []string{"events"}, Verbs: []string{"get", "list", "watch", "create", "patch"}},
				{APIGroups: []string{""}, Resources: []string{"configmaps", "secrets", "serviceaccounts"}, Verbs: []string{"get", "list", "watch", "create", "update", "patch", "delete"}},
				{APIGroups: []string{""}, Resources: []string{"services"}, Verbs: []string{"get", "list", "watch", "create", "update", "patch", "delete"}},
				{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: []string{"get", "list", "watch", "create", "update", "patch", "delete"}},
				{APIGroups: []string{""}, Resources: []string{"persistentvolumeclaims"}, Verbs: []string{"get", "list", "create", "patch", "delete"}},
				{APIGroups: []string{"resource.k8s.io"}, Resources: []string{"resourceclaimtemplates"}, Verbs: []string{"get", "list", "create", "update", "delete"}},
				{APIGroups: []string{"resource.k8s.io"}, Resources: []string{"resourceclaims"}, Verbs: []string{"get", "list", "create", "update", "delete"}},
			},
		},
		{
			name: "fleetlet-source-reader",
			got:  SourceReaderRules(),
			want: []rbacv1.PolicyRule{
				{APIGroups: []string{""}, Resources: []string{"namespaces"}, Verbs: []string{"get", "list", "watch"}},
				{APIGroups: []string{"multicluster.fleetlet.io"}, Resources: []string{"clustersummaries"}, Verbs: []string{"get", "list", "watch"}},
			},
		},
		{
			name: "fleetlet-source-namespaces",
			got:  SourceNamespacesRules(),
			want: []rbacv1.PolicyRule{
				{APIGroups: []string{""}, Resources: []string{"namespaces"}, Verbs: []string{"create", "delete"}},
			},
		},
		{
			name: "heartbeat",
			got:  HeartbeatRules("cluster-1"),
			want: []rbacv1.PolicyRule{
				{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"create"}},
				{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, ResourceNames: []string{"fleetlet-source-cluster-1"}, Verbs: []string{"get", "update"}},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Empty(t, cmp.Diff(tt.want, tt.got), "rules (-want,+got)")
		})
	}
}

// No rule may ever grant what a source must not have. (patch on pods is
// granted: the chaperon controller passes a user's changes to a running
// proxy on as the source, and the chart's fleetlet-source-pod-updates
// admission policy holds a source's patches to its own delegates.)
func TestRulesNeverGrant(t *testing.T) {
	forbidden := []struct{ group, resource, verb string }{
		{"", "pods", "delete"},
		{"", "pods", "update"},
		{"", "pods/status", "patch"},
		{"", "pods/binding", "create"},
		{"", "pods/eviction", "create"},
		{"", "serviceaccounts/token", "create"},
		{"", "nodes", "get"},
		{"", "namespaces", "create"},
		{"rbac.authorization.k8s.io", "rolebindings", "create"},
		{"multicluster.fleetlet.io", "podchaperons/status", "update"},
		{"multicluster.fleetlet.io", "sources", "get"},
		{"coordination.k8s.io", "leases", "update"},
	}
	for _, f := range forbidden {
		for _, rules := range [][]rbacv1.PolicyRule{SourceRules(), SourceReaderRules()} {
			for _, r := range rules {
				assert.Falsef(t, contains(r.APIGroups, f.group) && (contains(r.Resources, f.resource) || contains(r.Resources, "*")) && (contains(r.Verbs, f.verb) || contains(r.Verbs, "*")), "rule %+v grants %s %s/%s", r, f.verb, f.group, f.resource)
			}
		}
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func TestEnsureClusterRoles(t *testing.T) {
	scheme := runtime.NewScheme()
	require.NoError(t, clientgoscheme.AddToScheme(scheme))
	ctx := context.Background()

	t.Run("creates both", func(t *testing.T) {
		c := fake.NewClientBuilder().WithScheme(scheme).Build()
		require.NoError(t, EnsureClusterRoles(ctx, c))
		for _, want := range ClusterRoles() {
			var got rbacv1.ClusterRole
			require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(want), &got))
			assert.Emptyf(t, cmp.Diff(want.Rules, got.Rules), "%s rules (-want,+got)", want.Name)
			assert.Equalf(t, ManagedBy, got.Labels[LabelManagedBy], "%s labels = %v", want.Name, got.Labels)
		}
	})

	t.Run("repairs rules and keeps foreign labels", func(t *testing.T) {
		stale := &rbacv1.ClusterRole{
			ObjectMeta: metav1.ObjectMeta{Name: ClusterRoleSource, Labels: map[string]string{"helm.sh/chart": "fleetlet"}},
			Rules:      []rbacv1.PolicyRule{{APIGroups: []string{"*"}, Resources: []string{"*"}, Verbs: []string{"*"}}},
		}
		c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(stale).Build()
		require.NoError(t, EnsureClusterRoles(ctx, c))
		var got rbacv1.ClusterRole
		require.NoError(t, c.Get(ctx, client.ObjectKey{Name: ClusterRoleSource}, &got))
		assert.Empty(t, cmp.Diff(SourceRules(), got.Rules), "rules (-want,+got)")
		assert.Falsef(t, got.Labels["helm.sh/chart"] != "fleetlet" || got.Labels[LabelManagedBy] != ManagedBy, "labels = %v", got.Labels)
	})

	t.Run("writes nothing when up to date", func(t *testing.T) {
		c := fake.NewClientBuilder().WithScheme(scheme).Build()
		require.NoError(t, EnsureClusterRoles(ctx, c))
		var before rbacv1.ClusterRole
		require.NoError(t, c.Get(ctx, client.ObjectKey{Name: ClusterRoleSource}, &before))
		require.NoError(t, EnsureClusterRoles(ctx, c))
		var after rbacv1.ClusterRole
		require.NoError(t, c.Get(ctx, client.ObjectKey{Name: ClusterRoleSource}, &after))
		assert.Equalf(t, before.ResourceVersion, after.ResourceVersion, "resourceVersion %s → %s: an up-to-date ClusterRole was written", before.ResourceVersion, after.ResourceVersion)
	})
}

func TestNamespaceSelector(t *testing.T) {
	// see clustersource_controller_test.go for the integration; here only
	// the defaulting and the refusal of an empty selector.
	cs := newClusterSource("c1", "fleetlet-system")
	sel, err := NamespaceSelector(cs)
	require.NoError(t, err)
	got, want := sel.String(), "source.multicluster.fleetlet.io/c1=true"
	assert.Equal(t, want, got, "default selector")
	cs.Spec.NamespaceSelector = &metav1.LabelSelector{}
	_, err = NamespaceSelector(cs)
	assert.Error(t, err, "an empty selector was accepted")
	cs.Spec.NamespaceSelector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "a", Operator: "Bogus"}}}
	_, err = NamespaceSelector(cs)
	assert.Error(t, err, "an invalid selector was accepted")
}
