// devices: the devices a delegate's resource claims got, told on its proxy.

package feedback

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
	"github.com/fleetlet/fleetlet/pkg/source/fleet"
)

// EventDevicesAllocated: the delegate's resource claims were allocated
// devices in its target.
const EventDevicesAllocated = "DevicesAllocated"

// noteDevices tells on a bound proxy, once, which devices its delegate's
// resource claims were allocated in the target: the annotation
// multicluster.fleetlet.io/devices and an Event. It reads the claims from
// the target's API server, only while the proxy lacks the annotation (a
// pod with claims is bound only after they are allocated, so this is one
// read per claim per proxy). A claim not allocated yet leaves it to a later
// pass; a target that does not let this source read claims is left alone.
func (r *Reconciler) noteDevices(ctx context.Context, cl *fleet.Cluster, proxy *corev1.Pod, claims []corev1.PodResourceClaimStatus) error {
	if len(claims) == 0 || proxy.Annotations[v1alpha1.AnnotationDevices] != "" {
		return nil
	}
	var parts []string
	for _, c := range claims {
		if c.ResourceClaimName == nil {
			continue // the claim was not needed
		}
		var rc resourcev1.ResourceClaim
		err := cl.Client().Get(ctx, types.NamespacedName{Namespace: proxy.Namespace, Name: *c.ResourceClaimName}, &rc)
		if apierrors.IsForbidden(err) {
			ctrl.LoggerFrom(ctx).V(1).Info("Cannot read the delegate's resource claims", "target", cl.Key().String(), "err", err.Error())
			return nil
		}
		if err != nil {
			return client.IgnoreNotFound(err)
		}
		if rc.Status.Allocation == nil {
			return nil
		}
		parts = append(parts, allocated(c.Name, len(claims) > 1, rc.Status.Allocation.Devices.Results)...)
	}
	if len(parts) == 0 {
		return nil
	}
	value := strings.Join(parts, ",")
	patched := proxy.DeepCopy()
	if patched.Annotations == nil {
		patched.Annotations = map[string]string{}
	}
	patched.Annotations[v1alpha1.AnnotationDevices] = value
	if err := r.client.Patch(ctx, patched, client.MergeFrom(proxy)); err != nil {
		return client.IgnoreNotFound(err)
	}
	r.writes.Wrote(proxy.UID, proxy.ResourceVersion)
	r.recorder.Eventf(proxy, nil, corev1.EventTypeNormal, EventDevicesAllocated, "Allocate", "Devices allocated in %s: %s", cl.Key(), value)
	return nil
}

// resourceClaimsOf names the claims of a delegate in its target: a shared
// claim by the name its spec gives, a claim made from a template by the
// name its status gives (none until the claim is made).
func resourceClaimsOf(spec *corev1.PodSpec, status *corev1.PodStatus) []corev1.PodResourceClaimStatus {
	var out []corev1.PodResourceClaimStatus
	for _, c := range spec.ResourceClaims {
		if c.ResourceClaimName != nil {
			out = append(out, corev1.PodResourceClaimStatus{Name: c.Name, ResourceClaimName: c.ResourceClaimName})
			continue
		}
		for _, st := range status.ResourceClaimStatuses {
			if st.Name == c.Name {
				out = append(out, st)
			}
		}
	}
	return out
}

// allocated writes a claim's allocation as "request=driver/pool/device"
// entries, the request prefixed with the claim's name in the pod when the
// pod has several claims.
func allocated(claim string, prefix bool, results []resourcev1.DeviceRequestAllocationResult) []string {
	out := make([]string, 0, len(results))
	for _, res := range results {
		request := res.Request
		if prefix {
			request = claim + "/" + request
		}
		out = append(out, fmt.Sprintf("%s=%s/%s/%s", request, res.Driver, res.Pool, res.Device))
	}
	return out
}
