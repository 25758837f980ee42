package e2e

import (
	"context"
	"fmt"
	"maps"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
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
	require.NoError(t, err)
	// A NodePort in the source: its copies open no port on the targets'
	// nodes (services.nodePorts is off).
	web := service("web", map[string]string{"tier": "web"}, false)
	web.Spec.Type = corev1.ServiceTypeNodePort
	// A pod of the target's own in the namespace, with the labels the
	// Service selects: the copy must not route to it.
	local := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "local-web", Labels: map[string]string{"tier": "web"}}, Spec: podSpec("10m")}
	_, err = kube(t, east).CoreV1().Pods(ns).Create(ctx, local, metav1.CreateOptions{})
	require.NoError(t, err)
	for _, s := range []*corev1.Service{web, service("api", map[string]string{"tier": "web"}, false)} {
		_, err := src.CoreV1().Services(ns).Create(ctx, s, metav1.CreateOptions{})
		require.NoError(t, err)
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
	require.NoError(t, err)
	for _, c := range []string{east, west} {
		cp, err := kube(t, c).CoreV1().Services(ns).Get(ctx, "web", metav1.GetOptions{})
		require.NoError(t, err)
		// The target allocated it: its own range (the clusters' ranges
		// may overlap, so equal addresses prove nothing either way).
		assert.Falsef(t, cp.Spec.ClusterIP == "" || cp.Spec.ClusterIP == corev1.ClusterIPNone || len(cp.Spec.IPFamilies) == 0, "copy in %s: cluster IP %q, families %v: want one the target allocated (the source's is %q)", c, cp.Spec.ClusterIP, cp.Spec.IPFamilies, source.Spec.ClusterIP)
		assert.Falsef(t, len(cp.Spec.Ports) != 1 || cp.Spec.Ports[0].Port != 80 || cp.Spec.Ports[0].TargetPort != intstr.FromInt32(8080), "copy in %s: ports %v, want the source's", c, cp.Spec.Ports)
		// Before: a NodePort copy, a node port on every node of the
		// target, and a selector that also took the target's own pods.
		assert.Falsef(t, cp.Spec.Type != corev1.ServiceTypeClusterIP || cp.Spec.Ports[0].NodePort != 0, "copy in %s: type %s node port %d, want a ClusterIP Service (services.nodePorts is off)", c, cp.Spec.Type, cp.Spec.Ports[0].NodePort)
		want := map[string]string{"tier": "web", v1alpha1.LabelParentCluster: sandbox.SourceCluster}
		assert.Truef(t, maps.Equal(cp.Spec.Selector, want), "copy in %s: selector %v, want %v", c, cp.Spec.Selector, want)
	}
	eventually(t, time.Minute, "the copy's EndpointSlice in "+east+" listing its 2 delegates, not the target's own pod", func(ctx context.Context) (bool, string) {
		p, err := kube(t, east).CoreV1().Pods(ns).Get(ctx, local.Name, metav1.GetOptions{})
		if err != nil || p.Status.PodIP == "" {
			return false, "the local pod has no IP yet"
		}
		slices, err := kube(t, east).DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{LabelSelector: "kubernetes.io/service-name=web"})
		if err != nil {
			return false, err.Error()
		}
		var names []string
		for _, s := range slices.Items {
			for _, e := range s.Endpoints {
				if e.TargetRef != nil {
					names = append(names, e.TargetRef.Name)
				}
			}
		}
		slices2 := strings.Join(names, ",")
		require.NotContainsf(t, slices2, local.Name, "the copy of web in %s routes to the target's own pod: %s", east, slices2)
		return len(names) == 2, "endpoints " + strings.Join(names, ",")
	})

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
	cur, err := kube(t, west).CoreV1().Services(ns).Get(ctx, "api", metav1.GetOptions{})
	assert.Falsef(t, err != nil || cur.ResourceVersion != theirs.ResourceVersion, "the Service %s made itself was changed or deleted: %v", west, err)

	// No replica left in west: its copy of web goes, east's stays.
	_, err = src.AppsV1().Deployments(ns).Patch(ctx, "web-west", types.MergePatchType, []byte(`{"spec":{"replicas":0}}`), metav1.PatchOptions{})
	require.NoError(t, err)
	took = eventually(t, 2*time.Minute, "the copy of web in "+west+" removed, "+east+"'s kept", func(ctx context.Context) (bool, string) {
		got := strings.Join(serviceCopies(t, ctx, ns, "web"), ",")
		return got == east, "copies in " + got
	})
	t.Logf("the copy in %s removed %s after scaling to 0", west, took.Round(time.Millisecond))
	_, err = kube(t, west).CoreV1().Services(ns).Get(ctx, "api", metav1.GetOptions{})
	assert.NoErrorf(t, err, "the Service %s made itself", west)

	t.Run("headless Service of a StatefulSet", func(t *testing.T) { headlessStatefulSet(t, ctx, ns) })
}

