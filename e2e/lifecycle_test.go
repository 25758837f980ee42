package e2e

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
	"github.com/fleetlet/fleetlet/pkg/sandbox"
)

// deployment creates a Deployment of n small replicas in ns and returns its
// pod selector.
func deployment(t *testing.T, ns, name string, n int32, mutate ...func(*appsv1.Deployment)) string {
	t.Helper()
	spec := podSpec("100m")
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(n),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": name}}, Spec: spec},
		},
	}
	for _, m := range mutate {
		m(d)
	}
	_, err := kube(t, sandbox.SourceCluster).AppsV1().Deployments(ns).Create(context.Background(), d, metav1.CreateOptions{})
	require.NoError(t, err)
	return "app=" + name
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// waitDeploymentRunning waits until the Deployment has n ready, available
// replicas, every one a Running and Ready proxy on a virtual node, and
// returns the proxies.
func waitDeploymentRunning(t *testing.T, ns, name string, n int, timeout time.Duration) []corev1.Pod {
	t.Helper()
	src := kube(t, sandbox.SourceCluster)
	var proxies []corev1.Pod
	eventually(t, timeout, fmt.Sprintf("deployment %s: %d Running and Ready proxies", name, n), func(ctx context.Context) (bool, string) {
		d, err := src.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		list, err := src.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=" + name})
		if err != nil {
			return false, err.Error()
		}
		proxies = proxies[:0]
		running := 0
		for _, p := range list.Items {
			if p.DeletionTimestamp != nil {
				continue
			}
			proxies = append(proxies, p)
			if p.Status.Phase == corev1.PodRunning && podReady(&p) && strings.HasPrefix(p.Spec.NodeName, "fleetlet-") {
				running++
			}
		}
		return running == n && len(proxies) == n && d.Status.ReadyReplicas == int32(n) && d.Status.AvailableReplicas == int32(n),
			fmt.Sprintf("%d of %d proxies Running and Ready; deployment ready %d available %d", running, len(proxies), d.Status.ReadyReplicas, d.Status.AvailableReplicas)
	})
	return proxies
}

// remoteLeftovers lists, in every cluster, the chaperons and pods that stand
// for a proxy of the source in namespace ns.
func remoteLeftovers(t *testing.T, ctx context.Context, ns string) []string {
	t.Helper()
	sel := client.MatchingLabels{v1alpha1.LabelParentCluster: sandbox.SourceCluster}
	var out []string
	for _, c := range sb.ClusterNames() {
		cl := ctrlClient(t, c)
		var pcs v1alpha1.PodChaperonList
		require.NoError(t, cl.List(ctx, &pcs, client.InNamespace(ns), sel))
		for _, pc := range pcs.Items {
			out = append(out, c+": podchaperon/"+pc.Name)
		}
		var pods corev1.PodList
		require.NoError(t, cl.List(ctx, &pods, client.InNamespace(ns), sel))
		for _, p := range pods.Items {
			out = append(out, c+": pod/"+p.Name)
		}
	}
	sort.Strings(out)
	return out
}

