package proxy_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
	"github.com/fleetlet/fleetlet/pkg/proxy"
)

func pod(finalizers []string, gates ...string) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "team", UID: "uid-1", Finalizers: finalizers}}
	for _, g := range gates {
		p.Spec.SchedulingGates = append(p.Spec.SchedulingGates, corev1.PodSchedulingGate{Name: g})
	}
	return p
}

// apply applies a JSON patch as the API server does (the same library).
func apply(t *testing.T, p *corev1.Pod, patch []byte) (*corev1.Pod, error) {
	t.Helper()
	doc, err := json.Marshal(p)
	require.NoError(t, err)
	decoded, err := jsonpatch.DecodePatch(patch)
	require.NoError(t, err)
	out, err := decoded.Apply(doc)
	if err != nil {
		return nil, err
	}
	var got corev1.Pod
	require.NoError(t, json.Unmarshal(out, &got))
	return &got, nil
}

func TestIsManagedAndGate(t *testing.T) {
	assert.True(t, proxy.IsManaged(pod([]string{"a", v1alpha1.FinalizerDelegate})))
	assert.False(t, proxy.IsManaged(pod([]string{"a"})))
	assert.False(t, proxy.IsManaged(pod(nil)))

	assert.Equal(t, 1, proxy.GateIndex(pod(nil, "kueue.x-k8s.io/admission", v1alpha1.SchedulingGateElection)))
	assert.Equal(t, -1, proxy.GateIndex(pod(nil, "kueue.x-k8s.io/admission")))
	assert.False(t, proxy.Gated(pod(nil)))
}

func TestRemoveGatePatchRemovesOnlyOurs(t *testing.T) {
	p := pod(nil, "first", v1alpha1.SchedulingGateElection, "last")
	patch, ok := proxy.RemoveGatePatch(p)
	require.True(t, ok)
	got, err := apply(t, p, patch)
	require.NoError(t, err)
	assert.Equal(t, []corev1.PodSchedulingGate{{Name: "first"}, {Name: "last"}}, got.Spec.SchedulingGates)

	// The gates moved since they were read: the test op refuses.
	moved := pod(nil, v1alpha1.SchedulingGateElection, "first", "last")
	_, err = apply(t, moved, patch)
	assert.Error(t, err, "a stale patch removed another controller's gate")

	_, ok = proxy.RemoveGatePatch(pod(nil, "first"))
	assert.False(t, ok)
}

func TestRemoveFinalizerPatchRemovesOnlyOurs(t *testing.T) {
	p := pod([]string{"a", v1alpha1.FinalizerDelegate, "b"})
	patch, ok := proxy.RemoveFinalizerPatch(p.UID, p.Finalizers, v1alpha1.FinalizerDelegate)
	require.True(t, ok)
	got, err := apply(t, p, patch)
	require.NoError(t, err)
	assert.Equal(t, []string{"a", "b"}, got.Finalizers)

	_, err = apply(t, pod([]string{v1alpha1.FinalizerDelegate, "a", "b"}), patch)
	assert.Error(t, err, "a stale patch removed another finalizer")
	_, ok = proxy.RemoveFinalizerPatch("uid-1", []string{"a"}, v1alpha1.FinalizerDelegate)
	assert.False(t, ok)
}

func TestPinAndUngatePatch(t *testing.T) {
	bare := pod(nil, "first", v1alpha1.SchedulingGateElection)
	patch, ok := proxy.PinAndUngatePatch(bare, "fleetlet-cluster-2")
	require.True(t, ok)
	got, err := apply(t, bare, patch)
	require.NoError(t, err)
	assert.Equal(t, map[string]string{corev1.LabelHostname: "fleetlet-cluster-2"}, got.Spec.NodeSelector)
	assert.Equal(t, []corev1.PodSchedulingGate{{Name: "first"}}, got.Spec.SchedulingGates)

	selected := pod(nil, v1alpha1.SchedulingGateElection)
	selected.Spec.NodeSelector = map[string]string{"type": "virtual-kubelet"}
	patch, ok = proxy.PinAndUngatePatch(selected, "fleetlet-cluster-2")
	require.True(t, ok)
	got, err = apply(t, selected, patch)
	require.NoError(t, err)
	assert.Equal(t, map[string]string{"type": "virtual-kubelet", corev1.LabelHostname: "fleetlet-cluster-2"}, got.Spec.NodeSelector)
	assert.Empty(t, got.Spec.SchedulingGates)

	// The gates moved since they were read: the whole patch is refused,
	// the pin too.
	_, err = apply(t, pod(nil, "other", v1alpha1.SchedulingGateElection), patch)
	assert.Error(t, err, "a stale patch removed another controller's gate")
	_, ok = proxy.PinAndUngatePatch(pod(nil, "first"), "fleetlet-cluster-2")
	assert.False(t, ok)
}

// A pass that read a proxy before it was deleted and made again under the
// same name (a StatefulSet's pod) patches by name: every patch is refused
// on the new pod. Before: the finalizer patch removed the new pod's
// finalizer, and it was never elected (e2e TestStatefulSetKeepsItsClaims,
// db-1 deleted again and again).
func TestPatchesHoldToTheirPod(t *testing.T) {
	old := pod([]string{v1alpha1.FinalizerDelegate}, v1alpha1.SchedulingGateElection)
	successor := pod([]string{v1alpha1.FinalizerDelegate}, v1alpha1.SchedulingGateElection)
	successor.UID = "uid-2"
	finalizer, _ := proxy.RemoveFinalizerPatch(old.UID, old.Finalizers, v1alpha1.FinalizerDelegate)
	gate, _ := proxy.RemoveGatePatch(old)
	pin, _ := proxy.PinAndUngatePatch(old, "fleetlet-cluster-2")
	for name, patch := range map[string][]byte{"finalizer": finalizer, "gate": gate, "pin and ungate": pin} {
		_, err := apply(t, old, patch)
		assert.NoError(t, err, name)
		_, err = apply(t, successor, patch)
		assert.Error(t, err, "the %s patch of a pod applied to its successor of the same name", name)
	}
}

func TestEscapeJSONPointer(t *testing.T) {
	assert.Equal(t, "kubernetes.io~1hostname", proxy.EscapeJSONPointer("kubernetes.io/hostname"))
	assert.Equal(t, "a~0b~1c", proxy.EscapeJSONPointer("a~b/c"))
}

func TestWrites(t *testing.T) {
	var w proxy.Writes
	require.False(t, w.Stale("a", "1"), "stale before any write")
	w.Wrote("a", "1")
	require.True(t, w.Stale("a", "1"), "the version our write replaced is not stale")
	require.True(t, w.Stale("a", "1"), "the version our write replaced is no longer stale at the second look")
	require.False(t, w.Stale("b", "1"), "another object is stale")
	require.False(t, w.Stale("a", "2"), "the version after our write is stale")
	require.False(t, w.Stale("a", "1"), "still stale once the cache moved past the write")
	w.Wrote("a", "3")
	w.Forget("a")
	require.False(t, w.Stale("a", "3"), "stale after Forget")
}
