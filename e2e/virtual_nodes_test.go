package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
	"github.com/fleetlet/fleetlet/pkg/sandbox"
)

// virtualNode returns the virtual node of a sandbox target in cluster-1.
func virtualNode(t *testing.T, ctx context.Context, name string) (*corev1.Node, error) {
	t.Helper()
	return kube(t, sandbox.SourceCluster).CoreV1().Nodes().Get(ctx, "fleetlet-"+name, metav1.GetOptions{})
}

// waitVirtualNodeReady waits until the target's virtual node is Ready;
// after says after what (for the failure message).
func waitVirtualNodeReady(t *testing.T, cluster, after string, timeout time.Duration) {
	t.Helper()
	eventually(t, timeout, "fleetlet-"+cluster+" Ready "+after, func(ctx context.Context) (bool, string) {
		n, err := virtualNode(t, ctx, cluster)
		if err != nil {
			return false, err.Error()
		}
		r := readyCondition(n)
		return r.Status == corev1.ConditionTrue, fmt.Sprintf("%+v", r)
	})
}

func readyCondition(n *corev1.Node) corev1.NodeCondition {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c
		}
	}
	return corev1.NodeCondition{}
}

// freeCPU is what a target can still run, as its own nodes and pods say,
// computed independently of fleetlet: the allocatable cpu of its
// schedulable nodes minus the requests of its unfinished pods.
func freeCPU(t *testing.T, ctx context.Context, cluster string) resource.Quantity {
	t.Helper()
	cs := kube(t, cluster)
	nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: "type=kwok"})
	require.NoError(t, err)
	free := resource.Quantity{}
	real := map[string]bool{}
	for _, n := range nodes.Items {
		free.Add(*n.Status.Allocatable.Cpu())
		real[n.Name] = true
	}
	pods, err := cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	for _, p := range pods.Items {
		if !real[p.Spec.NodeName] || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		for _, c := range p.Spec.Containers {
			free.Sub(*c.Resources.Requests.Cpu())
		}
	}
	return free
}

// schedulerFreeCPU is what the source scheduler sees free on a target's
// virtual node: its allocatable minus the requests of the pods bound to it.
func schedulerFreeCPU(t *testing.T, ctx context.Context, cluster string) resource.Quantity {
	t.Helper()
	n, err := virtualNode(t, ctx, cluster)
	require.NoError(t, err)
	free := n.Status.Allocatable.Cpu().DeepCopy()
	pods, err := kube(t, sandbox.SourceCluster).CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + n.Name})
	require.NoError(t, err)
	for _, p := range pods.Items {
		if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		for _, c := range p.Spec.Containers {
			free.Sub(*c.Resources.Requests.Cpu())
		}
	}
	return free
}

