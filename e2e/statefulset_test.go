package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
	"github.com/fleetlet/fleetlet/pkg/sandbox"
)

// slowShutdown is the finalizer a scenario puts on a delegate to hold its
// deletion, as a long grace period would on a real node.
const slowShutdown = "e2e.fleetlet.io/slow-shutdown"

// holdShutdown holds a pod's deletion in a cluster with slowShutdown until
// the returned release (or the scenario's end) removes it.
func holdShutdown(t *testing.T, cluster, ns, name string) (release func() error) {
	t.Helper()
	pods := kube(t, cluster).CoreV1().Pods(ns)
	hold := fmt.Sprintf(`{"metadata":{"finalizers":[%q]}}`, slowShutdown)
	_, err := pods.Patch(context.Background(), name, types.MergePatchType, []byte(hold), metav1.PatchOptions{})
	require.NoError(t, err)
	release = func() error {
		_, err := pods.Patch(context.Background(), name, types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return err
	}
	t.Cleanup(func() { _ = release() })
	return release
}

// An admin deletes the PodChaperon of a StatefulSet's pod in its target
// (`kubectl delete podchaperon`, a namespace cleanup) while the pod takes
// 15 s to shut down, its cluster cordoned: db-0 is made again in another
// cluster only once the old copy is gone, and never runs twice (sampled
// every half second).
// Before: db-0 was elected into another cluster about a second later and
// both copies ran until the old one had shut down.
func TestChaperonDeletedNeverRunsAPodTwice(t *testing.T) {
	need(t)
	ns := enabledNamespace(t, "sts-chaperon", sb.ClusterNames()[1:]...)
	ctx := context.Background()
	watchOneCopy(t, ns)
	statefulSet(t, ns, "db", 1)
	db := waitStatefulSetRunning(t, ns, "db", 1, 2*time.Minute)[0]
	cluster := clusterOfNode(db.Spec.NodeName)
	ds := delegatesOf(t, ctx, &db)[cluster]
	require.Lenf(t, ds, 1, "db-0 on %s: %d pods there, want its delegate", db.Spec.NodeName, len(ds))
	delegate := ds[0]
	owner := metav1.GetControllerOf(&delegate)
	require.Falsef(t, owner == nil || owner.Kind != "PodChaperon", "delegate %s in %s is not controlled by a PodChaperon: %v", delegate.Name, cluster, delegate.OwnerReferences)
	pods := kube(t, cluster).CoreV1().Pods(ns)
	release := holdShutdown(t, cluster, ns, delegate.Name)

	// Its cluster cordoned: the new db-0 may only go to another one, where
	// nothing would stop it while the old copy runs.
	out, err := kubectl(t, "--context", sandbox.SourceCluster, "cordon", db.Spec.NodeName)
	require.NoErrorf(t, err, "cordon %s: %s", db.Spec.NodeName, out)
	t.Cleanup(func() { _, _ = kubectl(t, "--context", sandbox.SourceCluster, "uncordon", db.Spec.NodeName) })
	chaperon := &v1alpha1.PodChaperon{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: owner.Name}}
	require.NoError(t, ctrlClient(t, cluster).Delete(ctx, chaperon))
	eventually(t, time.Minute, "the delegate shutting down after its chaperon's deletion", func(ctx context.Context) (bool, string) {
		p, err := pods.Get(ctx, delegate.Name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return p.DeletionTimestamp != nil, "not Terminating yet"
	})
	// The old copy shuts down for 15 s: no second db-0 meanwhile (the
	// sampler looks), and the proxy is not replaced while it runs.
	time.Sleep(15 * time.Second)
	require.NoError(t, release())
	src := kube(t, sandbox.SourceCluster)
	eventually(t, 2*time.Minute, "db-0 made again and Running in another cluster", func(ctx context.Context) (bool, string) {
		p, err := src.CoreV1().Pods(ns).Get(ctx, "db-0", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return p.UID != db.UID && p.Status.Phase == corev1.PodRunning && p.Spec.NodeName != db.Spec.NodeName, fmt.Sprintf("%s %s on %q", p.UID, p.Status.Phase, p.Spec.NodeName)
	})
}