// A 12-replica Deployment: every proxy reports its delegate's truth
// (Running, Ready, the delegate's IP, the virtual node as host), deleting a
// delegate in its target replaces the proxy, and deleting the Deployment
// leaves nothing anywhere.
func TestDeploymentLifecycle(t *testing.T) {
	need(t)
	ns := enabledNamespace(t, "lifecycle", sb.ClusterNames()[1:]...)
	ctx := context.Background()
	src := kube(t, sandbox.SourceCluster)
	deployment(t, ns, "web", 12)
	proxies := waitDeploymentRunning(t, ns, "web", 12, 3*time.Minute)

	nodeIPs := map[string]string{}
	for i := range proxies {
		p := &proxies[i]
		d := delegatesOf(t, ctx, p)
		dp := d[clusterOfNode(p.Spec.NodeName)]
		require.Lenf(t, dp, 1, "proxy %s on %s: delegates %v", p.Name, p.Spec.NodeName, names(d))
		assert.Falsef(t, p.Status.PodIP == "" || p.Status.PodIP != dp[0].Status.PodIP, "proxy %s podIP %q, delegate's %q", p.Name, p.Status.PodIP, dp[0].Status.PodIP)
		ip, ok := nodeIPs[p.Spec.NodeName]
		if !ok {
			n, err := src.CoreV1().Nodes().Get(ctx, p.Spec.NodeName, metav1.GetOptions{})
			require.NoError(t, err)
			for _, a := range n.Status.Addresses {
				if a.Type == corev1.NodeInternalIP {
					ip = a.Address
				}
			}
			nodeIPs[p.Spec.NodeName] = ip
		}
		assert.Falsef(t, p.Status.HostIP != ip || ip == "", "proxy %s hostIP %q, virtual node's %q", p.Name, p.Status.HostIP, ip)
		assert.Falsef(t, p.Status.StartTime == nil || len(p.Status.ContainerStatuses) != 1 || p.Status.ContainerStatuses[0].State.Running == nil, "proxy %s: start time %v, container statuses %+v", p.Name, p.Status.StartTime, p.Status.ContainerStatuses)
		c := electedCondition(p)
		assert.Falsef(t, c == nil || c.Status != corev1.ConditionTrue, "proxy %s lost its Elected record: %+v", p.Name, p.Status.Conditions)
	}

	// The delegates' Events reach their proxies (the target's scheduler
	// said where it bound each one).
	eventually(t, time.Minute, "an Event of a delegate mirrored on its proxy", func(ctx context.Context) (bool, string) {
		evs, err := src.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.kind=Pod"})
		if err != nil {
			return false, err.Error()
		}
		var seen []string
		for _, e := range evs.Items {
			if strings.Contains(e.Message, "(delegate in ") {
				return true, ""
			}
			seen = append(seen, e.Reason)
		}
		return false, fmt.Sprintf("events: %v", seen)
	})

	// Deleting one delegate in its target deletes its proxy; the
	// ReplicaSet makes a new one, which runs somewhere.
	victim := proxies[0]
	cluster := clusterOfNode(victim.Spec.NodeName)
	dp := delegatesOf(t, ctx, &victim)[cluster][0]
	require.NoError(t, kube(t, cluster).CoreV1().Pods(ns).Delete(ctx, dp.Name, metav1.DeleteOptions{}))
	eventually(t, time.Minute, "the proxy of the deleted delegate to be gone", func(ctx context.Context) (bool, string) {
		_, err := src.CoreV1().Pods(ns).Get(ctx, victim.Name, metav1.GetOptions{})
		return err != nil, fmt.Sprintf("proxy %s still there", victim.Name)
	})
	after := waitDeploymentRunning(t, ns, "web", 12, 2*time.Minute)
	for i := range after {
		require.NotEqualf(t, victim.UID, after[i].UID, "proxy %s came back", victim.Name)
		d := delegatesOf(t, ctx, &after[i])
		total := 0
		for _, ps := range d {
			total += len(ps)
		}
		assert.LessOrEqualf(t, total, 1, "proxy %s has %d delegates: %v", after[i].Name, total, names(d))
	}

	// A pod carrying fleetlet's finalizer stays managed whatever its
	// namespace's label says now; and deleting the Deployment leaves no
	// proxy, chaperon or delegate.
	unlabel := fmt.Sprintf(`{"metadata":{"labels":{%q:null}}}`, v1alpha1.LabelEnabled)
	_, err := src.CoreV1().Namespaces().Patch(ctx, ns, types.MergePatchType, []byte(unlabel), metav1.PatchOptions{})
	require.NoError(t, err)
	require.NoError(t, src.AppsV1().Deployments(ns).Delete(ctx, "web", metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationForeground)}))
	eventually(t, 2*time.Minute, "nothing left of the deployment anywhere", func(ctx context.Context) (bool, string) {
		pods, err := src.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		left := remoteLeftovers(t, ctx, ns)
		return len(pods.Items) == 0 && len(left) == 0, fmt.Sprintf("%d proxies; remote: %v", len(pods.Items), left)
	})
}

// A Job of 8 completions completes: finished proxies keep their final
// status.
func TestJobCompletes(t *testing.T) {
	need(t)
	ns := enabledNamespace(t, "job", sb.ClusterNames()[1:]...)
	ctx := context.Background()
	src := kube(t, sandbox.SourceCluster)
	job(t, ns, "batch", 8, 4, "2s")
	waitJobComplete(t, ns, "batch", 8, 4*time.Minute)
	pods, err := src.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "batch.kubernetes.io/job-name=batch"})
	require.NoError(t, err)
	succeeded := 0
	for _, p := range pods.Items {
		if p.Status.Phase == corev1.PodSucceeded {
			succeeded++
			assert.Falsef(t, len(p.Status.ContainerStatuses) != 1 || p.Status.ContainerStatuses[0].State.Terminated == nil, "succeeded proxy %s without a terminated container: %+v", p.Name, p.Status.ContainerStatuses)
		}
	}
	assert.Equal(t, 8, succeeded, "succeeded proxies")
}

// Deleting the namespace in a target takes the delegates with it (and the
// source's rights there): their proxies are deleted and finalized, not left
// Terminating, and the Deployment's replicas come back elsewhere.
func TestTargetNamespaceDeleted(t *testing.T) {
	need(t)
	ns := enabledNamespace(t, "ns-gone", sb.ClusterNames()[1:]...)
	ctx := context.Background()
	src := kube(t, sandbox.SourceCluster)
	sel := deployment(t, ns, "web", 4, notSource("web"))
	waitDeploymentRunning(t, ns, "web", 4, 3*time.Minute)
	node := busiest(t, ctx, ns, sel)
	gone := clusterOfNode(node)
	victims := proxiesOn(t, ctx, ns, sel)[node]
	require.NoError(t, kube(t, gone).CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{}))
	eventually(t, 2*time.Minute, "the proxies of "+gone+" deleted and finalized", func(ctx context.Context) (bool, string) {
		left := 0
		for _, p := range victims {
			if _, err := src.CoreV1().Pods(ns).Get(ctx, p.Name, metav1.GetOptions{}); err == nil {
				left++
			}
		}
		return left == 0, fmt.Sprintf("%d of %d left", left, len(victims))
	})
	for _, p := range waitDeploymentRunning(t, ns, "web", 4, 2*time.Minute) {
		assert.NotEqualf(t, node, p.Spec.NodeName, "proxy %s runs on %s, whose namespace is gone", p.Name, node)
	}
}