// headlessStatefulSet: the headless copy exists in each delegate's
// cluster, and that cluster's own EndpointSlice for it lists the delegate
// with its hostname.
func headlessStatefulSet(t *testing.T, ctx context.Context, ns string) {
	src := kube(t, sandbox.SourceCluster)
	_, err := src.CoreV1().Services(ns).Create(ctx, service("db", map[string]string{"app": "db"}, true), metav1.CreateOptions{})
	require.NoError(t, err)
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
	_, err = src.AppsV1().StatefulSets(ns).Create(ctx, sts, metav1.CreateOptions{})
	require.NoError(t, err)
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

// fleetletSliceIPs lists the addresses of fleetlet's EndpointSlices for a
// Service in a cluster, sorted.
func fleetletSliceIPs(t *testing.T, ctx context.Context, cluster, ns, service string) ([]string, error) {
	t.Helper()
	slices, err := kube(t, cluster).DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{
		LabelSelector: discoveryv1.LabelServiceName + "=" + service + "," + discoveryv1.LabelManagedBy + "=" + v1alpha1.EndpointSliceManagedBy})
	if err != nil {
		return nil, err
	}
	var out []string
	for _, s := range slices.Items {
		for _, e := range s.Endpoints {
			if e.Conditions.Ready != nil && *e.Conditions.Ready {
				out = append(out, e.Addresses...)
			}
		}
	}
	sort.Strings(out)
	return out, nil
}

// delegateIPs are the pod IPs the targets report for the delegates of a
// Deployment's proxies, by cluster.
func delegateIPs(t *testing.T, ctx context.Context, ns, app string) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	list, err := kube(t, sandbox.SourceCluster).CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=" + app})
	require.NoError(t, err)
	for i := range list.Items {
		for c, ds := range delegatesOf(t, ctx, &list.Items[i]) {
			for _, d := range ds {
				if d.Status.PodIP != "" && podReady(&d) {
					out[c] = append(out[c], d.Status.PodIP)
				}
			}
		}
	}
	for c := range out {
		sort.Strings(out[c])
	}
	return out
}

