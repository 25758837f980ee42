package indexer

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
)

func TestExtract(t *testing.T) {
	gate := []corev1.PodSchedulingGate{{Name: v1alpha1.SchedulingGateElection}}
	pin := map[string]string{corev1.LabelHostname: "fleetlet-c2"}
	for _, tc := range []struct {
		name string
		idx  Index
		obj  client.Object
		want []string
	}{
		{"bound, running", ActivePodNodeName, &corev1.Pod{Spec: corev1.PodSpec{NodeName: "n1"}, Status: corev1.PodStatus{Phase: corev1.PodRunning}}, []string{"n1"}},
		{"bound, finished", ActivePodNodeName, &corev1.Pod{Spec: corev1.PodSpec{NodeName: "n1"}, Status: corev1.PodStatus{Phase: corev1.PodSucceeded}}, nil},
		{"unbound", ActivePodNodeName, &corev1.Pod{}, nil},
		{"gated", GatedProxy, &corev1.Pod{Spec: corev1.PodSpec{SchedulingGates: gate}}, []string{"true"}},
		{"another's gate only", GatedProxy, &corev1.Pod{Spec: corev1.PodSpec{SchedulingGates: []corev1.PodSchedulingGate{{Name: "x"}}}}, nil},
		{"pinned and gated", PinnedProxy, &corev1.Pod{Spec: corev1.PodSpec{SchedulingGates: gate, NodeSelector: pin}}, []string{"fleetlet-c2"}},
		{"pinned, ungated", PinnedProxy, &corev1.Pod{Spec: corev1.PodSpec{NodeSelector: pin}}, nil},
		{"target's secret", TargetSecret, &v1alpha1.Target{Spec: v1alpha1.TargetSpec{KubeconfigSecret: &v1alpha1.KubeconfigSecretReference{Name: "s"}}}, []string{"s"}},
		{"target without", TargetSecret, &v1alpha1.Target{}, nil},
		{"cluster target's secret", ClusterTargetSecret, &v1alpha1.ClusterTarget{Spec: v1alpha1.TargetSpec{KubeconfigSecret: &v1alpha1.KubeconfigSecretReference{Namespace: "ns", Name: "s"}}}, []string{"ns/s"}},
		{"wrong kind", TargetSecret, &corev1.Pod{}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, tc.idx.Extract(tc.obj))
		})
	}
}

// A List by a registered index finds what it indexes; by an index nobody
// registered it fails (never an empty answer).
func TestRegisteredIndexesServeLists(t *testing.T) {
	scheme := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(v1alpha1.AddToScheme(scheme))
	b := fake.NewClientBuilder().WithScheme(scheme).WithObjects(&corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p"},
		Spec:       corev1.PodSpec{NodeName: "n1"},
	})
	for _, i := range []Index{ActivePodNodeName} {
		b = b.WithIndex(i.Object, i.Field, i.Extract)
	}
	c := b.Build()
	var pods corev1.PodList
	require.NoError(t, c.List(context.Background(), &pods, client.MatchingFields{ActivePodNodeName.Field: "n1"}))
	assert.Len(t, pods.Items, 1)
	assert.Error(t, c.List(context.Background(), &pods, client.MatchingFields{GatedProxy.Field: "true"}), "a List by an unregistered index")
}
