// devices: a pod's resource claims keep it out of targets that serve none
// of the DeviceClasses they ask for, and rank last those short of devices.

package elector

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"

	"github.com/fleetlet/fleetlet/pkg/source/devices"
)

// devicesOf reads what the pod's resource claims ask for (nothing without
// Options.SourceAPI, or for a pod without resource claims).
func (r *Reconciler) devicesOf(ctx context.Context, pod *corev1.Pod, userSpec *corev1.PodSpec) (devices.Need, error) {
	if r.opts.SourceAPI == nil || userSpec == nil || len(userSpec.ResourceClaims) == 0 {
		return devices.Need{}, nil
	}
	return devices.Read(ctx, r.opts.SourceAPI, pod.Namespace, userSpec)
}

// keepWithDevices leaves out the eligible targets that serve no
// DeviceClass the pod needs, and every one but the target its shared
// resource claims are placed in; it marks those short of free devices.
func keepWithDevices(need devices.Need, states []*targetState) {
	if need.None() {
		return
	}
	home, claim, apart := need.Home()
	for _, ts := range states {
		if !ts.eligible {
			continue
		}
		switch {
		case apart != "":
			ts.eligible, ts.reason = false, apart
			continue
		case home != "" && ts.key.String() != home:
			ts.eligible, ts.reason = false, fmt.Sprintf("its resource claim %s is allocated in target %s", claim, home)
			continue
		}
		summary := ts.cluster.Summary()
		if why := need.Why(summary); why != "" {
			ts.eligible, ts.reason = false, why
			continue
		}
		ts.short = need.Short(summary)
	}
}
