package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
	"github.com/fleetlet/fleetlet/pkg/sandbox"
)

// A proxy terminates as a pod does. It keeps its own grace period (a
// patch restating it is accepted); deleted with `kubectl delete
// --grace-period=7`, it shows Terminating while its delegate shuts down
// (held here by a finalizer, as a preStop hook would), its chaperon is
// given the grace period the delete named for the delegate, and it is gone
// once its delegate is.
// Before: the proxy's grace period was forced to 0, the patch was refused,
// the delegate went with its own 20 s, and the proxy stayed Terminating
// for good after its delegate had gone.
func TestProxyTerminatesLikeAPod(t *testing.T) {
	need(t)
	ns := enabledNamespace(t, "terminate", sb.ClusterNames()[1:]...)
	ctx := context.Background()
	src := kube(t, sandbox.SourceCluster).CoreV1().Pods(ns)
	spec := podSpec("100m")
	spec.TerminationGracePeriodSeconds = ptr.To[int64](20)
	_, err := src.Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web", Labels: map[string]string{"case": "terminate"}}, Spec: spec}, metav1.CreateOptions{})
	require.NoError(t, err)
	p := waitBound(t, ns, "case=terminate", 1, 2*time.Minute)[0]
	g := p.Spec.TerminationGracePeriodSeconds
	require.Falsef(t, g == nil || *g != 20, "the proxy's grace period is %d (-1: unset), want the pod's own 20", ptr.Deref(g, -1))
	_, err = src.Patch(ctx, "web", types.StrategicMergePatchType, []byte(`{"spec":{"terminationGracePeriodSeconds":20}}`), metav1.PatchOptions{})
	assert.NoError(t, err, "a patch restating the pod's own grace period")

	cluster := clusterOfNode(p.Spec.NodeName)
	delegate := delegatesOf(t, ctx, &p)[cluster][0]
	pods := kube(t, cluster).CoreV1().Pods(ns)
	release := holdShutdown(t, cluster, ns, delegate.Name)

	_, err = kubectl(t, "--context", sandbox.SourceCluster, "-n", ns, "delete", "pod", "web", "--grace-period=7", "--wait=false")
	require.NoError(t, err)
	// kwok stops containers at once and makes the last delete, as a
	// kubelet does once they have stopped: the delegate's own grace period
	// reads 0 by then. What its chaperon controller deleted it with is
	// the grace period its chaperon was given (pkg/target/chaperon's
	// TestDeletedChaperonPassesItsGracePeriod shows the delete).
	owner := metav1.GetControllerOf(&delegate)
	require.NotNilf(t, owner, "delegate %s has no controller", delegate.Name)
	eventually(t, time.Minute, "the delegate shutting down, its chaperon given the delete's grace period", func(ctx context.Context) (bool, string) {
		d, err := pods.Get(ctx, delegate.Name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		var pc v1alpha1.PodChaperon
		if err := ctrlClient(t, cluster).Get(ctx, client.ObjectKey{Namespace: ns, Name: owner.Name}, &pc); err != nil {
			return false, err.Error()
		}
		g := pc.Annotations[v1alpha1.AnnotationDeletionGracePeriod]
		return d.DeletionTimestamp != nil && pc.DeletionTimestamp != nil && g == "7", fmt.Sprintf("delegate deletionTimestamp %v, chaperon deletionTimestamp %v, grace %q", d.DeletionTimestamp, pc.DeletionTimestamp, g)
	})
	time.Sleep(3 * time.Second)
	proxy, err := src.Get(ctx, "web", metav1.GetOptions{})
	require.Falsef(t, err != nil || proxy.DeletionTimestamp == nil, "the proxy should show Terminating while its delegate shuts down: %v, %v", proxy, err)
	require.NoError(t, release())
	eventually(t, 20*time.Second, "the proxy gone once its delegate is", func(ctx context.Context) (bool, string) {
		p, err := src.Get(ctx, "web", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, ""
		}
		if err != nil {
			return false, err.Error()
		}
		return false, fmt.Sprintf("%s, deletionTimestamp %v, finalizers %v", p.Status.Phase, p.DeletionTimestamp, p.Finalizers)
	})
}
