package chart_test

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
)

// testSourceNamespacesPolicy: a source bound to fleetlet-source-namespaces
// creates only the namespaces its own ClusterSource's spec.namespaces
// allows (name or prefix; label and annotation keys; Pod Security levels
// that only tighten are free), labelled as created by it, never changes one,
// and deletes only those labelled as its own. Another source's policy grants
// it nothing.
func testSourceNamespacesPolicy(t *testing.T, admin client.Client) {
	ctx := context.Background()
	clusterSource := func(name string, policy *v1alpha1.NamespacePolicy) {
		t.Helper()
		cs := &v1alpha1.ClusterSource{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec:       v1alpha1.ClusterSourceSpec{ServiceAccountNamespace: releaseNS, Namespaces: policy},
		}
		require.NoError(t, admin.Create(ctx, cs))
		// No manager runs here: the status it would write, by hand.
		cs.Status.ServiceAccountName, cs.Status.ServiceAccountNamespace = "fleetlet-source-"+name, releaseNS
		require.NoError(t, admin.Status().Update(ctx, cs))
		crb := &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "test-namespaces-" + name},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "fleetlet-source-namespaces"},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: releaseNS, Name: "fleetlet-source-" + name}},
		}
		require.NoError(t, admin.Create(ctx, crb))
		t.Cleanup(func() {
			_ = admin.Delete(context.Background(), crb)
			_ = admin.Delete(context.Background(), cs)
		})
	}
	clusterSource("east", &v1alpha1.NamespacePolicy{Prefixes: []string{"team-"}, Names: []string{"payments"}, Labels: []string{"team", "example.com/"}, Annotations: []string{"owner"}})
	clusterSource("west", &v1alpha1.NamespacePolicy{Names: []string{"west-only"}})
	east := as(t, "system:serviceaccount:"+releaseNS+":fleetlet-source-east")
	west := as(t, "system:serviceaccount:"+releaseNS+":fleetlet-source-west")

	ns := func(name, createdBy string, labels, annotations map[string]string) *corev1.Namespace {
		n := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{}, Annotations: annotations}}
		if createdBy != "" {
			n.Labels[v1alpha1.LabelCreatedBySource] = createdBy
		}
		for k, v := range labels {
			n.Labels[k] = v
		}
		return n
	}
	refused := func(what string, err error, says string) {
		t.Helper()
		assert.ErrorContainsf(t, err, says, "%s: %v, want a refusal saying %q", what, err, says)
	}

	// The policy and its parameters reach the API server's admission a
	// moment after they are created.
	eventually(t, "fleetlet-source-namespaces in force", func() error {
		err := east.Create(ctx, ns("elsewhere", "east", nil, nil))
		if err == nil {
			_ = admin.Delete(ctx, ns("elsewhere", "", nil, nil))
			return errNotYet
		}
		if !strings.Contains(err.Error(), "does not let its source create namespace elsewhere") {
			return err
		}
		return nil
	})
	refused("without the created-by label", east.Create(ctx, ns("team-ns", "", nil, nil)), "must carry the label multicluster.fleetlet.io/created-by-source=east")
	refused("labelled as another source's", east.Create(ctx, ns("team-ns", "west", nil, nil)), "must carry the label multicluster.fleetlet.io/created-by-source=east")
	refused("a label the policy does not list", east.Create(ctx, ns("team-ns", "east", map[string]string{"tier": "gold"}, nil)), "does not let its source set the label(s) tier=gold")
	refused("Pod Security privileged", east.Create(ctx, ns("team-ns", "east", map[string]string{"pod-security.kubernetes.io/enforce": "privileged"}, nil)), "pod-security.kubernetes.io/enforce=privileged")
	refused("an annotation the policy does not list", east.Create(ctx, ns("team-ns", "east", nil, map[string]string{"note": "x"})), "does not let its source set the annotation(s) note")
	refused("a name only west's policy allows", east.Create(ctx, ns("west-only", "east", nil, nil)), "does not let its source create namespace west-only")
	refused("west, a name only east's policy allows", west.Create(ctx, ns("team-w", "west", nil, nil)), "ClusterSource west does not let its source create namespace team-w")

	allowed := []*corev1.Namespace{
		ns("team-ns", "east", map[string]string{
			"team": "a", "example.com/cost-center": "42",
			"pod-security.kubernetes.io/enforce": "restricted", "pod-security.kubernetes.io/enforce-version": "latest", "pod-security.kubernetes.io/warn": "baseline",
		}, map[string]string{"owner": "alice"}),
		ns("payments", "east", nil, nil),
	}
	for _, n := range allowed {
		require.NoError(t, east.Create(ctx, n), "creating %s within its policy", n.Name)
	}
	handMade := ns("team-ns-hand", "", nil, nil)
	require.NoError(t, admin.Create(ctx, handMade))
	t.Cleanup(func() { _ = admin.Delete(context.Background(), handMade) })

	var got corev1.Namespace
	require.NoError(t, admin.Get(ctx, client.ObjectKey{Name: "team-ns"}, &got))
	got.Labels["team"] = "b"
	// RBAC gives no update either; the policy says it first.
	assert.Error(t, east.Update(ctx, &got), "a source updated a namespace")
	refused("deleting a namespace made by hand", east.Delete(ctx, handMade), "deletes only the namespaces it created")
	refused("west deleting east's namespace", west.Delete(ctx, allowed[1]), "deletes only the namespaces it created")
	for _, n := range allowed {
		assert.NoError(t, east.Delete(ctx, n), "deleting its own namespace %s", n.Name)
	}
}
