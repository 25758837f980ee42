package follow

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
)

// testMapper knows a few namespaced kinds, a cluster-scoped one, and a
// Kind served by two groups.
func testMapper() meta.RESTMapper {
	m := meta.NewDefaultRESTMapper([]schema.GroupVersion{corev1.SchemeGroupVersion, appsv1.SchemeGroupVersion, rbacv1.SchemeGroupVersion})
	for _, k := range []string{"ConfigMap", "Secret", "ServiceAccount", "PersistentVolumeClaim"} {
		m.Add(corev1.SchemeGroupVersion.WithKind(k), meta.RESTScopeNamespace)
	}
	m.Add(appsv1.SchemeGroupVersion.WithKind("Deployment"), meta.RESTScopeNamespace)
	m.Add(rbacv1.SchemeGroupVersion.WithKind("ClusterRole"), meta.RESTScopeRoot)
	m.Add(schema.GroupVersionKind{Group: "a.example.com", Version: "v1", Kind: "Widget"}, meta.RESTScopeNamespace)
	m.Add(schema.GroupVersionKind{Group: "b.example.com", Version: "v1", Kind: "Widget"}, meta.RESTScopeNamespace)
	return m
}

func newTestFollower(t *testing.T, allowed ...string) *Follower {
	t.Helper()
	c := fake.NewClientBuilder().Build()
	f, err := New(Options{SourceName: "src", AllowedKinds: allowed, Source: c, SourceAPI: c, Mapper: testMapper()})
	require.NoError(t, err)
	return f
}

func TestNewValidates(t *testing.T) {
	_, err := New(Options{})
	require.Error(t, err, "New accepted empty options")
}

func TestResolve(t *testing.T) {
	defaults := []string{"ConfigMap", "Secret", "ServiceAccount"}
	core := func(kind string) schema.GroupVersionKind { return corev1.SchemeGroupVersion.WithKind(kind) }
	cases := []struct {
		name    string
		allowed []string
		refs    RefSet
		want    []item
		reason  Reason
	}{
		{
			name:    "spec references need no allow-list",
			allowed: nil,
			refs:    RefSet{cmRef("cfg"), secretRef("s"), saRef("default")},
			want: []item{
				{gvk: core("ConfigMap"), name: "cfg", what: "ConfigMap cfg"},
				{gvk: core("Secret"), name: "s", what: "Secret s"},
				{gvk: core("ServiceAccount"), name: "default", what: "ServiceAccount default"},
			},
		},
		{
			name:    "kind names in any case, singular or plural",
			allowed: defaults,
			refs:    RefSet{annotated("configmap", "a"), annotated("ConfigMaps", "b"), annotated("SECRET", "c"), annotated("serviceaccounts", "d")},
			want: []item{
				{gvk: core("ConfigMap"), name: "a", what: "configmap/a"},
				{gvk: core("ConfigMap"), name: "b", what: "ConfigMaps/b"},
				{gvk: core("Secret"), name: "c", what: "SECRET/c"},
				{gvk: core("ServiceAccount"), name: "d", what: "serviceaccounts/d"},
			},
		},
		{
			name:    "annotated and spec reference of one object merge; not optional wins",
			allowed: defaults,
			refs:    RefSet{optional(cmRef("x")), annotated("configmap", "x")},
			want:    []item{{gvk: core("ConfigMap"), name: "x", what: "ConfigMap x"}},
		},
		{
			name:    "kube-root-ca.crt asked for by the annotation is left out",
			allowed: defaults,
			refs:    RefSet{annotated("configmap", RootCAConfigMap)},
		},
		{
			name:    "an allowed kind with its group",
			allowed: []string{"PersistentVolumeClaim", "Deployment"},
			refs:    RefSet{annotated("persistentvolumeclaims", "data"), annotated("deployment.apps", "web")},
			want: []item{
				{gvk: core("PersistentVolumeClaim"), name: "data", what: "persistentvolumeclaims/data"},
				{gvk: appsv1.SchemeGroupVersion.WithKind("Deployment"), name: "web", what: "deployment.apps/web"},
			},
		},
		{
			name:    "a kind outside the allow-list",
			allowed: defaults,
			refs:    RefSet{annotated("persistentvolumeclaim", "data")},
			reason:  ReasonNotAllowed,
		},
		{
			name:    "an unknown kind",
			allowed: defaults,
			refs:    RefSet{annotated("gizmo", "x")},
			reason:  ReasonNotAllowed,
		},
		{
			name:    "a cluster-scoped kind, even allowed",
			allowed: []string{"ClusterRole"},
			refs:    RefSet{annotated("clusterrole", "admin")},
			reason:  ReasonClusterScoped,
		},
		{
			name:    "a cluster-scoped kind not allowed is refused as cluster-scoped",
			allowed: defaults,
			refs:    RefSet{annotated("ClusterRoles", "admin")},
			reason:  ReasonClusterScoped,
		},
		{
			name:    "a kind two groups serve must name its group",
			allowed: []string{"Widget"},
			refs:    RefSet{annotated("widget", "w")},
			reason:  ReasonMalformed,
		},
		{
			name:    "a kind two groups serve, with its group",
			allowed: []string{"Widget"},
			refs:    RefSet{annotated("widgets.b.example.com", "w")},
			want:    []item{{gvk: schema.GroupVersionKind{Group: "b.example.com", Version: "v1", Kind: "Widget"}, name: "w", what: "widgets.b.example.com/w"}},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newTestFollower(t, tc.allowed...)
			got, err := f.resolve(tc.refs)
			if tc.reason != "" {
				var refusal *Refusal
				require.Truef(t, errors.As(err, &refusal), "got %v, want a *Refusal", err)
				assert.Equal(t, tc.reason, refusal.Reason, "reason (%s)", refusal.Message)
				return
			}
			require.NoError(t, err)
			assert.Empty(t, cmp.Diff(tc.want, got, cmp.AllowUnexported(item{})), "resolve (-want +got)")
		})
	}
}

