package sandbox

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"

	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// Devices a sandbox cluster can publish for Dynamic Resource Allocation
// (Options.Devices, `up --devices`): a DeviceClass and, per fake node, a
// ResourceSlice of that many devices of the driver DeviceDriver. No driver
// runs (kwok starts pods without preparing devices), but the scheduler's
// DRA plugin allocates them from the slices as in a real cluster, and the
// resource claim controller makes claims from templates.
const (
	// DeviceClassGPU is the DeviceClass the sandbox publishes: it selects
	// every device of DeviceDriver.
	DeviceClassGPU = "gpu.example.com"
	// DeviceDriver is the driver named by the published ResourceSlices.
	DeviceDriver = "gpu.example.com"
	// DeviceModel is the "model" attribute of every published device.
	DeviceModel = "example-80g"
)

// PublishDevices creates the DeviceClass DeviceClassGPU (if missing) and,
// for each node, a ResourceSlice "<node>-gpus" with perNode devices
// gpu-0 … gpu-<perNode-1> in the node's own pool. A slice already there is
// replaced when its device count differs. perNode 0 removes the slices.
func PublishDevices(ctx context.Context, cs kubernetes.Interface, nodes []string, perNode int) error {
	if perNode < 0 {
		return fmt.Errorf("devices per node must not be negative, got %d", perNode)
	}
	if err := ensureDeviceClass(ctx, cs); err != nil {
		return err
	}
	slices := cs.ResourceV1().ResourceSlices()
	for _, node := range nodes {
		name := node + "-gpus"
		old, err := slices.Get(ctx, name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
		case err != nil:
			return fmt.Errorf("reading ResourceSlice %s: %w", name, err)
		case len(old.Spec.Devices) == perNode:
			continue
		default:
			if err := slices.Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				return fmt.Errorf("deleting ResourceSlice %s: %w", name, err)
			}
		}
		if perNode == 0 {
			continue
		}
		if _, err := slices.Create(ctx, deviceSlice(name, node, perNode), metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("creating ResourceSlice %s: %w", name, err)
		}
	}
	return nil
}

func ensureDeviceClass(ctx context.Context, cs kubernetes.Interface) error {
	class := &resourcev1.DeviceClass{
		ObjectMeta: metav1.ObjectMeta{Name: DeviceClassGPU},
		Spec: resourcev1.DeviceClassSpec{Selectors: []resourcev1.DeviceSelector{{
			CEL: &resourcev1.CELDeviceSelector{Expression: fmt.Sprintf("device.driver == %q", DeviceDriver)},
		}}},
	}
	_, err := cs.ResourceV1().DeviceClasses().Create(ctx, class, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating DeviceClass %s: %w", DeviceClassGPU, err)
	}
	return nil
}

func deviceSlice(name, node string, n int) *resourcev1.ResourceSlice {
	devices := make([]resourcev1.Device, n)
	for i := range devices {
		devices[i] = resourcev1.Device{
			Name: "gpu-" + strconv.Itoa(i),
			Attributes: map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{
				"model": {StringValue: ptr.To(DeviceModel)},
				"index": {IntValue: ptr.To(int64(i))},
			},
			Capacity: map[resourcev1.QualifiedName]resourcev1.DeviceCapacity{
				"memory": {Value: resource.MustParse("80Gi")},
			},
		}
	}
	return &resourcev1.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: resourcev1.ResourceSliceSpec{
			Driver:   DeviceDriver,
			Pool:     resourcev1.ResourcePool{Name: node, Generation: 1, ResourceSliceCount: 1},
			NodeName: ptr.To(node),
			Devices:  devices,
		},
	}
}

// ParseDevices reads `--devices`: "cluster=N" pairs separated by commas,
// N devices per fake node of that cluster.
func ParseDevices(s string) (map[string]int, error) {
	out := map[string]int{}
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		name, count, ok := strings.Cut(part, "=")
		n, err := strconv.Atoi(count)
		if !ok || name == "" || err != nil || n < 0 {
			return nil, fmt.Errorf("devices: %q is not cluster=N (N devices per node, N ≥ 0)", part)
		}
		out[name] = n
	}
	return out, nil
}

// FormatDevices writes what ParseDevices reads, sorted by cluster.
func FormatDevices(m map[string]int) string {
	parts := make([]string, 0, len(m))
	for name, n := range m {
		parts = append(parts, name+"="+strconv.Itoa(n))
	}
	sort.Strings(parts)
	return strings.Join(parts, ",")
}
