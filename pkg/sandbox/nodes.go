package sandbox

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// Labels on every fake node.
const (
	LabelRegion = "topology.kubernetes.io/region"
	LabelZone   = "topology.kubernetes.io/zone"
)

// zones of every sandbox cluster: node j lives in zone <cluster>-<zones[j%3]>.
var zones = []string{"a", "b", "c"}

// NodeName is the name of the j-th (1-based) fake node of a cluster.
func NodeName(cluster string, j int) string { return fmt.Sprintf("%s-node-%d", cluster, j) }

// nodeNames are the names of a cluster's n fake nodes.
func nodeNames(cluster string, n int) []string {
	out := make([]string, n)
	for j := range out {
		out[j] = NodeName(cluster, j+1)
	}
	return out
}

// fakeNode builds the j-th kwok node of cluster c.
func fakeNode(o Options, c *ClusterState, j int) *corev1.Node {
	name := NodeName(c.Name, j)
	resources := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse(o.NodeCPU),
		corev1.ResourceMemory: resource.MustParse(o.NodeMemory),
		corev1.ResourcePods:   resource.MustParse(o.NodePods),
	}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name: name,
			Labels: map[string]string{
				kwokNodeLabel:                    kwokNodeLabelValue,
				corev1.LabelHostname:             name,
				corev1.LabelOSStable:             "linux",
				corev1.LabelArchStable:           "amd64",
				LabelRegion:                      c.Name,
				LabelZone:                        fmt.Sprintf("%s-%s", c.Name, zones[(j-1)%len(zones)]),
				"node-role.kubernetes.io/worker": "",
			},
			Annotations: map[string]string{
				"node.alpha.kubernetes.io/ttl": "0",
				"kwok.x-k8s.io/node":           "fake",
				// Where metrics-server finds this node's emulated
				// /metrics/resource (Options.MetricsServer).
				resourceMetricsPathAnnotation: kwokResourceMetricsPath(name),
			},
		},
		Status: corev1.NodeStatus{
			Capacity:    resources,
			Allocatable: resources.DeepCopy(),
			Phase:       corev1.NodeRunning,
		},
	}
}

// ensureNodes creates the cluster's fake nodes that do not exist yet.
func ensureNodes(ctx context.Context, cs kubernetes.Interface, o Options, c *ClusterState) error {
	for j := 1; j <= o.Nodes; j++ {
		_, err := cs.CoreV1().Nodes().Create(ctx, fakeNode(o, c, j), metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating node %s: %w", NodeName(c.Name, j), err)
		}
	}
	return nil
}

// nodesReady returns nil when every fake node is Ready and kwok, started
// at since, has renewed its lease. A restarted cluster's nodes are still
// Ready from before, but kwok plays no pod stage on a node before it holds
// its lease again (it may first fail to create a lease that exists, and
// retry 10 s later): a pod bound there meanwhile was never started.
func nodesReady(ctx context.Context, cs kubernetes.Interface, o Options, c *ClusterState, since time.Time) error {
	for j := 1; j <= o.Nodes; j++ {
		name := NodeName(c.Name, j)
		n, err := cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if !NodeIsReady(n) {
			return fmt.Errorf("node %s is not Ready yet", name)
		}
		l, err := cs.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("node %s's lease: %w", name, err)
		}
		if l.Spec.RenewTime == nil || l.Spec.RenewTime.Time.Before(since.Truncate(time.Second)) {
			return fmt.Errorf("kwok has not renewed node %s's lease since it started", name)
		}
	}
	return nil
}

// dropNodeLeases deletes the fake nodes' leases a previous kwok held, so
// that the kwok about to start creates them at once: otherwise it waits
// for the old holder's lease to expire (up to its 40 s) or fails to create
// it and retries 10 s later, and meanwhile manages none of the nodes.
func (s *Sandbox) dropNodeLeases(ctx context.Context, c *ClusterState) error {
	cs, err := s.Client(c.Name)
	if err != nil {
		return err
	}
	for j := 1; j <= s.opts.Nodes; j++ {
		err := cs.CoordinationV1().Leases(corev1.NamespaceNodeLease).Delete(ctx, NodeName(c.Name, j), metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("deleting node %s's old lease: %w", NodeName(c.Name, j), err)
		}
	}
	return nil
}

// NodeIsReady reports whether the node's Ready condition is True.
func NodeIsReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func resourceQuantity(s string) resource.Quantity { return resource.MustParse(s) }
