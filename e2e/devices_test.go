package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
	"github.com/fleetlet/fleetlet/pkg/sandbox"
)

// Pods with a DRA claim (resource.k8s.io/v1, a ResourceClaimTemplate) run
// only where the devices are: with one device per node published in
// cluster-2 only, three GPU pods run there, each with its own device named
// on its proxy; a fourth waits, gated, saying why per cluster, and never
// runs elsewhere; once cluster-3 publishes devices too, it runs there. The
// template follows to the targets and goes with the last pod.
func TestGPUPodsRunWhereTheDevicesAre(t *testing.T) {
	need(t)
	ctx := context.Background()
	gpuClusters := sb.ClusterNames()[1:3] // cluster-2, cluster-3
	for _, c := range gpuClusters {
		withdrawDevices(t, c) // a sandbox run with --devices leaves them
		t.Cleanup(func() { withdrawDevices(t, c) })
	}
	publishDevices(t, gpuClusters[0], 1)
	ns := enabledNamespace(t, "gpu", sb.ClusterNames()[1:]...)
	src := kube(t, sandbox.SourceCluster)
	oneGPU(t, ns, "one-gpu")

	devices := map[string]string{}
	for i := range 3 {
		name := fmt.Sprintf("train-%d", i)
		gpuPod(t, ns, name, "one-gpu")
		p := waitGPUPodRunning(t, ns, name)
		assert.Equalf(t, gpuClusters[0], clusterOfNode(p.Spec.NodeName), "%s's cluster: only %s publishes devices", name, gpuClusters[0])
		dev := p.Annotations[v1alpha1.AnnotationDevices]
		assert.Truef(t, strings.HasPrefix(dev, "gpu="+sandbox.DeviceDriver+"/"+gpuClusters[0]+"-node-"), "%s: %s=%q, want gpu=%s/<a node of %s>/<device>", name, v1alpha1.AnnotationDevices, dev, sandbox.DeviceDriver, gpuClusters[0])
		other, ok := devices[dev]
		assert.Falsef(t, ok, "%s and %s got the same device %s", other, name, dev)
		devices[dev] = name
	}
	tmpl, err := kube(t, gpuClusters[0]).ResourceV1().ResourceClaimTemplates(ns).Get(ctx, "one-gpu", metav1.GetOptions{})
	require.NoErrorf(t, err, "the template's copy in %s", gpuClusters[0])
	assert.Equalf(t, sandbox.SourceCluster, tmpl.Labels[v1alpha1.LabelParentCluster], "the template's copy in %s has labels %v, want %s=%s", gpuClusters[0], tmpl.Labels, v1alpha1.LabelParentCluster, sandbox.SourceCluster)

	// Every device is taken: the fourth waits, and says why per cluster.
	gpuPod(t, ns, "train-3", "one-gpu")
	eventually(t, time.Minute, "train-3 to say why no cluster runs it", func(ctx context.Context) (bool, string) {
		p, err := src.CoreV1().Pods(ns).Get(ctx, "train-3", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		c := electedCondition(p)
		if c == nil || c.Status != corev1.ConditionFalse {
			return false, fmt.Sprintf("Elected %v", c)
		}
		// The clusters without the DeviceClass are left out by their
		// summaries; cluster-2's scheduler finds no free device.
		for _, cl := range []string{sandbox.SourceCluster, gpuClusters[1]} {
			if !strings.Contains(c.Message, cl+": it serves no DeviceClass "+sandbox.DeviceClassGPU) {
				return false, c.Message
			}
		}
		return strings.Contains(c.Message, gpuClusters[0]+":"), c.Message
	})
	time.Sleep(5 * time.Second)
	p, err := src.CoreV1().Pods(ns).Get(ctx, "train-3", metav1.GetOptions{})
	require.NoError(t, err)
	require.Falsef(t, p.Spec.NodeName != "" || len(p.Spec.SchedulingGates) == 0, "train-3 was bound to %q (gates %v) while no cluster had a free device", p.Spec.NodeName, p.Spec.SchedulingGates)
	// No candidate is made where the class is not served.
	pods, err := kube(t, gpuClusters[1]).CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	assert.Falsef(t, err != nil || len(pods.Items) > 0, "%s has %d pods of %s (err %v), want none: it serves no DeviceClass", gpuClusters[1], len(pods.Items), ns, err)

	// A second GPU cluster: the waiting pod runs there.
	publishDevices(t, gpuClusters[1], 1)
	start := time.Now()
	p = waitGPUPodRunning(t, ns, "train-3")
	t.Logf("train-3 ran %s after %s published devices", time.Since(start).Round(100*time.Millisecond), gpuClusters[1])
	assert.Equalf(t, gpuClusters[1], clusterOfNode(p.Spec.NodeName), "train-3's cluster: want %s, the second cluster with devices", gpuClusters[1])
	dev := p.Annotations[v1alpha1.AnnotationDevices]
	assert.Truef(t, strings.HasPrefix(dev, "gpu="+sandbox.DeviceDriver+"/"+gpuClusters[1]+"-node-"), "train-3: %s=%q, want a device of %s", v1alpha1.AnnotationDevices, dev, gpuClusters[1])

	// The template's copies go with the last pod that needs them.
	require.NoError(t, src.CoreV1().Pods(ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}))
	for _, c := range gpuClusters {
		eventually(t, time.Minute, "the template's copy in "+c+" to go with its pods", func(ctx context.Context) (bool, string) {
			_, err := kube(t, c).ResourceV1().ResourceClaimTemplates(ns).Get(ctx, "one-gpu", metav1.GetOptions{})
			return apierrors.IsNotFound(err), fmt.Sprintf("get: %v", err)
		})
	}

	// A claim two pods share is allocated once, in one cluster: both run
	// there, on the same device, and the claim says where it is.
	shared := &resourcev1.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "team-gpu", Namespace: ns},
		Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{Requests: []resourcev1.DeviceRequest{
			{Name: "gpu", Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: sandbox.DeviceClassGPU}}}}},
	}
	_, err = src.ResourceV1().ResourceClaims(ns).Create(ctx, shared, metav1.CreateOptions{})
	require.NoError(t, err)
	var home, device string
	for _, name := range []string{"share-0", "share-1"} {
		sharingPod(t, ns, name, "team-gpu")
		p := waitGPUPodRunning(t, ns, name)
		cluster, dev := clusterOfNode(p.Spec.NodeName), p.Annotations[v1alpha1.AnnotationDevices]
		if home == "" {
			home, device = cluster, dev
		}
		assert.Falsef(t, cluster != home || dev != device, "%s runs in %s on %q; want %s on %q, with the claim it shares", name, cluster, dev, home, device)
	}
	got, err := src.ResourceV1().ResourceClaims(ns).Get(ctx, "team-gpu", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equalf(t, home, got.Annotations[v1alpha1.AnnotationTarget], "the shared claim's %s", v1alpha1.AnnotationTarget)
}

