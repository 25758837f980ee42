package gc

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
	proxypod "github.com/fleetlet/fleetlet/pkg/proxy"
	"github.com/fleetlet/fleetlet/pkg/testenv"
)

// A namespace the source created in a target goes once the source's is
// gone, and only then, only when old enough, only when it holds nothing but
// the source's own objects and what Kubernetes makes; never a namespace the
// source did not create, nor one in the source cluster as its own target.
func TestCollectNamespaces(t *testing.T) {
	now := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	old, young := now.Add(-10*time.Minute), now.Add(-10*time.Second)
	ns := func(name, createdBy string, at time.Time) *corev1.Namespace {
		n := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: metav1.NewTime(at)}}
		if createdBy != "" {
			n.Labels = map[string]string{v1alpha1.LabelCreatedBySource: createdBy}
		}
		return n
	}
	cm := func(namespace, name string, labels map[string]string) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, Labels: labels}}
	}
	ours := map[string]string{v1alpha1.LabelParentCluster: "src"}
	s := testenv.Scheme()

	// In the source: "live" still exists; the others are gone.
	source := fake.NewClientBuilder().WithScheme(s).WithObjects(ns("live", "", old)).Build()
	remote := fake.NewClientBuilder().WithScheme(s).WithObjects(
		ns("empty", "src", old),  // gone in the source, nothing left: deleted
		ns("copies", "src", old), // only the source's copies and what Kubernetes makes: deleted
		cm("copies", "kube-root-ca.crt", nil),
		cm("copies", "settings", ours),
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "copies", Name: "default"}},
		ns("held", "src", old), // someone else's ConfigMap there: kept
		cm("held", "kube-root-ca.crt", nil),
		cm("held", "team-config", nil),
		ns("live", "src", old),             // the source's still exists: kept
		ns("fresh", "src", young),          // younger than MinAge: kept
		ns("other", "another-source", old), // another source's: not even listed
		ns("hand-made", "", old),           // not created by a source: not even listed
	).Build()
	self := fake.NewClientBuilder().WithScheme(s).WithObjects(ns("empty", "src", old)).Build()

	g, err := New(Options{
		SourceName: "src",
		Targets: fakeTargets{
			fakeTarget{key: proxypod.TargetKey{Name: "t1"}, c: remote, ready: true},
			fakeTarget{key: proxypod.TargetKey{Name: "self"}, c: self, ready: true, self: true},
		},
		Reader: source, APIReader: source,
		MinAge: time.Minute,
		Clock:  clocktesting.NewFakeClock(now),
		Logger: testr.New(t),
	})
	require.NoError(t, err)
	report, err := g.Collect(context.Background())
	require.NoError(t, err)
	var deleted []string
	for _, f := range report.Deleted {
		if f.Kind == kindNamespace {
			deleted = append(deleted, f.Target+"/"+f.Name+":"+string(f.Reason))
		}
	}
	assert.Empty(t, cmp.Diff([]string{"t1/copies:SourceNamespaceGone", "t1/empty:SourceNamespaceGone"}, sorted(deleted)), "namespaces deleted (-want,+got)")
	var left corev1.NamespaceList
	require.NoError(t, remote.List(context.Background(), &left))
	var kept []string
	for _, n := range left.Items {
		kept = append(kept, n.Name)
	}
	assert.Empty(t, cmp.Diff([]string{"fresh", "hand-made", "held", "live", "other"}, sorted(kept)), "namespaces left in the target (-want,+got)")
	assert.NoError(t, self.Get(context.Background(), client.ObjectKey{Name: "empty"}, &corev1.Namespace{}), "a namespace of the source cluster as its own target was touched")
}

func TestOwnOrBuiltIn(t *testing.T) {
	obj := func(name string, labels map[string]string) *metav1.PartialObjectMetadata {
		return &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
	}
	tests := []struct {
		name string
		obj  *metav1.PartialObjectMetadata
		kind string
		want bool
	}{
		{"the source's pod", obj("p", map[string]string{v1alpha1.LabelParentCluster: "src"}), "PodList", true},
		{"another source's pod", obj("p", map[string]string{v1alpha1.LabelParentCluster: "other"}), "PodList", false},
		{"a pod of the target's", obj("p", nil), "PodList", false},
		{"the root CA", obj("kube-root-ca.crt", nil), "ConfigMapList", true},
		{"a ConfigMap of the target's", obj("settings", nil), "ConfigMapList", false},
		{"the default ServiceAccount", obj("default", nil), "ServiceAccountList", true},
		{"a Secret named default", obj("default", nil), "SecretList", false},
		{"a controller's EndpointSlice", obj("s-abc", map[string]string{"endpointslice.kubernetes.io/managed-by": "endpointslice-controller.k8s.io"}), "EndpointSliceList", true},
		{"a hand-made EndpointSlice", obj("s-abc", nil), "EndpointSliceList", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := ownOrBuiltIn(tt.obj, tt.kind, "src")
			assert.Falsef(t, got != tt.want, "ownOrBuiltIn = %v, want %v", got, tt.want)
		})
	}
}

// A target that no longer lets the source delete namespaces (its
// ClusterSource's spec.namespaces removed) keeps them: no error, no
// deletion counted.
func TestCollectNamespacesForbidden(t *testing.T) {
	now := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	s := testenv.Scheme()
	gone := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team-a", CreationTimestamp: metav1.NewTime(now.Add(-time.Hour)),
		Labels: map[string]string{v1alpha1.LabelCreatedBySource: "src"}}}
	deletes := 0
	remote := fake.NewClientBuilder().WithScheme(s).WithObjects(gone).WithInterceptorFuncs(interceptor.Funcs{
		Delete: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
			deletes++
			return apierrors.NewForbidden(corev1.Resource("namespaces"), obj.GetName(), errors.New("cannot delete resource namespaces"))
		},
	}).Build()
	source := fake.NewClientBuilder().WithScheme(s).Build()
	g, err := New(Options{
		SourceName: "src",
		Targets:    fakeTargets{fakeTarget{key: proxypod.TargetKey{Name: "t1"}, c: remote, ready: true}},
		Reader:     source, APIReader: source,
		Clock: clocktesting.NewFakeClock(now), Logger: testr.New(t),
	})
	require.NoError(t, err)
	report, err := g.Collect(context.Background())
	assert.NoError(t, err, "a refused delete is an error of the pass")
	assert.Falsef(t, deletes != 1 || len(report.Deleted) != 0, "%d deletes asked, %v reported deleted; want 1 asked, none reported", deletes, report.Deleted)
}
