package e2e

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
	"github.com/fleetlet/fleetlet/pkg/sandbox"
)

// inCluster pins a Deployment's replicas to one cluster, and labels them
// for a Service.
func inCluster(cluster string, labels map[string]string) func(*appsv1.Deployment) {
	return func(d *appsv1.Deployment) {
		tpl := &d.Spec.Template
		if tpl.Annotations == nil {
			tpl.Annotations = map[string]string{}
		}
		tpl.Annotations[v1alpha1.AnnotationClusterSelector] = "topology.kubernetes.io/region=" + cluster
		for k, v := range labels {
			tpl.Labels[k] = v
		}
	}
}

func service(name string, selector map[string]string, headless bool) *corev1.Service {
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.ServiceSpec{
			Selector: selector,
			Ports:    []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080), Protocol: corev1.ProtocolTCP}},
		},
	}
	if headless {
		svc.Spec.ClusterIP = corev1.ClusterIPNone
	}
	return svc
}

// serviceCopies lists the clusters whose namespace holds this source's
// copy of a Service.
func serviceCopies(t *testing.T, ctx context.Context, ns, name string) []string {
	t.Helper()
	var out []string
	for _, c := range sb.ClusterNames() {
		svc, err := kube(t, c).CoreV1().Services(ns).Get(ctx, name, metav1.GetOptions{})
		if err == nil && svc.Labels[v1alpha1.LabelParentCluster] == sandbox.SourceCluster {
			out = append(out, c)
		}
	}
	sort.Strings(out)
	return out
}

