package devices

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
)

func exact(name, class string, count int64) resourcev1.DeviceRequest {
	return resourcev1.DeviceRequest{Name: name, Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: class, AllocationMode: resourcev1.DeviceAllocationModeExactCount, Count: count}}
}

func TestRead(t *testing.T) {
	template := &resourcev1.ResourceClaimTemplate{ObjectMeta: metav1.ObjectMeta{Name: "two-gpus", Namespace: "ns"},
		Spec: resourcev1.ResourceClaimTemplateSpec{Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{Requests: []resourcev1.DeviceRequest{
			exact("gpu", "gpu.example.com", 2),
			{Name: "nic", FirstAvailable: []resourcev1.DeviceSubRequest{{Name: "fast", DeviceClassName: "nic-100g"}, {Name: "slow", DeviceClassName: "nic-10g"}}},
		}}}}}
	shared := &resourcev1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: "team", Namespace: "ns"},
		Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{Requests: []resourcev1.DeviceRequest{
			{Name: "all", Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: "fpga.example.com", AllocationMode: resourcev1.DeviceAllocationModeAll}},
			exact("gpu", "gpu.example.com", 1),
		}}}}
	c := fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(template, shared).Build()
	spec := &corev1.PodSpec{ResourceClaims: []corev1.PodResourceClaim{
		{Name: "a", ResourceClaimTemplateName: ptr.To("two-gpus")},
		{Name: "b", ResourceClaimName: ptr.To("team")},
		{Name: "c", ResourceClaimTemplateName: ptr.To("missing")},
	}}
	got, err := Read(context.Background(), c, "ns", spec)
	require.NoError(t, err)
	require.Len(t, got.Shared, 1)
	assert.Equal(t, "team", got.Shared[0].Name, "the shared claim, as read")
	got.Shared = nil
	assert.Equal(t, Need{
		Exact: map[string]int32{"gpu.example.com": 3, "fpga.example.com": 1},
		OneOf: [][]string{{"nic-100g", "nic-10g"}},
	}, got)

	none, err := Read(context.Background(), c, "ns", &corev1.PodSpec{})
	require.NoError(t, err)
	assert.True(t, none.None())
}

func TestWhyAndShort(t *testing.T) {
	summary := func(classes ...v1alpha1.DeviceClassSummary) *v1alpha1.ClusterSummaryStatus {
		return &v1alpha1.ClusterSummaryStatus{DevicesCounted: true, DeviceClasses: classes}
	}
	need := Need{Exact: map[string]int32{"gpu": 2}, OneOf: [][]string{{"nic-a", "nic-b"}}}

	assert.Equal(t, "", need.Why(&v1alpha1.ClusterSummaryStatus{}), "a target that counts no devices decides itself")
	assert.False(t, need.Short(&v1alpha1.ClusterSummaryStatus{}))
	assert.Equal(t, "", Need{}.Why(summary()), "a pod without claims goes anywhere")

	assert.Equal(t, "it serves no DeviceClass gpu, nic-a or nic-b (the pod's resource claims ask for it)", need.Why(summary()))
	assert.Equal(t, "it serves no DeviceClass nic-a or nic-b (the pod's resource claims ask for it)",
		need.Why(summary(v1alpha1.DeviceClassSummary{Name: "gpu", Devices: 8})))

	enough := summary(v1alpha1.DeviceClassSummary{Name: "gpu", Devices: 8, Allocated: 6}, v1alpha1.DeviceClassSummary{Name: "nic-b"})
	assert.Equal(t, "", need.Why(enough))
	assert.False(t, need.Short(enough))
	full := summary(v1alpha1.DeviceClassSummary{Name: "gpu", Devices: 8, Allocated: 7}, v1alpha1.DeviceClassSummary{Name: "nic-b"})
	assert.Equal(t, "", need.Why(full), "short of devices is not a reason to filter")
	assert.True(t, need.Short(full))
}

func TestHomeAndPlace(t *testing.T) {
	claim := func(name, target string) *resourcev1.ResourceClaim {
		c := &resourcev1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns"}}
		if target != "" {
			c.Annotations = map[string]string{v1alpha1.AnnotationTarget: target}
		}
		return c
	}
	home, by, apart := Need{Shared: []*resourcev1.ResourceClaim{claim("a", ""), claim("b", "cluster-2")}}.Home()
	assert.Equal(t, []string{"cluster-2", "b", ""}, []string{home, by, apart})
	_, _, apart = Need{Shared: []*resourcev1.ResourceClaim{claim("a", "cluster-3"), claim("b", "cluster-2")}}.Home()
	assert.Equal(t, "its resource claims a and b are allocated in different targets (cluster-3, cluster-2)", apart)

	unplaced, placed := claim("a", ""), claim("b", "cluster-2")
	c := fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(unplaced, placed).Build()
	var fresh resourcev1.ResourceClaim
	require.NoError(t, c.Get(context.Background(), client.ObjectKeyFromObject(unplaced), &fresh))
	stale := fresh.DeepCopy()
	require.NoError(t, Place(context.Background(), c, []*resourcev1.ResourceClaim{&fresh}, "cluster-2"))
	require.NoError(t, c.Get(context.Background(), client.ObjectKeyFromObject(unplaced), &fresh))
	assert.Equal(t, "cluster-2", fresh.Annotations[v1alpha1.AnnotationTarget])

	// Placed meanwhile by another pod: the stale read conflicts.
	err := Place(context.Background(), c, []*resourcev1.ResourceClaim{stale}, "cluster-3")
	assert.True(t, apierrors.IsConflict(errors.Unwrap(err)), "got %v", err)
}
