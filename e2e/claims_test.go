package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
	"github.com/fleetlet/fleetlet/pkg/sandbox"
)

// A StatefulSet with volumeClaimTemplates across clusters: each pod runs
// in one target with its own claim there, bound by that target's
// provisioner; db-1 deleted five times always comes back to the same
// cluster and the same claim; with db-1's target stopped, a new db-1 waits
// Pending, saying why, and never runs elsewhere, then returns there once
// the target is back.
func TestStatefulSetKeepsItsClaims(t *testing.T) {
	need(t)
	ctx := context.Background()
	targets := sb.ClusterNames()[1:]
	ns := enabledNamespace(t, "claims", targets...)
	src := kube(t, sandbox.SourceCluster)
	watchOneCopy(t, ns)
	claimedStatefulSet(t, ns, "db", 3)
	proxies := waitStatefulSetRunning(t, ns, "db", 3, 4*time.Minute)

	where := map[string]string{}     // pod -> cluster
	copies := map[string]types.UID{} // claim -> UID of its copy
	volumes := map[string]string{}   // claim -> the target's volume
	for _, p := range proxies {
		cluster := clusterOfNode(p.Spec.NodeName)
		where[p.Name] = cluster
		claim := "data-" + p.Name
		c := sourceClaim(t, ns, claim)
		assert.Equalf(t, cluster, c.Annotations[v1alpha1.AnnotationTarget], "claim %s: %s, want where %s runs", claim, v1alpha1.AnnotationTarget, p.Name)
		copies[claim], volumes[claim] = boundCopy(t, cluster, ns, claim, c.UID)
		// kubectl get pvc in the source tells the truth: Bound, the
		// copy's capacity, its volume there.
		held, err := kube(t, cluster).CoreV1().PersistentVolumeClaims(ns).Get(ctx, claim, metav1.GetOptions{})
		require.NoError(t, err)
		c = sourceClaim(t, ns, claim)
		want, got := held.Status.Capacity[corev1.ResourceStorage], c.Status.Capacity[corev1.ResourceStorage]
		assert.Falsef(t, c.Status.Phase != corev1.ClaimBound || got.Cmp(want) != 0 || c.Annotations[v1alpha1.AnnotationTargetVolume] != volumes[claim],
			"source claim %s: %s, capacity %s, %s=%q; want Bound, %s, %q as in %s",
			claim, c.Status.Phase, got.String(), v1alpha1.AnnotationTargetVolume, c.Annotations[v1alpha1.AnnotationTargetVolume], want.String(), volumes[claim], cluster)
		for _, other := range targets {
			if other == cluster {
				continue
			}
			_, err := kube(t, other).CoreV1().PersistentVolumeClaims(ns).Get(ctx, claim, metav1.GetOptions{})
			assert.Errorf(t, err, "claim %s has a copy in %s too; want one copy, in %s", claim, other, cluster)
		}
	}

	home := where["db-1"]
	for i := range 5 {
		old, err := src.CoreV1().Pods(ns).Get(ctx, "db-1", metav1.GetOptions{})
		require.NoError(t, err)
		require.NoError(t, src.CoreV1().Pods(ns).Delete(ctx, "db-1", metav1.DeleteOptions{}))
		p := waitRecreated(t, ns, "db-1", old.UID)
		require.Equalf(t, home, clusterOfNode(p.Spec.NodeName), "deletion %d: db-1's cluster, want where its claim is", i+1)
		uid, volume := boundCopy(t, home, ns, "data-db-1", sourceClaim(t, ns, "data-db-1").UID)
		require.Falsef(t, uid != copies["data-db-1"] || volume != volumes["data-db-1"], "deletion %d: db-1's claim in %s is %s on %s, want the same claim %s on %s", i+1, home, uid, volume, copies["data-db-1"], volumes["data-db-1"])
	}

	// Scaled down, its claims kept (the default retention); db-1's target
	// stopped; scaled up: db-1 waits for its target.
	scaleStatefulSet(t, ns, "db", 1)
	eventually(t, 2*time.Minute, "db-1 and db-2 gone", func(ctx context.Context) (bool, string) {
		list, err := src.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=db"})
		if err != nil {
			return false, err.Error()
		}
		return len(list.Items) == 1, fmt.Sprintf("%d pods", len(list.Items))
	})
	require.NoError(t, sb.Stop(ctx, home))
	restarted := false
	t.Cleanup(func() {
		if !restarted {
			_ = sb.Start(context.Background(), home)
		}
	})
	scaleStatefulSet(t, ns, "db", 3)
	waitElectedReason(t, ns, "db-1", "holds claim data-db-1")
	// It never runs elsewhere meanwhile.
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		p, err := src.CoreV1().Pods(ns).Get(ctx, "db-1", metav1.GetOptions{})
		if err == nil && p.Spec.NodeName != "" {
			require.FailNowf(t, "db-1 bound while its claim's cluster is down", "db-1 was bound to %s while %s, which holds its claim, is down", p.Spec.NodeName, home)
		}
		time.Sleep(time.Second)
	}
	require.NoError(t, sb.Start(ctx, home))
	restarted = true
	for _, p := range waitStatefulSetRunning(t, ns, "db", 3, 5*time.Minute) {
		assert.Equalf(t, where[p.Name], clusterOfNode(p.Spec.NodeName), "%s's cluster after the outage, want where its claim is", p.Name)
	}
	uid, _ := boundCopy(t, home, ns, "data-db-1", sourceClaim(t, ns, "data-db-1").UID)
	assert.Equalf(t, copies["data-db-1"], uid, "db-1's claim in %s after the outage, want the same claim", home)

	// Deleting a source claim deletes its copy (once no pod there uses
	// it); the others stay.
	scaleStatefulSet(t, ns, "db", 2)
	require.NoError(t, src.CoreV1().PersistentVolumeClaims(ns).Delete(ctx, "data-db-2", metav1.DeleteOptions{}))
	eventually(t, gcInterval+gcMinAge+2*time.Minute, "data-db-2's copy in "+where["db-2"]+" deleted", func(ctx context.Context) (bool, string) {
		c, err := kube(t, where["db-2"]).CoreV1().PersistentVolumeClaims(ns).Get(ctx, "data-db-2", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, ""
		}
		if err != nil {
			return false, err.Error()
		}
		return false, fmt.Sprintf("%s, deleting: %v", c.Status.Phase, c.DeletionTimestamp != nil)
	})
	uid, _ = boundCopy(t, where["db-0"], ns, "data-db-0", sourceClaim(t, ns, "data-db-0").UID)
	assert.Equalf(t, copies["data-db-0"], uid, "db-0's claim in %s, want it kept", where["db-0"])
}