// TestServicesFollowTheirDelegates: a ClusterIP Service selecting two
// Deployments placed in cluster-2 and cluster-3 gets a copy in both (same
// ports and selector, a cluster IP of the target's own), and none in the
// source's self target; scaling one Deployment to 0 removes that copy; a
// Service created by hand in a target under a source Service's name is
// left untouched, with an Event on the source's; a headless Service of a
// StatefulSet has its copy in each delegate's cluster, whose own
// EndpointSlice lists the delegate under its hostname (db-0.db resolves
// there).
func TestServicesFollowTheirDelegates(t *testing.T) {
	need(t)
	ctx := context.Background()
	ns := enabledNamespace(t, "services", sb.ClusterNames()[1:]...)
	src := kube(t, sandbox.SourceCluster)
	east, west := sb.ClusterNames()[1], sb.ClusterNames()[2]

	// A Service the target made itself, under a name the source uses too.
	theirs, err := kube(t, west).CoreV1().Services(ns).Create(ctx, service("api", map[string]string{"team": "west"}, false), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	web := service("web", map[string]string{"tier": "web"}, false)
	for _, s := range []*corev1.Service{web, service("api", map[string]string{"tier": "web"}, false)} {
		if _, err := src.CoreV1().Services(ns).Create(ctx, s, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	deployment(t, ns, "web-east", 2, inCluster(east, map[string]string{"tier": "web"}))
	deployment(t, ns, "web-west", 2, inCluster(west, map[string]string{"tier": "web"}))
	waitDeploymentRunning(t, ns, "web-east", 2, 3*time.Minute)
	waitDeploymentRunning(t, ns, "web-west", 2, 3*time.Minute)

	want := strings.Join([]string{east, west}, ",")
	took := eventually(t, time.Minute, "a copy of Service web in "+want, func(ctx context.Context) (bool, string) {
		got := strings.Join(serviceCopies(t, ctx, ns, "web"), ",")
		return got == want, "copies in " + got
	})
	t.Logf("copies of web in %s %s after both Deployments were Running", want, took.Round(time.Millisecond))
	source, err := src.CoreV1().Services(ns).Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []string{east, west} {
		cp, err := kube(t, c).CoreV1().Services(ns).Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		// The target allocated it: its own range (the clusters' ranges
		// may overlap, so equal addresses prove nothing either way).
		if cp.Spec.ClusterIP == "" || cp.Spec.ClusterIP == corev1.ClusterIPNone || len(cp.Spec.IPFamilies) == 0 {
			t.Errorf("copy in %s: cluster IP %q, families %v: want one the target allocated (the source's is %q)", c, cp.Spec.ClusterIP, cp.Spec.IPFamilies, source.Spec.ClusterIP)
		}
		if len(cp.Spec.Ports) != 1 || cp.Spec.Ports[0].Port != 80 || cp.Spec.Ports[0].TargetPort != intstr.FromInt32(8080) || cp.Spec.Selector["tier"] != "web" || len(cp.Spec.Selector) != 1 {
			t.Errorf("copy in %s: ports %v selector %v, want the source's", c, cp.Spec.Ports, cp.Spec.Selector)
		}
	}

	// The target's own Service "api" is left as it was; the source's api
	// is copied where it does not clash, and says why not elsewhere.
	eventually(t, time.Minute, "Service api copied to "+east+" only, and an Event about "+west, func(ctx context.Context) (bool, string) {
		if got := strings.Join(serviceCopies(t, ctx, ns, "api"), ","); got != east {
			return false, "copies of api in " + got
		}
		evs, err := src.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.kind=Service,involvedObject.name=api"})
		if err != nil {
			return false, err.Error()
		}
		for _, e := range evs.Items {
			if e.Reason == "FollowRefused" && strings.Contains(e.Message, west) {
				return true, ""
			}
		}
		return false, fmt.Sprintf("%d Events on Service api, none FollowRefused naming %s", len(evs.Items), west)
	})
	if cur, err := kube(t, west).CoreV1().Services(ns).Get(ctx, "api", metav1.GetOptions{}); err != nil || cur.ResourceVersion != theirs.ResourceVersion {
		t.Errorf("the Service %s made itself was changed or deleted: %v", west, err)
	}

	// No replica left in west: its copy of web goes, east's stays.
	if _, err := src.AppsV1().Deployments(ns).Patch(ctx, "web-west", types.MergePatchType, []byte(`{"spec":{"replicas":0}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	took = eventually(t, 2*time.Minute, "the copy of web in "+west+" removed, "+east+"'s kept", func(ctx context.Context) (bool, string) {
		got := strings.Join(serviceCopies(t, ctx, ns, "web"), ",")
		return got == east, "copies in " + got
	})
	t.Logf("the copy in %s removed %s after scaling to 0", west, took.Round(time.Millisecond))
	if _, err := kube(t, west).CoreV1().Services(ns).Get(ctx, "api", metav1.GetOptions{}); err != nil {
		t.Errorf("the Service %s made itself: %v", west, err)
	}

	t.Run("headless Service of a StatefulSet", func(t *testing.T) { headlessStatefulSet(t, ctx, ns) })
}

// headlessStatefulSet: the headless copy exists in each delegate's
// cluster, and that cluster's own EndpointSlice for it lists the delegate
// with its hostname.
func headlessStatefulSet(t *testing.T, ctx context.Context, ns string) {
	src := kube(t, sandbox.SourceCluster)
	if _, err := src.CoreV1().Services(ns).Create(ctx, service("db", map[string]string{"app": "db"}, true), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	spec := podSpec("100m")
	sts := &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: "db"},
		Spec: appsv1.StatefulSetSpec{
			Replicas:            ptr.To[int32](2),
			ServiceName:         "db",
			PodManagementPolicy: appsv1.ParallelPodManagement,
			Selector:            &metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "db"},
					Annotations: map[string]string{v1alpha1.AnnotationClusterSelector: "topology.kubernetes.io/region in (cluster-2,cluster-3)"}},
				Spec: spec,
			},
		},
	}
	if _, err := src.AppsV1().StatefulSets(ns).Create(ctx, sts, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 3*time.Minute, "db-0 and db-1 listed by hostname in their clusters' EndpointSlices", func(ctx context.Context) (bool, string) {
		for _, name := range []string{"db-0", "db-1"} {
			p, err := src.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			if !strings.HasPrefix(p.Spec.NodeName, "fleetlet-") || p.Status.Phase != corev1.PodRunning {
				return false, name + " not Running on a virtual node"
			}
			c := clusterOfNode(p.Spec.NodeName)
			cp, err := kube(t, c).CoreV1().Services(ns).Get(ctx, "db", metav1.GetOptions{})
			if err != nil {
				return false, fmt.Sprintf("no copy of db in %s: %v", c, err)
			}
			if cp.Spec.ClusterIP != corev1.ClusterIPNone {
				return false, fmt.Sprintf("the copy in %s has cluster IP %q, want None", c, cp.Spec.ClusterIP)
			}
			slices, err := kube(t, c).DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=db"})
			if err != nil {
				return false, err.Error()
			}
			if !hasHostname(slices.Items, name) {
				return false, fmt.Sprintf("%s's EndpointSlices for db (%d) list no endpoint with hostname %s", c, len(slices.Items), name)
			}
		}
		return true, ""
	})
}

func hasHostname(slices []discoveryv1.EndpointSlice, hostname string) bool {
	for _, s := range slices {
		for _, e := range s.Endpoints {
			if e.Hostname != nil && *e.Hostname == hostname && len(e.Addresses) > 0 {
				return true
			}
		}
	}
	return false
}
