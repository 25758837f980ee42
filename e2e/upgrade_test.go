package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/fleetlet/fleetlet/pkg/sandbox"
)

// UpgradeFromEnv names the folder of the earlier release the upgrade
// scenario starts from: its fleetlet binary and packaged chart, as `make
// upgrade-from` builds them (bin/upgrade-from).
const UpgradeFromEnv = "FLEETLET_E2E_UPGRADE_FROM"

// An operator upgrades fleetlet under load. The sandbox is taken back to
// an earlier release (helm upgrade to its chart, its binaries: a rollback,
// which must be as safe), 30 proxies of a Deployment, a two-replica
// StatefulSet and a Job run there, and fleetlet is upgraded to this tree,
// cluster after cluster, while the Job runs: no proxy is replaced, no
// delegate restarted, doubled or lost, the Job completes, and new work is
// placed after. A pod never runs twice, sampled every half second
// throughout.
func TestUpgradeUnderLoad(t *testing.T) {
	need(t)
	from := os.Getenv(UpgradeFromEnv)
	require.NotEmptyf(t, from, "%s names no earlier release: run `make upgrade-from` and set it to bin/upgrade-from", UpgradeFromEnv)
	ctx := context.Background()
	current := sb.FleetletBinDir()
	t.Cleanup(func() {
		if sb.FleetletBinDir() != current {
			assert.NoError(t, sb.InstallFleetlet(context.Background(), current), "putting this tree's fleetlet back")
		}
	})
	install(t, from)

	ns := enabledNamespace(t, "upgrade", sb.ClusterNames()[1:]...)
	watchOneCopy(t, ns)
	deployment(t, ns, "web", 30)
	statefulSet(t, ns, "db", 2)
	web := waitDeploymentRunning(t, ns, "web", 30, 3*time.Minute)
	db := waitStatefulSetRunning(t, ns, "db", 2, 2*time.Minute)
	before := delegatesByProxy(t, ctx, append(web, db...))
	// Two waves of two pods, 45 s each: the first runs through the
	// upgrade, the second starts after it.
	job(t, ns, "batch", 4, 2, "45s")
	waitJobActive(t, ns, "batch", 2)

	install(t, current)
	after := waitDeploymentRunning(t, ns, "web", 30, 2*time.Minute)
	after = append(after, waitStatefulSetRunning(t, ns, "db", 2, time.Minute)...)
	now := delegatesByProxy(t, ctx, after)
	for proxy, d := range now {
		if was, ok := before[proxy]; assert.Truef(t, ok, "proxy %s is new after the upgrade: one was replaced", d.proxy) {
			assert.Equalf(t, was.delegate, d.delegate, "proxy %s: delegate %s before the upgrade, %s after", d.proxy, was.describe(), d.describe())
		}
	}
	waitJobComplete(t, ns, "batch", 4, 3*time.Minute)

	// New work is placed by the upgraded release.
	scale(t, ns, "web", 33)
	waitDeploymentRunning(t, ns, "web", 33, 2*time.Minute)
}

// install installs the release in dir in every cluster and checks that the
// chart the clusters run is that release's.
func install(t *testing.T, dir string) {
	t.Helper()
	chart, err := sandbox.PackagedChart(dir)
	require.NoError(t, err)
	want := strings.TrimSuffix(strings.TrimPrefix(filepath.Base(chart), "fleetlet-"), ".tgz")
	began := time.Now()
	require.NoError(t, sb.InstallFleetlet(context.Background(), dir))
	for _, c := range sb.ClusterNames() {
		sas, err := kube(t, c).CoreV1().ServiceAccounts(sandbox.FleetletNamespace).List(context.Background(),
			metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=manager"})
		require.NoError(t, err)
		require.Falsef(t, len(sas.Items) != 1 || sas.Items[0].Labels["app.kubernetes.io/version"] != want, "%s: the manager's ServiceAccount should carry version %s: %v", c, want, sas.Items)
		waitVirtualNodeReady(t, c, "after installing "+want, 2*time.Minute)
	}
	t.Logf("fleetlet %s installed in every cluster in %s", want, time.Since(began).Round(100*time.Millisecond))
}

// statefulSet creates a StatefulSet of n small replicas in ns.
func statefulSet(t *testing.T, ns, name string, n int32) {
	t.Helper()
	sts := &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: appsv1.StatefulSetSpec{
			Replicas: ptr.To(n),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": name}}, Spec: podSpec("100m")},
		},
	}
	_, err := kube(t, sandbox.SourceCluster).AppsV1().StatefulSets(ns).Create(context.Background(), sts, metav1.CreateOptions{})
	require.NoError(t, err)
}

