package summary

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
)

func deviceClass(name, expression string) *resourcev1.DeviceClass {
	return &resourcev1.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: resourcev1.DeviceClassSpec{
		Selectors: []resourcev1.DeviceSelector{{CEL: &resourcev1.CELDeviceSelector{Expression: expression}}}}}
}

func slice(driver, node string, generation int64, devices ...string) *resourcev1.ResourceSlice {
	s := &resourcev1.ResourceSlice{Spec: resourcev1.ResourceSliceSpec{
		Driver: driver, Pool: resourcev1.ResourcePool{Name: node, Generation: generation, ResourceSliceCount: 1}}}
	if node != "" {
		s.Spec.NodeName = ptr.To(node)
	} else {
		s.Spec.AllNodes = ptr.To(true)
		s.Spec.Pool.Name = "shared"
	}
	for _, d := range devices {
		s.Spec.Devices = append(s.Spec.Devices, resourcev1.Device{Name: d, Attributes: map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{
			"model": {StringValue: ptr.To(d[:1])}}})
	}
	return s
}

func allocatedClaim(driver, pool string, devices ...string) *resourcev1.ResourceClaim {
	c := &resourcev1.ResourceClaim{Status: resourcev1.ResourceClaimStatus{Allocation: &resourcev1.AllocationResult{}}}
	for _, d := range devices {
		c.Status.Allocation.Devices.Results = append(c.Status.Allocation.Devices.Results,
			resourcev1.DeviceRequestAllocationResult{Request: "r", Driver: driver, Pool: pool, Device: d})
	}
	return c
}

func TestSummarizeDevices(t *testing.T) {
	classes := []*resourcev1.DeviceClass{
		deviceClass("gpu", `device.driver == "gpu.example.com"`),
		deviceClass("big-gpu", `device.driver == "gpu.example.com" && device.attributes["gpu.example.com"].model == "b"`),
		deviceClass("nic", `device.driver == "nic.example.com"`),
		deviceClass("broken", `device.nonsense(`),
	}
	slices := []*resourcev1.ResourceSlice{
		slice("gpu.example.com", "n1", 1, "a0", "a1", "b0"),
		slice("gpu.example.com", "n2", 2, "b1"),
		slice("gpu.example.com", "n2", 1, "old0", "old1"), // an older generation of n2's pool
		slice("gpu.example.com", "cordoned", 1, "a9"),     // not schedulable
		slice("nic.example.com", "", 1, "n0", "n1"),       // not tied to one node
	}
	claims := []*resourcev1.ResourceClaim{
		allocatedClaim("gpu.example.com", "n1", "a0", "b0"),
		{}, // not allocated
		allocatedClaim("nic.example.com", "shared", "n1"),
	}
	schedulable := func(node string) bool { return node != "cordoned" }

	got := SummarizeDevices(context.Background(), classes, slices, claims, schedulable)
	want := []v1alpha1.DeviceClassSummary{
		{Name: "big-gpu", Devices: 2, Allocated: 1},
		{Name: "broken"},
		{Name: "gpu", Devices: 4, Allocated: 2},
		{Name: "nic", Devices: 2, Allocated: 1},
	}
	assert.Equal(t, want, got)
	status := &v1alpha1.ClusterSummaryStatus{DevicesCounted: true, DeviceClasses: got}
	gpu, ok := status.DeviceClass("gpu")
	assert.True(t, ok)
	assert.Equal(t, int32(2), gpu.Free())
	_, ok = status.DeviceClass("fpga")
	assert.False(t, ok)
}