// A user connects clusters and sees one honest node per target in the
// source: Ready, labelled with the target's shared labels, tainted so that
// only proxies land there, with the cpu the target can still run.
func TestVirtualNodesTellTheTruth(t *testing.T) {
	need(t)
	ctx := context.Background()
	for _, c := range sb.ClusterNames() {
		var n *corev1.Node
		eventually(t, time.Minute, "virtual node of "+c+" Ready", func(ctx context.Context) (bool, string) {
			var err error
			n, err = virtualNode(t, ctx, c)
			if err != nil {
				return false, err.Error()
			}
			r := readyCondition(n)
			return r.Status == corev1.ConditionTrue, fmt.Sprintf("%+v", r)
		})
		for k, want := range map[string]string{
			"type":                   "virtual-kubelet",
			"kubernetes.io/role":     "cluster",
			"kubernetes.io/hostname": n.Name,
			v1alpha1.LabelCluster:    c,
			v1alpha1.TargetLabelPrefix + "topology.kubernetes.io.region": c,
		} {
			assert.Equalf(t, want, n.Labels[k], "%s: label %s", n.Name, k)
		}
		assert.NotContainsf(t, n.Labels, v1alpha1.TargetLabelPrefix+"topology.kubernetes.io.zone", "%s: the zone label is not shared by every node of %s but was copied", n.Name, c)
		tainted := false
		for _, taint := range n.Spec.Taints {
			tainted = tainted || taint == v1alpha1.VirtualNodeTaint()
		}
		assert.Truef(t, tainted, "%s: taints %v lack %v", n.Name, n.Spec.Taints, v1alpha1.VirtualNodeTaint())
		eventually(t, 30*time.Second, n.Name+": what the scheduler sees free = what "+c+" can still run", func(ctx context.Context) (bool, string) {
			want := freeCPU(t, ctx, c)
			got := schedulerFreeCPU(t, ctx, c)
			return got.Cmp(want) == 0, fmt.Sprintf("free cpu on the virtual node %s, free in the target %s", &got, &want)
		})
	}

	// Load in a target shows on its virtual node.
	cs := kube(t, "cluster-2")
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "load-", Namespace: "default"},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: ptr.To[int64](0),
			Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10", Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("5")}}}},
		},
	}
	pod, err := cs.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = cs.CoreV1().Pods("default").Delete(context.Background(), pod.Name, metav1.DeleteOptions{}) })
	eventually(t, time.Minute, "the load pod to be bound", func(ctx context.Context) (bool, string) {
		p, err := cs.CoreV1().Pods("default").Get(ctx, pod.Name, metav1.GetOptions{})
		return err == nil && p.Spec.NodeName != "", "unbound"
	})
	took := eventually(t, time.Minute, "fleetlet-cluster-2 to shrink by the load", func(ctx context.Context) (bool, string) {
		want := freeCPU(t, ctx, "cluster-2")
		got := schedulerFreeCPU(t, ctx, "cluster-2")
		return got.Cmp(want) == 0, fmt.Sprintf("free cpu on the virtual node %s, free in the target %s", &got, &want)
	})
	t.Logf("a 5-cpu pod in cluster-2 showed on its virtual node after %s", took.Round(100*time.Millisecond))
}

// An unreachable target turns its node Ready=False with the reason while the
// node's lease keeps being renewed: a cluster failure, not a fleetlet one.
// When it is back the node is Ready again.
func TestTargetOutageShowsOnItsNode(t *testing.T) {
	need(t)
	ctx := context.Background()
	eventually(t, time.Minute, "fleetlet-cluster-3 Ready", func(ctx context.Context) (bool, string) {
		n, err := virtualNode(t, ctx, "cluster-3")
		return err == nil && readyCondition(n).Status == corev1.ConditionTrue, "not ready"
	})
	stopped := time.Now()
	require.NoError(t, sb.Stop(ctx, "cluster-3"))
	restarted := false
	t.Cleanup(func() {
		if !restarted {
			_ = sb.Start(context.Background(), "cluster-3")
		}
	})
	var cond corev1.NodeCondition
	eventually(t, time.Minute, "fleetlet-cluster-3 Ready=False", func(ctx context.Context) (bool, string) {
		n, err := virtualNode(t, ctx, "cluster-3")
		if err != nil {
			return false, err.Error()
		}
		cond = readyCondition(n)
		return cond.Status == corev1.ConditionFalse, fmt.Sprintf("%+v", cond)
	})
	t.Logf("fleetlet-cluster-3 Ready=False %s after cluster-3 began to stop: %s: %s", time.Since(stopped).Round(100*time.Millisecond), cond.Reason, cond.Message)
	assert.Equal(t, v1alpha1.ReasonUnreachable, cond.Reason, "fleetlet-cluster-3's Ready reason")
	var lease coordinationv1.Lease
	leases := ctrlClient(t, sandbox.SourceCluster)
	key := client.ObjectKey{Namespace: corev1.NamespaceNodeLease, Name: "fleetlet-cluster-3"}
	require.NoError(t, leases.Get(ctx, key, &lease))
	first := lease.Spec.RenewTime.Time
	eventually(t, time.Minute, "the node lease to be renewed while the target is down", func(ctx context.Context) (bool, string) {
		var l coordinationv1.Lease
		if err := leases.Get(ctx, key, &l); err != nil {
			return false, err.Error()
		}
		return l.Spec.RenewTime.After(first), "renewTime " + l.Spec.RenewTime.String()
	})
	var target v1alpha1.ClusterTarget
	require.NoError(t, leases.Get(ctx, client.ObjectKey{Name: "cluster-3"}, &target))
	c := findCondition(target.Status.Conditions, v1alpha1.ConditionReady)
	assert.Falsef(t, c == nil || c.Status != metav1.ConditionFalse || c.Reason != v1alpha1.ReasonUnreachable, "ClusterTarget cluster-3 Ready condition = %+v", c)

	back := time.Now()
	require.NoError(t, sb.Start(ctx, "cluster-3"))
	restarted = true
	eventually(t, time.Minute, "fleetlet-cluster-3 Ready again", func(ctx context.Context) (bool, string) {
		n, err := virtualNode(t, ctx, "cluster-3")
		if err != nil {
			return false, err.Error()
		}
		c := readyCondition(n)
		return c.Status == corev1.ConditionTrue, fmt.Sprintf("%+v", c)
	})
	t.Logf("fleetlet-cluster-3 Ready %s after cluster-3 began to start (its control plane takes most of it)", time.Since(back).Round(100*time.Millisecond))
}