// waitStatefulSetRunning waits until the StatefulSet has n ready replicas,
// each a Running proxy on a virtual node, and returns the proxies.
func waitStatefulSetRunning(t *testing.T, ns, name string, n int, timeout time.Duration) []corev1.Pod {
	t.Helper()
	src := kube(t, sandbox.SourceCluster)
	var proxies []corev1.Pod
	eventually(t, timeout, fmt.Sprintf("statefulset %s: %d Running and Ready proxies", name, n), func(ctx context.Context) (bool, string) {
		sts, err := src.AppsV1().StatefulSets(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		list, err := src.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=" + name})
		if err != nil {
			return false, err.Error()
		}
		proxies = proxies[:0]
		for _, p := range list.Items {
			if p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning && podReady(&p) && strings.HasPrefix(p.Spec.NodeName, "fleetlet-") {
				proxies = append(proxies, p)
			}
		}
		return len(proxies) == n && sts.Status.ReadyReplicas == int32(n),
			fmt.Sprintf("%d of %d proxies Running and Ready; ready replicas %d", len(proxies), len(list.Items), sts.Status.ReadyReplicas)
	})
	return proxies
}

// job creates a Job of small pods that each run for runFor.
func job(t *testing.T, ns, name string, completions, parallelism int32, runFor string) {
	t.Helper()
	spec := podSpec("100m")
	spec.RestartPolicy = corev1.RestartPolicyNever
	j := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: batchv1.JobSpec{
			Completions:  ptr.To(completions),
			Parallelism:  ptr.To(parallelism),
			BackoffLimit: ptr.To[int32](0),
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{sandbox.AnnotationCompleteAfter: runFor}},
				Spec:       spec,
			},
		},
	}
	_, err := kube(t, sandbox.SourceCluster).BatchV1().Jobs(ns).Create(context.Background(), j, metav1.CreateOptions{})
	require.NoError(t, err)
}

// waitJobActive waits until n of the Job's proxies run, none finished yet.
func waitJobActive(t *testing.T, ns, name string, n int) {
	t.Helper()
	src := kube(t, sandbox.SourceCluster)
	eventually(t, 2*time.Minute, fmt.Sprintf("job %s: %d proxies running", name, n), func(ctx context.Context) (bool, string) {
		list, err := src.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "batch.kubernetes.io/job-name=" + name})
		if err != nil {
			return false, err.Error()
		}
		running, done := 0, 0
		for _, p := range list.Items {
			switch p.Status.Phase {
			case corev1.PodRunning:
				running++
			case corev1.PodSucceeded, corev1.PodFailed:
				done++
			}
		}
		require.Zerof(t, done, "job %s: %d pods finished before the upgrade: the scenario needs it mid-run", name, done)
		return running == n, fmt.Sprintf("%d of %d running", running, len(list.Items))
	})
}

// waitJobComplete waits until the Job is Complete with every completion
// succeeded and no pod failed.
func waitJobComplete(t *testing.T, ns, name string, completions int32, timeout time.Duration) {
	t.Helper()
	src := kube(t, sandbox.SourceCluster)
	eventually(t, timeout, "job "+name+" to complete", func(ctx context.Context) (bool, string) {
		j, err := src.BatchV1().Jobs(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		for _, c := range j.Status.Conditions {
			require.Falsef(t, c.Type == batchv1.JobFailed && c.Status == corev1.ConditionTrue, "job %s failed: %s", name, c.Message)
			if c.Type == batchv1.JobComplete && c.Status == corev1.ConditionTrue {
				return j.Status.Succeeded == completions && j.Status.Failed == 0,
					fmt.Sprintf("complete with %d succeeded, %d failed", j.Status.Succeeded, j.Status.Failed)
			}
		}
		return false, fmt.Sprintf("succeeded %d, active %d, failed %d", j.Status.Succeeded, j.Status.Active, j.Status.Failed)
	})
}

// scale sets a Deployment's replicas.
func scale(t *testing.T, ns, name string, n int32) {
	t.Helper()
	patch := fmt.Sprintf(`{"spec":{"replicas":%d}}`, n)
	_, err := kube(t, sandbox.SourceCluster).AppsV1().Deployments(ns).Patch(context.Background(), name, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	require.NoError(t, err)
}

// standIn is a proxy's delegate: the pod in the cluster of its node.
type standIn struct {
	proxy, cluster, name string
	delegate             types.UID
}

func (s standIn) describe() string {
	return fmt.Sprintf("%s in %s (%s)", s.name, s.cluster, s.delegate)
}

// delegatesByProxy finds each proxy's delegate, by proxy UID; a proxy
// without exactly one pod in its node's cluster fails the scenario.
func delegatesByProxy(t *testing.T, ctx context.Context, proxies []corev1.Pod) map[types.UID]standIn {
	t.Helper()
	out := map[types.UID]standIn{}
	for i := range proxies {
		p := &proxies[i]
		cluster := clusterOfNode(p.Spec.NodeName)
		ds := delegatesOf(t, ctx, p)[cluster]
		require.Lenf(t, ds, 1, "proxy %s on %s: %d pods there, want its delegate", p.Name, p.Spec.NodeName, len(ds))
		out[p.UID] = standIn{proxy: p.Name, cluster: cluster, name: ds[0].Name, delegate: ds[0].UID}
	}
	return out
}
