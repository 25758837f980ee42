package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
	"github.com/fleetlet/fleetlet/pkg/naming"
	"github.com/fleetlet/fleetlet/pkg/sandbox"
)

// A proxy that vanished while the manager was down (its finalizer removed
// by hand, then deleted) leaves a chaperon and a delegate in its target;
// the source's garbage collector removes them once the manager is back,
// and leaves the chaperons of live proxies alone.
func TestGarbageCollectorRemovesOrphans(t *testing.T) {
	need(t)
	ns := enabledNamespace(t, "gc", sb.ClusterNames()[1:]...)
	ctx := context.Background()
	src := kube(t, sandbox.SourceCluster)
	for _, name := range []string{"orphan", "keep"} {
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{"app": "gc"},
				Annotations: map[string]string{v1alpha1.AnnotationClusterSelector: "topology.kubernetes.io/region in (cluster-2,cluster-3)"}},
			Spec: podSpec("100m"),
		}
		_, err := src.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
		require.NoError(t, err)
	}
	var orphan, keep corev1.Pod
	eventually(t, 2*time.Minute, "both pods Running", func(ctx context.Context) (bool, string) {
		for name, p := range map[string]*corev1.Pod{"orphan": &orphan, "keep": &keep} {
			got, err := src.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			*p = *got
			if got.Status.Phase != corev1.PodRunning {
				return false, name + " is " + string(got.Status.Phase)
			}
		}
		return true, ""
	})
	cluster := clusterOfNode(orphan.Spec.NodeName)
	chaperon := naming.RemoteName(orphan.Name, orphan.UID)
	var created time.Time
	{
		var pc v1alpha1.PodChaperon
		require.NoError(t, ctrlClient(t, cluster).Get(ctx, types.NamespacedName{Namespace: ns, Name: chaperon}, &pc))
		created = pc.CreationTimestamp.Time
	}

	require.NoError(t, sb.StopComponent(ctx, sandbox.SourceCluster, sandbox.ComponentManager))
	restarted := false
	t.Cleanup(func() {
		if !restarted {
			_ = sb.StartComponent(context.Background(), sandbox.SourceCluster, sandbox.ComponentManager)
		}
	})
	// Take the proxy away behind fleetlet's back.
	patch := fmt.Sprintf(`{"metadata":{"$deleteFromPrimitiveList/finalizers":[%q]}}`, v1alpha1.FinalizerDelegate)
	_, err := src.CoreV1().Pods(ns).Patch(ctx, orphan.Name, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{})
	require.NoError(t, err)
	require.NoError(t, src.CoreV1().Pods(ns).Delete(ctx, orphan.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}))
	// The collector spares chaperons younger than --gc-min-age (a proxy
	// the source has not seen yet); make sure this one is older before it
	// looks.
	if wait := time.Until(created.Add(gcMinAge + 10*time.Second)); wait > 0 {
		time.Sleep(wait)
	}
	require.NoError(t, sb.StartComponent(ctx, sandbox.SourceCluster, sandbox.ComponentManager))
	restarted = true
	tc := ctrlClient(t, cluster)
	took := eventually(t, 3*time.Minute, "the orphan chaperon and its delegate gone from "+cluster, func(ctx context.Context) (bool, string) {
		var pc v1alpha1.PodChaperon
		err := tc.Get(ctx, types.NamespacedName{Namespace: ns, Name: chaperon}, &pc)
		var pod corev1.Pod
		perr := tc.Get(ctx, types.NamespacedName{Namespace: ns, Name: chaperon}, &pod)
		return err != nil && perr != nil, fmt.Sprintf("chaperon: %v, pod: %v", err, perr)
	})
	t.Logf("orphan collected %s after the manager restarted", took.Round(time.Second))
	// The live proxy's delegate is untouched.
	d := delegatesOf(t, ctx, &keep)
	got := d[clusterOfNode(keep.Spec.NodeName)]
	assert.Lenf(t, got, 1, "the live proxy's delegates: %v", names(d))
}
