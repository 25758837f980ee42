package v1alpha1_test

import (
	"reflect"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
)

// kinds are the kinds of the API, with an object of each and of its list.
var kinds = []struct {
	kind       string
	namespaced bool
	obj        runtime.Object
	list       runtime.Object
}{
	{"Target", true, &v1alpha1.Target{}, &v1alpha1.TargetList{}},
	{"ClusterTarget", false, &v1alpha1.ClusterTarget{}, &v1alpha1.ClusterTargetList{}},
	{"Source", true, &v1alpha1.Source{}, &v1alpha1.SourceList{}},
	{"ClusterSource", false, &v1alpha1.ClusterSource{}, &v1alpha1.ClusterSourceList{}},
	{"PodChaperon", true, &v1alpha1.PodChaperon{}, &v1alpha1.PodChaperonList{}},
	{"ClusterSummary", false, &v1alpha1.ClusterSummary{}, &v1alpha1.ClusterSummaryList{}},
}

func TestAddToScheme(t *testing.T) {
	scheme := runtime.NewScheme()
	require.NoError(t, v1alpha1.AddToScheme(scheme), "AddToScheme")

	want := map[string]bool{}
	for _, k := range kinds {
		t.Run(k.kind, func(t *testing.T) {
			for kind, obj := range map[string]runtime.Object{k.kind: k.obj, k.kind + "List": k.list} {
				want[kind] = true
				gvks, _, err := scheme.ObjectKinds(obj)
				require.NoErrorf(t, err, "ObjectKinds(%T)", obj)
				wantGVK := schema.GroupVersionKind{Group: "multicluster.fleetlet.io", Version: "v1alpha1", Kind: kind}
				assert.Emptyf(t, cmp.Diff([]schema.GroupVersionKind{wantGVK}, gvks), "ObjectKinds(%T) (-want,+got)", obj)
				_, err = scheme.New(wantGVK)
				assert.NoErrorf(t, err, "scheme.New(%v)", wantGVK)
			}
			_, ok := k.list.(metav1.ListInterface)
			assert.Truef(t, ok, "%T is not a list", k.list)
			_, ok = k.obj.(metav1.Object)
			assert.Truef(t, ok, "%T has no object metadata", k.obj)
		})
	}

	// Nothing else is registered in the group besides the meta types
	// (ListOptions, WatchEvent…) that metav1.AddToGroupVersion adds.
	metaPkg := reflect.TypeFor[metav1.ObjectMeta]().PkgPath()
	for gvk, typ := range scheme.AllKnownTypes() {
		assert.Falsef(t, gvk.GroupVersion() == v1alpha1.GroupVersion && !want[gvk.Kind] && typ.PkgPath() != metaPkg, "unexpected kind %v registered", gvk)
	}
}

func TestDeepCopy(t *testing.T) {
	orig := &v1alpha1.Target{
		ObjectMeta: metav1.ObjectMeta{Name: "t", Namespace: "ns", Labels: map[string]string{"a": "b"}},
		Spec: v1alpha1.TargetSpec{
			KubeconfigSecret: &v1alpha1.KubeconfigSecretReference{Name: "s", Key: "config"},
		},
		Status: v1alpha1.TargetStatus{
			Conditions: []metav1.Condition{{Type: v1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonConnected}},
		},
	}
	cp := orig.DeepCopy()
	require.Empty(t, cmp.Diff(orig, cp), "DeepCopy differs (-orig,+copy)")
	cp.Spec.KubeconfigSecret.Name = "other"
	cp.Labels["a"] = "c"
	cp.Status.Conditions[0].Status = metav1.ConditionFalse
	assert.Falsef(t, orig.Spec.KubeconfigSecret.Name != "s" || orig.Labels["a"] != "b" || orig.Status.Conditions[0].Status != metav1.ConditionTrue, "changing the copy changed the original: %+v", orig)
}