func publishDevices(t *testing.T, cluster string, perNode int) {
	t.Helper()
	var nodes []string
	for j := 1; j <= sb.State().Settings.Nodes; j++ {
		nodes = append(nodes, sandbox.NodeName(cluster, j))
	}
	require.NoError(t, sandbox.PublishDevices(context.Background(), kube(t, cluster), nodes, perNode))
}

// withdrawDevices removes the published devices and their class.
func withdrawDevices(t *testing.T, cluster string) {
	t.Helper()
	publishDevices(t, cluster, 0)
	err := kube(t, cluster).ResourceV1().DeviceClasses().Delete(context.Background(), sandbox.DeviceClassGPU, metav1.DeleteOptions{})
	require.Falsef(t, err != nil && !apierrors.IsNotFound(err), "deleting DeviceClass %s in %s: %v", sandbox.DeviceClassGPU, cluster, err)
}

// oneGPU creates a ResourceClaimTemplate for one device of the sandbox's
// class.
func oneGPU(t *testing.T, ns, name string) {
	t.Helper()
	rct := &resourcev1.ResourceClaimTemplate{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: resourcev1.ResourceClaimTemplateSpec{Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{
			Requests: []resourcev1.DeviceRequest{{Name: "gpu", Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: sandbox.DeviceClassGPU}}},
		}}},
	}
	_, err := kube(t, sandbox.SourceCluster).ResourceV1().ResourceClaimTemplates(ns).Create(context.Background(), rct, metav1.CreateOptions{})
	require.NoError(t, err)
}

func gpuPod(t *testing.T, ns, name, template string) {
	t.Helper()
	claimingPod(t, ns, name, corev1.PodResourceClaim{Name: "gpu", ResourceClaimTemplateName: ptr.To(template)})
}

func sharingPod(t *testing.T, ns, name, claim string) {
	t.Helper()
	claimingPod(t, ns, name, corev1.PodResourceClaim{Name: "gpu", ResourceClaimName: ptr.To(claim)})
}

// claimingPod creates a pod whose container uses one resource claim.
func claimingPod(t *testing.T, ns, name string, claim corev1.PodResourceClaim) {
	t.Helper()
	spec := podSpec("100m")
	spec.ResourceClaims = []corev1.PodResourceClaim{claim}
	spec.Containers[0].Resources.Claims = []corev1.ResourceClaim{{Name: claim.Name}}
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: spec}
	_, err := kube(t, sandbox.SourceCluster).CoreV1().Pods(ns).Create(context.Background(), p, metav1.CreateOptions{})
	require.NoError(t, err)
}

// waitGPUPodRunning waits until a proxy is Running with its devices named.
func waitGPUPodRunning(t *testing.T, ns, name string) *corev1.Pod {
	t.Helper()
	var got *corev1.Pod
	eventually(t, 2*time.Minute, name+" to run with its devices named", func(ctx context.Context) (bool, string) {
		p, err := kube(t, sandbox.SourceCluster).CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		got = p
		return p.Status.Phase == corev1.PodRunning && p.Annotations[v1alpha1.AnnotationDevices] != "",
			fmt.Sprintf("phase %s, node %q, devices %q", p.Status.Phase, p.Spec.NodeName, p.Annotations[v1alpha1.AnnotationDevices])
	})
	return got
}
