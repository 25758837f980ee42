package follow

import (
	"testing"

	"github.com/stretchr/testify/assert"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
)

// sourceService is a Service as the source's API server holds it: every
// allocated field set.
func sourceService(typ corev1.ServiceType) *corev1.Service {
	local := corev1.ServiceExternalTrafficPolicyLocal
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "web", UID: "u1", ResourceVersion: "9",
			Labels:      map[string]string{"app": "web", v1alpha1.LabelParentCluster: "forged"},
			Annotations: map[string]string{"note": "kept", "kubectl.kubernetes.io/last-applied-configuration": "{}", v1alpha1.AnnotationFollowers: "forged"}},
		Spec: corev1.ServiceSpec{
			Type:                     typ,
			Selector:                 map[string]string{"app": "web"},
			Ports:                    []corev1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80, TargetPort: intstr.FromInt32(8080), NodePort: 30080}},
			ClusterIP:                "10.0.0.7",
			ClusterIPs:               []string{"10.0.0.7"},
			IPFamilies:               []corev1.IPFamily{corev1.IPv4Protocol},
			IPFamilyPolicy:           ptr.To(corev1.IPFamilyPolicySingleStack),
			ExternalIPs:              []string{"192.0.2.1"},
			SessionAffinity:          corev1.ServiceAffinityClientIP,
			PublishNotReadyAddresses: true,
			InternalTrafficPolicy:    ptr.To(corev1.ServiceInternalTrafficPolicyCluster),
		},
		Status: corev1.ServiceStatus{LoadBalancer: corev1.LoadBalancerStatus{Ingress: []corev1.LoadBalancerIngress{{IP: "198.51.100.1"}}}},
	}
	if typ == corev1.ServiceTypeLoadBalancer {
		svc.Spec.ExternalTrafficPolicy = local
		svc.Spec.HealthCheckNodePort = 31000
		svc.Spec.LoadBalancerSourceRanges = []string{"203.0.113.0/24"}
		svc.Spec.LoadBalancerClass = ptr.To("example.com/lb")
		svc.Spec.AllocateLoadBalancerNodePorts = ptr.To(true)
		svc.Spec.LoadBalancerIP = "198.51.100.1"
	}
	if typ == corev1.ServiceTypeNodePort {
		svc.Spec.ExternalTrafficPolicy = local
	}
	return svc
}

