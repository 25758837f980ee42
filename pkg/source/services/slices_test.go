package services

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
	"github.com/fleetlet/fleetlet/pkg/proxy"
)

// electedProxy is a proxy of app=db whose delegate runs in cluster, Ready
// or not, with the given pod IPs.
func electedProxy(name, cluster string, ready bool, ips ...string) corev1.Pod {
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	rec := proxy.Record{TargetName: cluster, Chaperon: name + "-x"}
	p := corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: name, Labels: map[string]string{"app": "db"}, Finalizers: []string{v1alpha1.FinalizerDelegate}},
		Spec:       corev1.PodSpec{Hostname: name, Subdomain: "db", Containers: []corev1.Container{{Name: "main", Ports: []corev1.ContainerPort{{Name: "sql", ContainerPort: 5432}}}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{
			{Type: v1alpha1.ConditionElected, Status: corev1.ConditionTrue, Message: rec.Message()},
			{Type: corev1.PodReady, Status: status},
		}},
	}
	for _, ip := range ips {
		p.Status.PodIPs = append(p.Status.PodIPs, corev1.PodIP{IP: ip})
	}
	if len(ips) > 0 {
		p.Status.PodIP = ips[0]
	}
	return p
}

func dbService() *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "db"},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "db"}, Ports: []corev1.ServicePort{
			{Name: "sql", Protocol: corev1.ProtocolTCP, Port: 5432, TargetPort: intstr.FromString("sql")},
			{Name: "metrics", Protocol: corev1.ProtocolTCP, Port: 9000, TargetPort: intstr.FromInt32(9100)},
		}},
	}
}

func addresses(slices []discoveryv1.EndpointSlice) []string {
	var out []string
	for _, s := range slices {
		for _, e := range s.Endpoints {
			out = append(out, e.Addresses...)
		}
	}
	return out
}

// TestGlobalSlices: a target's slices list the ready delegates of the
// other clusters only, by family, with hostnames and resolved ports, and
// are labelled for the Service, as fleetlet's and this source's.
func TestGlobalSlices(t *testing.T) {
	in := proxy.TargetKey{Name: "cluster-2"}
	proxies := []corev1.Pod{
		electedProxy("db-0", "cluster-2", true, "10.2.0.5"),            // here: the target's own slice lists it
		electedProxy("db-1", "cluster-3", true, "10.3.0.7", "fd00::7"), // elsewhere, dual-stack
		electedProxy("db-2", "cluster-3", false, "10.3.0.8"),           // not ready
		electedProxy("db-3", "cluster-1", true, "10.1.0.9"),            // in the source itself (a self target)
	}
	other := electedProxy("web-0", "cluster-3", true, "10.3.0.9")
	other.Labels = map[string]string{"app": "web"}
	proxies = append(proxies, other)

	slices := GlobalSlices(dbService(), proxies, in, "src")
	require.Len(t, slices, 2, "one slice per address family")
	assert.ElementsMatch(t, []string{"10.1.0.9", "10.3.0.7", "fd00::7"}, addresses(slices))
	for _, s := range slices {
		assert.Equal(t, map[string]string{discoveryv1.LabelServiceName: "db", discoveryv1.LabelManagedBy: v1alpha1.EndpointSliceManagedBy, v1alpha1.LabelParentCluster: "src"}, s.Labels)
		assert.Equal(t, "team", s.Namespace)
		require.Len(t, s.Ports, 2)
		assert.Equal(t, int32(5432), *s.Ports[0].Port, "a named target port is resolved in the pod's containers")
		assert.Equal(t, int32(9100), *s.Ports[1].Port)
		for _, e := range s.Endpoints {
			assert.True(t, *e.Conditions.Ready)
			require.NotNil(t, e.Hostname, "a pod whose subdomain is the Service keeps its hostname")
		}
	}
	v4 := slices[0]
	if v4.AddressType != discoveryv1.AddressTypeIPv4 {
		v4 = slices[1]
	}
	assert.Equal(t, []string{"10.1.0.9", "10.3.0.7"}, addresses([]discoveryv1.EndpointSlice{v4}), "sorted by address")

	svc := dbService()
	svc.Spec.PublishNotReadyAddresses = true
	assert.Contains(t, addresses(GlobalSlices(svc, proxies, in, "src")), "10.3.0.8", "publishNotReadyAddresses lists the not ready")

	assert.Empty(t, GlobalSlices(dbService(), proxies[:1], in, "src"), "no delegate elsewhere: no slice")
}

// TestGlobalSlicesChunk: at most maxSliceEndpoints endpoints a slice, each
// slice with a name of its own.
func TestGlobalSlicesChunk(t *testing.T) {
	var proxies []corev1.Pod
	for i := range 250 {
		proxies = append(proxies, electedProxy(fmt.Sprintf("db-%d", i), "cluster-3", true, fmt.Sprintf("10.3.%d.%d", i/200, i%200+1)))
	}
	slices := GlobalSlices(dbService(), proxies, proxy.TargetKey{Name: "cluster-2"}, "src")
	require.Len(t, slices, 3)
	names := map[string]bool{}
	total := 0
	for _, s := range slices {
		assert.LessOrEqual(t, len(s.Endpoints), maxSliceEndpoints)
		names[s.Name] = true
		total += len(s.Endpoints)
	}
	assert.Len(t, names, 3)
	assert.Equal(t, 250, total)
}
