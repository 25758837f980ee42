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
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fleetlet/fleetlet/pkg/sandbox"
)

// The sandbox binds claims as a real cluster does: a claim of the default
// StorageClass waits for its first pod (WaitForFirstConsumer), the
// provisioner makes a volume pinned to the node the scheduler chose, the
// pod runs there; deleting the claim deletes the volume.
func TestSandboxBindsClaims(t *testing.T) {
	need(t)
	ctx := context.Background()
	cluster := sb.ClusterNames()[1]
	cs := kube(t, cluster)
	ns := fmt.Sprintf("storage-%d", time.Now().UnixNano()%1_000_000)
	_, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = cs.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{}) })

	claim := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "data"},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
		},
	}
	_, err = cs.CoreV1().PersistentVolumeClaims(ns).Create(ctx, claim, metav1.CreateOptions{})
	require.NoError(t, err)
	// No pod yet: the claim waits for one.
	time.Sleep(2 * time.Second)
	got, err := cs.CoreV1().PersistentVolumeClaims(ns).Get(ctx, "data", metav1.GetOptions{})
	require.Falsef(t, err != nil || got.Status.Phase != corev1.ClaimPending, "claim before its first pod: %v %v, want Pending", got.Status.Phase, err)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "db"},
		Spec:       podSpec("10m"),
	}
	pod.Spec.Volumes = []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "data"}}}}
	pod.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "data", MountPath: "/data"}}
	_, err = cs.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
	require.NoError(t, err)
	var volume string
	eventually(t, time.Minute, "the claim Bound and its pod running", func(ctx context.Context) (bool, string) {
		c, err := cs.CoreV1().PersistentVolumeClaims(ns).Get(ctx, "data", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		p, err := cs.CoreV1().Pods(ns).Get(ctx, "db", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		volume = c.Spec.VolumeName
		return c.Status.Phase == corev1.ClaimBound && p.Status.Phase == corev1.PodRunning, fmt.Sprintf("claim %s, pod %s on %q", c.Status.Phase, p.Status.Phase, p.Spec.NodeName)
	})
	pv, err := cs.CoreV1().PersistentVolumes().Get(ctx, volume, metav1.GetOptions{})
	require.NoError(t, err)
	p, err := cs.CoreV1().Pods(ns).Get(ctx, "db", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Falsef(t, pv.Spec.StorageClassName != sandbox.StorageClassStandard || pv.Spec.NodeAffinity == nil ||
		pv.Spec.NodeAffinity.Required.NodeSelectorTerms[0].MatchFields[0].Values[0] != p.Spec.NodeName,
		"volume %s: class %q, node affinity %+v; want %s, pinned to the pod's node %s", volume, pv.Spec.StorageClassName, pv.Spec.NodeAffinity, sandbox.StorageClassStandard, p.Spec.NodeName)
	q := pv.Spec.Capacity[corev1.ResourceStorage]
	assert.Equalf(t, 0, q.Cmp(resource.MustParse("1Gi")), "volume capacity %s, want 1Gi", q.String())

	// Released, the volume goes (reclaim policy Delete).
	require.NoError(t, cs.CoreV1().Pods(ns).Delete(ctx, "db", metav1.DeleteOptions{}))
	require.NoError(t, cs.CoreV1().PersistentVolumeClaims(ns).Delete(ctx, "data", metav1.DeleteOptions{}))
	eventually(t, time.Minute, "volume "+volume+" deleted", func(ctx context.Context) (bool, string) {
		_, err := cs.CoreV1().PersistentVolumes().Get(ctx, volume, metav1.GetOptions{})
		return apierrors.IsNotFound(err), fmt.Sprintf("%v", err)
	})
}