// claimedStatefulSet makes a Parallel StatefulSet of n replicas, each with
// a 1Gi claim "data" of the default class mounted at /data, kept off the
// source cluster (its self target) so that every claim is copied.
func claimedStatefulSet(t *testing.T, ns, name string, n int32) {
	t.Helper()
	spec := podSpec("10m")
	spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "data", MountPath: "/data"}}
	spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
		NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{{
			Key: v1alpha1.LabelCluster, Operator: corev1.NodeSelectorOpNotIn, Values: []string{sandbox.SourceCluster},
		}}}},
	}}}
	sts := &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: appsv1.StatefulSetSpec{
			Replicas:            ptr.To(n),
			PodManagementPolicy: appsv1.ParallelPodManagement,
			Selector:            &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}},
			Template:            corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": name}}, Spec: spec},
			VolumeClaimTemplates: []corev1.PersistentVolumeClaim{{
				ObjectMeta: metav1.ObjectMeta{Name: "data"},
				Spec: corev1.PersistentVolumeClaimSpec{
					AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
					Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
				},
			}},
		},
	}
	_, err := kube(t, sandbox.SourceCluster).AppsV1().StatefulSets(ns).Create(context.Background(), sts, metav1.CreateOptions{})
	require.NoError(t, err)
}

