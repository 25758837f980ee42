package e2e

import (
	"context"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
	"github.com/fleetlet/fleetlet/pkg/sandbox"
)

// Disconnecting a target (`kubectl fleetlet disconnect`: its ClusterTarget
// deleted) drains it first: the proxies on its virtual node are evicted, a
// PodDisruptionBudget respected, their Deployment recreates them in the
// other target, and only once nothing of the source is left there do the
// ClusterTarget and its virtual node go. Before: the ClusterTarget went at
// once, its proxies were finalized without their delegates, and the
// delegates ran on in the target for good. The cluster is connected again
// at the end.
func TestDisconnectDrainsTheTarget(t *testing.T) {
	need(t)
	ns := enabledNamespace(t, "disconnect", sb.ClusterNames()[1:]...)
	ctx := context.Background()
	src := kube(t, sandbox.SourceCluster)
	const replicas = 6
	sel := deployment(t, ns, "leaver", replicas, notSource("leaver"))
	waitDeploymentRunning(t, ns, "leaver", replicas, 3*time.Minute)
	oneAtATime(t, ns, "leaver", replicas)
	node := busiest(t, ctx, ns, sel)
	gone := clusterOfNode(node)
	on := 0
	for _, p := range waitDeploymentRunning(t, ns, "leaver", replicas, time.Minute) {
		if p.Spec.NodeName == node {
			on++
		}
	}
	t.Cleanup(func() {
		if err := sb.Connect(context.Background(), gone); err != nil {
			t.Errorf("connecting %s again: %v", gone, err)
		}
	})

	start := time.Now()
	if err := sb.Disconnect(ctx, gone, 3*time.Minute); err != nil {
		t.Fatal(err)
	}
	t.Logf("disconnecting %s drained %d of %d replicas in %s", gone, on, replicas, time.Since(start).Round(100*time.Millisecond))

	if err := ctrlClient(t, sandbox.SourceCluster).Get(ctx, client.ObjectKey{Name: gone}, &v1alpha1.ClusterTarget{}); !apierrors.IsNotFound(err) {
		t.Errorf("ClusterTarget %s after disconnect: %v, want NotFound", gone, err)
	}
	if _, err := src.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("virtual node %s after disconnect: %v, want NotFound", node, err)
	}
	for _, p := range waitDeploymentRunning(t, ns, "leaver", replicas, 2*time.Minute) {
		if p.Spec.NodeName == node {
			t.Errorf("proxy %s is still on %s", p.Name, node)
		}
	}
	var left v1alpha1.PodChaperonList
	if err := ctrlClient(t, gone).List(ctx, &left, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	if len(left.Items) > 0 || len(delegatesIn(t, ctx, gone, ns)) > 0 {
		t.Errorf("left in %s after disconnect: %d PodChaperons, delegates %v", gone, len(left.Items), delegatesIn(t, ctx, gone, ns))
	}
}