func TestFollowedKinds(t *testing.T) {
	f := newTestFollower(t, "ConfigMap", "Secret", "ServiceAccount", "PersistentVolumeClaim", "ClusterRole", "Gizmo", "Deployment")
	got := f.followedKinds(false)
	want := []schema.GroupVersionKind{
		corev1.SchemeGroupVersion.WithKind("ConfigMap"),
		corev1.SchemeGroupVersion.WithKind("Secret"),
		corev1.SchemeGroupVersion.WithKind("ServiceAccount"),
		appsv1.SchemeGroupVersion.WithKind("Deployment"),
		corev1.SchemeGroupVersion.WithKind("PersistentVolumeClaim"),
	}
	assert.Empty(t, cmp.Diff(want, got), "followedKinds (-want +got)")
	// Once a pod referencing a ResourceClaimTemplate was seen, Release
	// lists their copies too.
	withTemplates := append(want[:3:3], schema.GroupVersionKind{Group: "resource.k8s.io", Version: "v1", Kind: "ResourceClaimTemplate"},
		schema.GroupVersionKind{Group: "resource.k8s.io", Version: "v1", Kind: "ResourceClaim"})
	withTemplates = append(withTemplates, want[3:]...)
	assert.Empty(t, cmp.Diff(withTemplates, f.followedKinds(true)), "followedKinds(true) (-want +got)")
	var kinds []string
	for _, c := range f.Collectors() {
		kinds = append(kinds, c.Kind())
	}
	wantKinds := []string{"FollowedConfigMap", "FollowedSecret", "FollowedServiceAccount", "FollowedResourceClaimTemplate", "FollowedResourceClaim", "FollowedClusterRole", "FollowedDeployment", "FollowedGizmo", "FollowedPersistentVolumeClaim"}
	assert.Empty(t, cmp.Diff(wantKinds, kinds), "Collectors (-want +got)")
}