func scaleStatefulSet(t *testing.T, ns, name string, n int32) {
	t.Helper()
	patch := fmt.Sprintf(`{"spec":{"replicas":%d}}`, n)
	_, err := kube(t, sandbox.SourceCluster).AppsV1().StatefulSets(ns).Patch(context.Background(), name, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	require.NoError(t, err)
}

func sourceClaim(t *testing.T, ns, name string) *corev1.PersistentVolumeClaim {
	t.Helper()
	c, err := kube(t, sandbox.SourceCluster).CoreV1().PersistentVolumeClaims(ns).Get(context.Background(), name, metav1.GetOptions{})
	require.NoError(t, err)
	return c
}

// boundCopy waits until the cluster's copy of a source claim (parent-uid
// its UID) is Bound, and returns the copy's UID and volume.
func boundCopy(t *testing.T, cluster, ns, name string, parent types.UID) (types.UID, string) {
	t.Helper()
	var uid types.UID
	var volume string
	eventually(t, time.Minute, fmt.Sprintf("claim %s/%s Bound in %s", ns, name, cluster), func(ctx context.Context) (bool, string) {
		c, err := kube(t, cluster).CoreV1().PersistentVolumeClaims(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		require.Equalf(t, string(parent), c.Labels[v1alpha1.LabelParentUID], "claim %s in %s: parent-uid, want the source claim's", name, cluster)
		uid, volume = c.UID, c.Spec.VolumeName
		return c.Status.Phase == corev1.ClaimBound, string(c.Status.Phase)
	})
	return uid, volume
}

// waitRecreated waits until the pod was made again (another UID) and is a
// Running proxy on a virtual node.
func waitRecreated(t *testing.T, ns, name string, old types.UID) *corev1.Pod {
	t.Helper()
	var p *corev1.Pod
	eventually(t, 2*time.Minute, name+" made again and Running", func(ctx context.Context) (bool, string) {
		got, err := kube(t, sandbox.SourceCluster).CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		p = got
		return got.UID != old && got.Status.Phase == corev1.PodRunning && got.Spec.NodeName != "", fmt.Sprintf("%s %s on %q", got.UID, got.Status.Phase, got.Spec.NodeName)
	})
	return p
}

// A target that names its storage classes otherwise: the ClusterTarget's
// storageClasses maps the source's class "fast" (which cluster-2 does not
// have) to its "standard"; the claim's copy there binds, and the pod runs.
// Without the mapping the copy asks for "fast" and the pod stays Pending
// (checked: with the mapping {"other":"standard"} this test times out).
func TestClaimStorageClassMapped(t *testing.T) {
	need(t)
	ctx := context.Background()
	target := sb.ClusterNames()[1]
	ns := enabledNamespace(t, "classes", target)
	src := ctrlClient(t, sandbox.SourceCluster)
	patch := func(classes string) {
		t.Helper()
		ct := &v1alpha1.ClusterTarget{ObjectMeta: metav1.ObjectMeta{Name: target}}
		body := fmt.Sprintf(`{"spec":{"storageClasses":%s}}`, classes)
		require.NoError(t, src.Patch(ctx, ct, client.RawPatch(types.MergePatchType, []byte(body))))
	}
	patch(`{"fast":"standard"}`)
	t.Cleanup(func() { patch("null") })

	claim := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "data"},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			StorageClassName: ptr.To("fast"),
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
		},
	}
	_, err := kube(t, sandbox.SourceCluster).CoreV1().PersistentVolumeClaims(ns).Create(ctx, claim, metav1.CreateOptions{})
	require.NoError(t, err)
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "db"}, Spec: podSpec("10m")}
	pod.Spec.NodeSelector = map[string]string{v1alpha1.LabelCluster: target}
	pod.Spec.Volumes = []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "data"}}}}
	pod.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "data", MountPath: "/data"}}
	_, err = kube(t, sandbox.SourceCluster).CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
	require.NoError(t, err)
	eventually(t, 2*time.Minute, "db Running in "+target, func(ctx context.Context) (bool, string) {
		p, err := kube(t, sandbox.SourceCluster).CoreV1().Pods(ns).Get(ctx, "db", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return p.Status.Phase == corev1.PodRunning, fmt.Sprintf("%s on %q", p.Status.Phase, p.Spec.NodeName)
	})
	boundCopy(t, target, ns, "data", sourceClaim(t, ns, "data").UID)
	held, err := kube(t, target).CoreV1().PersistentVolumeClaims(ns).Get(ctx, "data", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equalf(t, sandbox.StorageClassStandard, ptr.Deref(held.Spec.StorageClassName, ""), "the copy in %s: class (mapped from fast)", target)
	assert.Equal(t, corev1.ClaimBound, sourceClaim(t, ns, "data").Status.Phase, "the source claim's phase")
}

// Draining a virtual node does not evict a proxy whose claim is kept in
// that target (it would only wait there again, its data there): kubectl
// drain says so and how to evict it anyway; annotated
// evict-with-claims=true it is evicted, and its new pod waits for the
// cordoned target, then runs there again on the same claim once it is
// uncordoned.
func TestDrainKeepsAProxyWithItsClaim(t *testing.T) {
	need(t)
	ctx := context.Background()
	ns := enabledNamespace(t, "drain-claims", sb.ClusterNames()[1:]...)
	src := kube(t, sandbox.SourceCluster)
	claimedStatefulSet(t, ns, "kept", 1)
	db := waitStatefulSetRunning(t, ns, "kept", 1, 3*time.Minute)[0]
	node := db.Spec.NodeName
	out, err := kubectl(t, "--context", sandbox.SourceCluster, "cordon", node)
	require.NoErrorf(t, err, "cordon %s: %s", node, out)
	t.Cleanup(func() { _, _ = kubectl(t, "--context", sandbox.SourceCluster, "uncordon", node) })

	out, err = kubectl(t, "--context", sandbox.SourceCluster, "drain", node, "--ignore-daemonsets", "--pod-selector=app=kept", "--timeout=1m")
	require.Falsef(t, err == nil || !strings.Contains(out, "keeps claim data-kept-0") || !strings.Contains(out, v1alpha1.AnnotationEvictWithClaims), "kubectl drain %s: %v\n%s\nwant it refused for kept-0, naming its claim and the annotation", node, err, out)
	kept, err := src.CoreV1().Pods(ns).Get(ctx, "kept-0", metav1.GetOptions{})
	require.Falsef(t, err != nil || kept.UID != db.UID || kept.DeletionTimestamp != nil, "kept-0 after the refused drain: %v (UID %s, deleting %v), want the same pod running", err, kept.UID, kept.DeletionTimestamp != nil)

	out, err = kubectl(t, "--context", sandbox.SourceCluster, "-n", ns, "annotate", "pod", "kept-0", v1alpha1.AnnotationEvictWithClaims+"=true")
	require.NoErrorf(t, err, "annotate: %s", out)
	out, err = kubectl(t, "--context", sandbox.SourceCluster, "drain", node, "--ignore-daemonsets", "--pod-selector=app=kept", "--timeout=2m")
	require.NoErrorf(t, err, "kubectl drain %s with the pod annotated\n%s", node, out)
	waitElectedReason(t, ns, "kept-0", "holds claim data-kept-0")
	out, err = kubectl(t, "--context", sandbox.SourceCluster, "uncordon", node)
	require.NoErrorf(t, err, "uncordon: %s", out)
	p := waitRecreated(t, ns, "kept-0", db.UID)
	assert.Equal(t, node, p.Spec.NodeName, "where kept-0 came back, want where its claim is")
}