// TestServiceCopy: what a target allocates is cleared, what the user asked
// for is kept, for every type a Service may have.
func TestServiceCopy(t *testing.T) {
	headless := sourceService(corev1.ServiceTypeClusterIP)
	headless.Spec.ClusterIP, headless.Spec.ClusterIPs = corev1.ClusterIPNone, []string{corev1.ClusterIPNone}
	for _, tc := range []struct {
		name      string
		src       *corev1.Service
		expose    Exposure
		typ       corev1.ServiceType
		clusterIP string
		lbKept    bool
		etp       corev1.ServiceExternalTrafficPolicy
	}{
		{name: "ClusterIP", src: sourceService(corev1.ServiceTypeClusterIP), typ: corev1.ServiceTypeClusterIP},
		{name: "headless", src: headless, typ: corev1.ServiceTypeClusterIP, clusterIP: corev1.ClusterIPNone},
		// Before: a NodePort stayed one, so any user of a source opened
		// node ports on every node of every target.
		{name: "NodePort not allowed", src: sourceService(corev1.ServiceTypeNodePort), typ: corev1.ServiceTypeClusterIP},
		{name: "NodePort allowed", src: sourceService(corev1.ServiceTypeNodePort), expose: Exposure{NodePorts: true}, typ: corev1.ServiceTypeNodePort, etp: corev1.ServiceExternalTrafficPolicyLocal},
		{name: "NodePort with load balancers allowed", src: sourceService(corev1.ServiceTypeNodePort), expose: Exposure{LoadBalancers: true}, typ: corev1.ServiceTypeClusterIP},
		{name: "LoadBalancer not allowed", src: sourceService(corev1.ServiceTypeLoadBalancer), expose: Exposure{NodePorts: true}, typ: corev1.ServiceTypeClusterIP},
		{name: "LoadBalancer allowed", src: sourceService(corev1.ServiceTypeLoadBalancer), expose: Exposure{LoadBalancers: true}, typ: corev1.ServiceTypeLoadBalancer,
			lbKept: true, etp: corev1.ServiceExternalTrafficPolicyLocal},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := tc.src.DeepCopy()
			got := ServiceCopy(tc.src, "src", tc.expose)
			assert.Equal(t, before, tc.src, "the source Service is not changed")
			s := got.Spec
			assert.Equal(t, tc.typ, s.Type)
			assert.Equal(t, tc.clusterIP, s.ClusterIP)
			if tc.clusterIP == "" {
				assert.Nil(t, s.ClusterIPs)
			} else {
				assert.Equal(t, []string{tc.clusterIP}, s.ClusterIPs)
			}
			assert.Nil(t, s.IPFamilies)
			assert.Nil(t, s.IPFamilyPolicy)
			assert.Nil(t, s.ExternalIPs)
			assert.Zero(t, s.HealthCheckNodePort)
			assert.Zero(t, s.Ports[0].NodePort)
			assert.Equal(t, tc.src.Spec.Ports[0].Port, s.Ports[0].Port)
			assert.Equal(t, tc.src.Spec.Ports[0].TargetPort, s.Ports[0].TargetPort)
			// Before: the user's selector alone, which also selected the
			// target's own pods of that namespace.
			assert.Equal(t, map[string]string{"app": "web", v1alpha1.LabelParentCluster: "src"}, s.Selector)
			assert.Equal(t, corev1.ServiceAffinityClientIP, s.SessionAffinity)
			assert.True(t, s.PublishNotReadyAddresses)
			assert.Equal(t, tc.etp, s.ExternalTrafficPolicy)
			if tc.lbKept {
				assert.Equal(t, tc.src.Spec.LoadBalancerSourceRanges, s.LoadBalancerSourceRanges)
				assert.Equal(t, tc.src.Spec.LoadBalancerClass, s.LoadBalancerClass)
			} else {
				assert.Nil(t, s.LoadBalancerSourceRanges)
				assert.Nil(t, s.LoadBalancerClass)
				assert.Nil(t, s.AllocateLoadBalancerNodePorts)
				assert.Empty(t, s.LoadBalancerIP)
			}
			assert.Empty(t, got.Status.LoadBalancer.Ingress)
			assert.Empty(t, got.UID)
			assert.Empty(t, got.ResourceVersion)
			assert.Equal(t, map[string]string{"app": "web", v1alpha1.LabelParentCluster: "src"}, got.Labels)
			assert.Equal(t, map[string]string{"note": "kept", v1alpha1.AnnotationParentName: "web", v1alpha1.AnnotationParentNamespace: "team"}, got.Annotations)
		})
	}
}

// TestKeepAllocated: an update keeps the cluster IPs, IP families and node
// ports the target allocated, so that a copy already up to date needs no
// write, and drops node ports when the type no longer takes them.
func TestKeepAllocated(t *testing.T) {
	src := sourceService(corev1.ServiceTypeNodePort)
	want := ServiceCopy(src, "src", Exposure{NodePorts: true})
	existing := want.DeepCopy()
	existing.Spec.ClusterIP, existing.Spec.ClusterIPs = "10.96.0.9", []string{"10.96.0.9"}
	existing.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv6Protocol}
	existing.Spec.IPFamilyPolicy = ptr.To(corev1.IPFamilyPolicySingleStack)
	existing.Spec.Ports[0].NodePort = 31234

	next := keepAllocated(want, existing)
	assert.True(t, upToDate(existing, next), "nothing changed in the source: no update")
	assert.Equal(t, int32(31234), next.Spec.Ports[0].NodePort)

	src.Spec.Ports[0].Port = 8080
	assert.False(t, upToDate(existing, keepAllocated(ServiceCopy(src, "src", Exposure{NodePorts: true}), existing)), "a port changed: an update")

	src.Spec.Type = corev1.ServiceTypeClusterIP
	src.Spec.ExternalTrafficPolicy = ""
	next = keepAllocated(ServiceCopy(src, "src", Exposure{NodePorts: true}), existing)
	assert.Zero(t, next.Spec.Ports[0].NodePort, "a ClusterIP takes no node port")
	assert.Equal(t, "10.96.0.9", next.Spec.ClusterIP)

	headless := want.DeepCopy()
	headless.Spec.ClusterIP, headless.Spec.ClusterIPs = corev1.ClusterIPNone, []string{corev1.ClusterIPNone}
	assert.True(t, headlessChanged(existing, headless), "a cluster IP never changes: recreated")
	assert.False(t, headlessChanged(existing, want))
}
