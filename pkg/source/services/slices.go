package services

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/netip"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/utils/ptr"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
	"github.com/fleetlet/fleetlet/pkg/proxy"
)

// maxSliceEndpoints is how many endpoints one of fleetlet's EndpointSlices
// holds, as the EndpointSlice controller's default.
const maxSliceEndpoints = 100

// Global reports whether a Service asks to be global (annotation
// multicluster.fleetlet.io/global=true).
func Global(svc *corev1.Service) bool {
	return svc != nil && svc.Annotations[v1alpha1.AnnotationGlobal] == "true"
}

// GlobalSlices are the EndpointSlices that let a global Service's copy in
// target in reach the delegates it selects in the other clusters: the
// proxies among proxies that it selects whose delegates run elsewhere,
// listed by the pod IPs their proxies publish (the delegates' own), ready
// ones only unless the Service publishes not-ready addresses, with their
// hostnames when their subdomain is the Service. Ports are the Service's
// target ports, a named one resolved in each pod's containers. One slice
// per address type and port set, maxSliceEndpoints endpoints each, named
// after the Service, fleetlet and that set, labelled for the Service
// (kubernetes.io/service-name), as fleetlet's
// (endpointslice.kubernetes.io/managed-by) and this source's.
func GlobalSlices(svc *corev1.Service, proxies []corev1.Pod, in proxy.TargetKey, sourceName string) []discoveryv1.EndpointSlice {
	type group struct {
		addressType discoveryv1.AddressType
		ports       []discoveryv1.EndpointPort
		endpoints   []discoveryv1.Endpoint
	}
	groups := map[string]*group{}
	sel := selectorOf(svc)
	for i := range proxies {
		p := &proxies[i]
		key, ok := delegateTarget(p)
		if !ok || key == in || !proxy.IsManaged(p) || p.DeletionTimestamp != nil || sel == nil || !sel.Matches(labels.Set(p.Labels)) {
			continue
		}
		ready := podReady(p)
		if !ready && !svc.Spec.PublishNotReadyAddresses {
			continue
		}
		ports := endpointPorts(svc, p)
		for _, ip := range p.Status.PodIPs {
			addr, err := netip.ParseAddr(ip.IP)
			if err != nil {
				continue
			}
			at := discoveryv1.AddressTypeIPv4
			if addr.Is6() {
				at = discoveryv1.AddressTypeIPv6
			}
			gk := string(at) + "|" + portsKey(ports)
			g := groups[gk]
			if g == nil {
				g = &group{addressType: at, ports: ports}
				groups[gk] = g
			}
			e := discoveryv1.Endpoint{
				Addresses:  []string{addr.String()},
				Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(ready), Serving: ptr.To(ready), Terminating: ptr.To(false)},
			}
			if p.Spec.Hostname != "" && p.Spec.Subdomain == svc.Name {
				e.Hostname = ptr.To(p.Spec.Hostname)
			}
			g.endpoints = append(g.endpoints, e)
		}
	}
	keys := make([]string, 0, len(groups))
	for k := range groups {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var out []discoveryv1.EndpointSlice
	for _, k := range keys {
		g := groups[k]
		sort.Slice(g.endpoints, func(i, j int) bool { return g.endpoints[i].Addresses[0] < g.endpoints[j].Addresses[0] })
		sum := sha256.Sum256([]byte(k))
		for n, i := 0, 0; i < len(g.endpoints); n, i = n+1, i+maxSliceEndpoints {
			out = append(out, discoveryv1.EndpointSlice{
				ObjectMeta: metav1.ObjectMeta{
					Namespace: svc.Namespace,
					Name:      fmt.Sprintf("%s-fleetlet-%s-%d", svc.Name, hex.EncodeToString(sum[:])[:8], n),
					Labels: map[string]string{
						discoveryv1.LabelServiceName: svc.Name,
						discoveryv1.LabelManagedBy:   v1alpha1.EndpointSliceManagedBy,
						v1alpha1.LabelParentCluster:  sourceName,
					},
					Annotations: map[string]string{
						v1alpha1.AnnotationParentName:      svc.Name,
						v1alpha1.AnnotationParentNamespace: svc.Namespace,
					},
				},
				AddressType: g.addressType,
				Ports:       g.ports,
				Endpoints:   g.endpoints[i:min(i+maxSliceEndpoints, len(g.endpoints))],
			})
		}
	}
	return out
}

// endpointPorts are a Service's ports as an EndpointSlice lists them for
// pod p: each target port, a named one resolved in p's containers (a port
// p does not name is left out for p).
func endpointPorts(svc *corev1.Service, p *corev1.Pod) []discoveryv1.EndpointPort {
	var out []discoveryv1.EndpointPort
	for _, sp := range svc.Spec.Ports {
		n := sp.TargetPort.IntVal
		if sp.TargetPort.StrVal != "" {
			n = containerPort(p, sp.TargetPort.StrVal, sp.Protocol)
		} else if n == 0 {
			n = sp.Port
		}
		if n == 0 {
			continue
		}
		out = append(out, discoveryv1.EndpointPort{Name: ptr.To(sp.Name), Protocol: ptr.To(sp.Protocol), Port: ptr.To(n), AppProtocol: sp.AppProtocol})
	}
	return out
}

func containerPort(p *corev1.Pod, name string, protocol corev1.Protocol) int32 {
	for _, cs := range [][]corev1.Container{p.Spec.Containers, p.Spec.InitContainers} {
		for _, c := range cs {
			for _, cp := range c.Ports {
				if cp.Name == name && (cp.Protocol == protocol || cp.Protocol == "" && protocol == corev1.ProtocolTCP) {
					return cp.ContainerPort
				}
			}
		}
	}
	return 0
}

func portsKey(ports []discoveryv1.EndpointPort) string {
	parts := make([]string, 0, len(ports))
	for _, p := range ports {
		parts = append(parts, fmt.Sprintf("%s/%s/%d", ptr.Deref(p.Name, ""), ptr.Deref(p.Protocol, ""), ptr.Deref(p.Port, 0)))
	}
	return strings.Join(parts, ",")
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
