// devices: the cluster's Dynamic Resource Allocation devices, counted per
// DeviceClass.

package summary

import (
	"context"
	"sort"
	"sync"

	resourcev1 "k8s.io/api/resource/v1"
	dracel "k8s.io/dynamic-resource-allocation/cel"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
)

// deviceKey names one device: driver, pool, device.
type deviceKey struct{ driver, pool, device string }

// SummarizeDevices counts, per DeviceClass, the published devices the
// class's selectors select and how many of them ResourceClaims hold. Only
// the newest generation of each pool counts, and of node-local slices only
// those of nodes schedulable says yes to. A class whose selector does not
// compile, or a device on which it fails, selects nothing.
func SummarizeDevices(ctx context.Context, classes []*resourcev1.DeviceClass, slices []*resourcev1.ResourceSlice,
	claims []*resourcev1.ResourceClaim, schedulable func(node string) bool) []v1alpha1.DeviceClassSummary {
	allocated := map[deviceKey]bool{}
	for _, c := range claims {
		if c.Status.Allocation == nil {
			continue
		}
		for _, r := range c.Status.Allocation.Devices.Results {
			allocated[deviceKey{r.Driver, r.Pool, r.Device}] = true
		}
	}
	devices := publishedDevices(slices, schedulable)
	var out []v1alpha1.DeviceClassSummary
	for _, class := range classes {
		selectors := compiledSelectors(class)
		sum := v1alpha1.DeviceClassSummary{Name: class.Name}
		for _, d := range devices {
			if selectors == nil || !selectsAll(ctx, selectors, d) {
				continue
			}
			sum.Devices++
			if allocated[d.key] {
				sum.Allocated++
			}
		}
		out = append(out, sum)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

type publishedDevice struct {
	key   deviceKey
	input dracel.Device
}

// publishedDevices are the devices of the newest generation of each pool,
// node-local ones only on schedulable nodes.
func publishedDevices(slices []*resourcev1.ResourceSlice, schedulable func(string) bool) []publishedDevice {
	type pool struct{ driver, name string }
	newest := map[pool]int64{}
	for _, s := range slices {
		p := pool{s.Spec.Driver, s.Spec.Pool.Name}
		newest[p] = max(newest[p], s.Spec.Pool.Generation)
	}
	var out []publishedDevice
	for _, s := range slices {
		if s.Spec.Pool.Generation != newest[pool{s.Spec.Driver, s.Spec.Pool.Name}] {
			continue
		}
		if s.Spec.NodeName != nil && !schedulable(*s.Spec.NodeName) {
			continue
		}
		for _, d := range s.Spec.Devices {
			out = append(out, publishedDevice{
				key:   deviceKey{s.Spec.Driver, s.Spec.Pool.Name, d.Name},
				input: dracel.Device{Driver: s.Spec.Driver, Attributes: d.Attributes, Capacity: d.Capacity},
			})
		}
	}
	return out
}

func selectsAll(ctx context.Context, selectors []dracel.CompilationResult, d publishedDevice) bool {
	for _, sel := range selectors {
		ok, _, err := sel.DeviceMatches(ctx, d.input)
		if err != nil || !ok {
			return false
		}
	}
	return true
}

// compiledSelectors compiles a class's CEL selectors, nil when one does
// not compile. Compilations are kept by expression: classes rarely change.
func compiledSelectors(class *resourcev1.DeviceClass) []dracel.CompilationResult {
	out := make([]dracel.CompilationResult, 0, len(class.Spec.Selectors))
	for _, sel := range class.Spec.Selectors {
		if sel.CEL == nil {
			return nil
		}
		c := compile(sel.CEL.Expression)
		if c.Error != nil {
			return nil
		}
		out = append(out, c)
	}
	return out
}

var compiled sync.Map // expression → dracel.CompilationResult

func compile(expression string) dracel.CompilationResult {
	if c, ok := compiled.Load(expression); ok {
		return c.(dracel.CompilationResult)
	}
	c := dracel.GetCompiler(dracel.Features{}).CompileCELExpression(expression, dracel.Options{})
	compiled.Store(expression, c)
	return c
}
