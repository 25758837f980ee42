package follow

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
)

// KindService is the kind of the Services that follow their delegates.
const KindService = "Service"

var serviceGK = schema.GroupKind{Kind: KindService}

// Exposure says which Service types that open the targets' nodes or load
// balancers keep their type in the copies (the operator's settings
// --service-load-balancers and --service-node-ports); the others become
// ClusterIP Services.
type Exposure struct {
	LoadBalancers bool
	NodePorts     bool
}

// ServiceCopy is what this source's copy of a Service holds in a target
// (docs/design.md, "Services"): the ports, selector, session affinity,
// publishNotReadyAddresses, traffic policies and headless-ness of src, and
// its labels and annotations (but fleetlet's) with the parent label and
// annotations. What an API server allocates is left for the target's to
// allocate: cluster IPs (a headless Service stays headless), IP families,
// node ports, the health-check node port; external IPs are the source's
// network's, and go; the status goes. A LoadBalancer becomes a ClusterIP
// unless expose.LoadBalancers, and a NodePort unless expose.NodePorts (a
// user of a source never opens ports on a target's nodes without its
// operator's say), and then its external fields (externalTrafficPolicy,
// loadBalancerSourceRanges, loadBalancerClass,
// allocateLoadBalancerNodePorts, loadBalancerIP) go with it, so that the
// copy passes validation. The selector also requires this source's parent
// label, so that the copy selects this source's delegates only, never the
// target's own pods nor another source's that share the namespace.
func ServiceCopy(src *corev1.Service, sourceName string, expose Exposure) *corev1.Service {
	spec := src.Spec.DeepCopy()
	headless := spec.ClusterIP == corev1.ClusterIPNone
	spec.ClusterIP, spec.ClusterIPs = "", nil
	if headless {
		spec.ClusterIP, spec.ClusterIPs = corev1.ClusterIPNone, []string{corev1.ClusterIPNone}
	}
	spec.IPFamilies, spec.IPFamilyPolicy = nil, nil
	spec.ExternalIPs = nil
	spec.HealthCheckNodePort = 0
	for i := range spec.Ports {
		spec.Ports[i].NodePort = 0
	}
	if (spec.Type == corev1.ServiceTypeLoadBalancer && !expose.LoadBalancers) || (spec.Type == corev1.ServiceTypeNodePort && !expose.NodePorts) {
		spec.Type = corev1.ServiceTypeClusterIP
		spec.ExternalTrafficPolicy = ""
		spec.LoadBalancerSourceRanges = nil
		spec.LoadBalancerClass = nil
		spec.AllocateLoadBalancerNodePorts = nil
		spec.LoadBalancerIP = ""
	}
	if len(spec.Selector) > 0 {
		spec.Selector[v1alpha1.LabelParentCluster] = sourceName
	}
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{
			Namespace:   src.Namespace,
			Name:        src.Name,
			Labels:      copyLabels(src, sourceName),
			Annotations: copyAnnotations(serviceGK, src),
		},
		Spec: *spec,
	}
}

// keepAllocated returns want with what the target allocated to the copy
// existing kept: its cluster IPs and IP families (never changed by an
// update), and the node ports of the ports that stay (matched by name
// and protocol) and the health-check node port while the type still
// takes them. existing is not changed.
func keepAllocated(want, existing *corev1.Service) *corev1.Service {
	out := want.DeepCopy()
	cur := existing.Spec
	out.Spec.ClusterIP, out.Spec.ClusterIPs = cur.ClusterIP, append([]string(nil), cur.ClusterIPs...)
	out.Spec.IPFamilyPolicy = cur.IPFamilyPolicy
	out.Spec.IPFamilies = append([]corev1.IPFamily(nil), cur.IPFamilies...)
	if !takesNodePorts(out.Spec.Type) {
		return out
	}
	for i, p := range out.Spec.Ports {
		for _, q := range cur.Ports {
			if p.Name == q.Name && p.Protocol == q.Protocol {
				out.Spec.Ports[i].NodePort = q.NodePort
			}
		}
	}
	if out.Spec.Type == corev1.ServiceTypeLoadBalancer && out.Spec.ExternalTrafficPolicy == corev1.ServiceExternalTrafficPolicyLocal {
		out.Spec.HealthCheckNodePort = cur.HealthCheckNodePort
	}
	return out
}

// headlessChanged reports whether a copy cannot become want by an update:
// a Service's cluster IP, None or allocated, never changes.
func headlessChanged(existing, want *corev1.Service) bool {
	return (existing.Spec.ClusterIP == corev1.ClusterIPNone) != (want.Spec.ClusterIP == corev1.ClusterIPNone)
}

func takesNodePorts(t corev1.ServiceType) bool {
	return t == corev1.ServiceTypeNodePort || t == corev1.ServiceTypeLoadBalancer
}

// upToDate reports whether the copy existing already holds want (as
// keepAllocated made it): spec, labels and annotations.
func upToDate(existing, want *corev1.Service) bool {
	return equality.Semantic.DeepEqual(existing.Spec, want.Spec) &&
		equality.Semantic.DeepEqual(existing.Labels, want.Labels) &&
		equality.Semantic.DeepEqual(existing.Annotations, want.Annotations)
}