// `kubectl fleetlet connect` between two sandbox clusters gives a Ready
// target and its node; disconnect deletes the target, and its node goes.
func TestConnectAndDisconnect(t *testing.T) {
	need(t)
	plugin := filepath.Join(sb.BinDir(), "kubectl-fleetlet")
	kubeconfig := filepath.Join(sb.Dir(), sandbox.MergedKubeconfig)
	args := []string{"--kubeconfig", kubeconfig, "--source-context", "cluster-2", "--target-context", "cluster-3"}
	out, err := runCmd(plugin, append([]string{"connect"}, args...)...)
	require.NoErrorf(t, err, "kubectl fleetlet connect\n%s", out)
	src := kube(t, "cluster-2")
	eventually(t, time.Minute, "node fleetlet-cluster-3 Ready in cluster-2", func(ctx context.Context) (bool, string) {
		n, err := src.CoreV1().Nodes().Get(ctx, "fleetlet-cluster-3", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		r := readyCondition(n)
		return r.Status == corev1.ConditionTrue, fmt.Sprintf("%+v", r)
	})
	out, err = runCmd(plugin, "status", "--kubeconfig", kubeconfig, "--context", "cluster-2")
	assert.Falsef(t, err != nil || !contains(out, "cluster-3") || !contains(out, "fleetlet-cluster-3"), "kubectl fleetlet status: %v\n%s", err, out)
	out, err = runCmd(plugin, append([]string{"disconnect"}, args...)...)
	require.NoErrorf(t, err, "kubectl fleetlet disconnect\n%s", out)
	eventually(t, time.Minute, "node fleetlet-cluster-3 gone from cluster-2", func(ctx context.Context) (bool, string) {
		_, err := src.CoreV1().Nodes().Get(ctx, "fleetlet-cluster-3", metav1.GetOptions{})
		return err != nil, "still there"
	})
	// The pods bound to the node (the DaemonSets' pods fleetlet
	// acknowledged there) go too: Kubernetes' pod garbage collector
	// deletes a deleted node's pods after its 40 s quarantine, and only
	// that brings the DaemonSets' status back to the remaining nodes (their
	// controller does not watch node deletions).
	eventually(t, 2*time.Minute, "no pod left bound to fleetlet-cluster-3 in cluster-2", func(ctx context.Context) (bool, string) {
		pods, err := src.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=fleetlet-cluster-3"})
		if err != nil {
			return false, err.Error()
		}
		names := make([]string, 0, len(pods.Items))
		for _, p := range pods.Items {
			names = append(names, p.Namespace+"/"+p.Name)
		}
		return len(names) == 0, fmt.Sprintf("still bound there: %v", names)
	})
	var lease coordinationv1.Lease
	err = ctrlClient(t, "cluster-2").Get(context.Background(), client.ObjectKey{Namespace: corev1.NamespaceNodeLease, Name: "fleetlet-cluster-3"}, &lease)
	assert.Error(t, err, "the node lease of a disconnected target is still there")
}