// TestGlobalServices: a Service annotated global is refused with an Event
// while pod networks are not declared routable, and no slice is made; once
// they are (--routable-pod-networks), each target holding its copy has a
// fleetlet EndpointSlice listing exactly the ready delegates of the other
// clusters, by the pod IPs the targets report; after a drain of one
// cluster's delegates, the other's slice follows.
func TestGlobalServices(t *testing.T) {
	need(t)
	ctx := context.Background()
	ns := enabledNamespace(t, "global", sb.ClusterNames()[1:]...)
	src := kube(t, sandbox.SourceCluster)
	east, west := sb.ClusterNames()[1], sb.ClusterNames()[2]
	svc := service("g", map[string]string{"tier": "global"}, false)
	svc.Annotations = map[string]string{v1alpha1.AnnotationGlobal: "true"}
	_, err := src.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{})
	require.NoError(t, err)
	deployment(t, ns, "g-east", 2, inCluster(east, map[string]string{"tier": "global"}))
	deployment(t, ns, "g-west", 2, inCluster(west, map[string]string{"tier": "global"}))
	waitDeploymentRunning(t, ns, "g-east", 2, 3*time.Minute)
	waitDeploymentRunning(t, ns, "g-west", 2, 3*time.Minute)

	eventually(t, time.Minute, "a GlobalServiceRefused Event on Service g", func(ctx context.Context) (bool, string) {
		evs, err := src.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.kind=Service,involvedObject.name=g"})
		if err != nil {
			return false, err.Error()
		}
		for _, e := range evs.Items {
			if e.Reason == "GlobalServiceRefused" && strings.Contains(e.Message, "routable") {
				return true, ""
			}
		}
		return false, fmt.Sprintf("%d Events, none GlobalServiceRefused", len(evs.Items))
	})
	for _, c := range []string{east, west} {
		ips, err := fleetletSliceIPs(t, ctx, c, ns, "g")
		assert.Falsef(t, err != nil || len(ips) > 0, "fleetlet slices in %s without routable networks: %v %v", c, ips, err)
	}

	// The Multi-Cluster Services API installed: a ServiceExport makes its
	// Service global as the annotation does (seen when the manager starts).
	installServiceExportCRD(t, ctx)
	_, err = src.CoreV1().Services(ns).Create(ctx, service("h", map[string]string{"tier": "global"}, false), metav1.CreateOptions{})
	require.NoError(t, err)
	export := &unstructured.Unstructured{}
	export.SetAPIVersion("multicluster.x-k8s.io/v1alpha1")
	export.SetKind("ServiceExport")
	export.SetNamespace(ns)
	export.SetName("h")
	require.NoError(t, ctrlClient(t, sandbox.SourceCluster).Create(ctx, export))

	restartManager(t, "--routable-pod-networks=true")
	t.Cleanup(func() { restoreManager(t) })
	slicesList := func(what string, want map[string][]string) time.Duration {
		return eventually(t, 2*time.Minute, what, func(ctx context.Context) (bool, string) {
			for c, ips := range want {
				got, err := fleetletSliceIPs(t, ctx, c, ns, "g")
				if err != nil {
					return false, err.Error()
				}
				if strings.Join(got, ",") != strings.Join(ips, ",") {
					return false, fmt.Sprintf("%s's slices list %v, want %v", c, got, ips)
				}
			}
			return true, ""
		})
	}
	eastIPs, westIPs := delegateIPs(t, ctx, ns, "g-east")[east], delegateIPs(t, ctx, ns, "g-west")[west]
	require.Falsef(t, len(eastIPs) != 2 || len(westIPs) != 2, "delegate IPs: %s %v, %s %v; want 2 each", east, eastIPs, west, westIPs)
	took := slicesList("each cluster's slice listing the other's delegates", map[string][]string{east: westIPs, west: eastIPs})
	t.Logf("slices listed the other cluster's delegates %s after the restart", took.Round(time.Millisecond))
	// h's slices are written apart from g's: they may trail them.
	eventually(t, time.Minute, "the exported Service h's slices in "+east, func(ctx context.Context) (bool, string) {
		got, err := fleetletSliceIPs(t, ctx, east, ns, "h")
		return err == nil && strings.Join(got, ",") == strings.Join(westIPs, ","), fmt.Sprintf("the exported Service h: %s's slices list %v (%v), want %v", east, got, err, westIPs)
	})

	// The west delegates drained (their replacements cannot go anywhere
	// else): east's slice follows, west keeps no copy.
	node := "fleetlet-" + west
	t.Cleanup(func() { _, _ = kubectl(t, "--context", sandbox.SourceCluster, "uncordon", node) })
	out, err := kubectl(t, "--context", sandbox.SourceCluster, "drain", node, "--ignore-daemonsets", "--pod-selector=app=g-west", "--timeout=2m")
	require.NoErrorf(t, err, "kubectl drain %s\n%s", node, out)
	drained := time.Now()
	slicesList("east's slice empty after the drain of "+west, map[string][]string{east: nil})
	t.Logf("east's slice followed the drain in %s", time.Since(drained).Round(time.Millisecond))
	eventually(t, time.Minute, "no copy of g left in "+west, func(ctx context.Context) (bool, string) {
		got := strings.Join(serviceCopies(t, ctx, ns, "g"), ",")
		return got == east, "copies in " + got
	})
}

// installServiceExportCRD installs, in the source, a CRD with the MCS
// API's ServiceExport kind (multicluster.x-k8s.io/v1alpha1), as
// sigs.k8s.io/mcs-api names it, and waits until it is served. It stays:
// the restarted managers watch it.
func installServiceExportCRD(t *testing.T, ctx context.Context) {
	t.Helper()
	cfg, err := sb.RESTConfig(sandbox.SourceCluster)
	require.NoError(t, err)
	cs, err := apiextensionsclient.NewForConfig(cfg)
	require.NoError(t, err)
	crd := &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "serviceexports.multicluster.x-k8s.io"},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: "multicluster.x-k8s.io",
			Scope: apiextensionsv1.NamespaceScoped,
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: "serviceexports", Singular: "serviceexport", Kind: "ServiceExport", ListKind: "ServiceExportList"},
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{
				Name: "v1alpha1", Served: true, Storage: true,
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
					Type: "object", XPreserveUnknownFields: ptr.To(true)}},
				Subresources: &apiextensionsv1.CustomResourceSubresources{Status: &apiextensionsv1.CustomResourceSubresourceStatus{}},
			}},
		},
	}
	_, err = cs.ApiextensionsV1().CustomResourceDefinitions().Create(ctx, crd, metav1.CreateOptions{})
	require.Falsef(t, err != nil && !apierrors.IsAlreadyExists(err), "creating CRD %s: %v", crd.Name, err)
	eventually(t, time.Minute, "the ServiceExport CRD established", func(ctx context.Context) (bool, string) {
		cur, err := cs.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, crd.Name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		for _, c := range cur.Status.Conditions {
			if c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue {
				return true, ""
			}
		}
		return false, "not established"
	})
}
