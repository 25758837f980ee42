package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
	"github.com/fleetlet/fleetlet/pkg/sandbox"
)

// gangCPU is a gang member's request: two fit on a 32-CPU node.
const gangCPU = "11"

// A 4-pod gang (group label, 4 members at least) lands wholly in one
// cluster, 20 times in a row, although cluster-2 and cluster-3 can each
// hold only 3 of its 4 members (other tenants' pods fill the rest), and a
// pod-by-pod election would split it there.
func TestGangLandsWholeInOneCluster(t *testing.T) {
	need(t)
	ctx := context.Background()
	names := sb.ClusterNames()
	ns := gangNamespace(t, "gang", 2)
	src := kube(t, sandbox.SourceCluster)
	const reps, size = 20, 4
	start := time.Now()
	for rep := range reps {
		group := fmt.Sprintf("train-%d", rep)
		for i := range size {
			gangMember(t, ns, fmt.Sprintf("%s-%d", group, i), group, size)
		}
		var where map[string]int
		eventually(t, 2*time.Minute, group+" to run", func(ctx context.Context) (bool, string) {
			pods, err := src.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: v1alpha1.LabelGroup + "=" + group})
			if err != nil {
				return false, err.Error()
			}
			where = map[string]int{}
			running := 0
			for _, p := range pods.Items {
				if p.Spec.NodeName != "" {
					where[clusterOfNode(p.Spec.NodeName)]++
				}
				if p.Status.Phase == corev1.PodRunning {
					running++
				}
			}
			return running == size, fmt.Sprintf("%d of %d running; by cluster %v", running, size, where)
		})
		require.Falsef(t, len(where) != 1 || where[names[0]] != size, "repetition %d: group %s by cluster %v, want all %d in %s, the one cluster with room for them all", rep, group, where, size, names[0])
		oneDelegateEach(t, ctx, ns, v1alpha1.LabelGroup+"="+group)
		require.NoError(t, src.CoreV1().Pods(ns).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)},
			metav1.ListOptions{LabelSelector: v1alpha1.LabelGroup + "=" + group}))
		waitForRoom(t, names[0], 2)
	}
	t.Logf("%d gangs of %d, each whole in %s, in %s", reps, size, names[0], time.Since(start).Round(time.Second))

	// A Job of 4 (parallelism = completions = 4) as a group.
	spec := podSpec(gangCPU)
	spec.RestartPolicy = corev1.RestartPolicyNever
	job := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: "train-job", Namespace: ns},
		Spec: batchv1.JobSpec{Parallelism: ptr.To[int32](size), Completions: ptr.To[int32](size), Template: corev1.PodTemplateSpec{
			ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{v1alpha1.LabelGroup: "train-job"},
				Annotations: map[string]string{v1alpha1.AnnotationGroupMinMembers: fmt.Sprint(size)}},
			Spec: spec,
		}},
	}
	_, err := src.BatchV1().Jobs(ns).Create(ctx, job, metav1.CreateOptions{})
	require.NoError(t, err)
	waitJobComplete(t, ns, "train-job", size, 2*time.Minute)
	pods, err := src.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "job-name=train-job"})
	require.NoError(t, err)
	where := map[string]int{}
	for _, p := range pods.Items {
		where[clusterOfNode(p.Spec.NodeName)]++
	}
	assert.Falsef(t, len(where) != 1 || where[names[0]] != size, "the Job's pods by cluster %v, want all %d in %s", where, size, names[0])
}

// A gang that fits nowhere (7 members at least, 6 places in the largest
// cluster) stays gated, saying why; after the group timeout its members
// give up their reservations, so that no reserved candidate is left
// behind to starve other pods.
func TestGangThatFitsNowhereLetsGo(t *testing.T) {
	need(t)
	ctx := context.Background()
	restartSourceManager(t, "--group-timeout="+groupTimeout.String())
	t.Cleanup(func() { restartSourceManager(t) })
	names := sb.ClusterNames()
	ns := gangNamespace(t, "gang-none", 3)
	src := kube(t, sandbox.SourceCluster)
	const size = 7
	for i := range size {
		gangMember(t, ns, fmt.Sprintf("big-%d", i), "big", size)
	}
	// Some member's reason (one reserved nowhere says only that).
	said := func(ctx context.Context, what string) (bool, string) {
		pods, err := src.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		var last string
		for _, p := range pods.Items {
			if c := electedCondition(&p); c != nil {
				if c.Reason == "WaitingForGroup" && strings.Contains(c.Message, what) {
					return true, ""
				}
				last = p.Name + ": " + c.Reason + ": " + c.Message
			}
		}
		return false, last
	}
	eventually(t, time.Minute, "the members to wait for their group", func(ctx context.Context) (bool, string) {
		return said(ctx, "group big needs 7 members reserved in one cluster")
	})
	eventually(t, groupTimeout+time.Minute, "the group to time out and hold no reservation", func(ctx context.Context) (bool, string) {
		if ok, why := said(ctx, "gave up their reservations"); !ok {
			return false, why
		}
		for _, c := range names {
			if held := reservedChaperons(t, ctx, c, ns); len(held) > 0 {
				return false, fmt.Sprintf("%s still reserves %v", c, held)
			}
		}
		return true, ""
	})
	pods, err := src.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	for _, p := range pods.Items {
		if p.Labels[v1alpha1.LabelParentUID] != "" {
			continue // a candidate in the source as its own target
		}
		assert.Falsef(t, p.Spec.NodeName != "" || len(p.Spec.SchedulingGates) == 0, "%s was let go: node %q, gates %v", p.Name, p.Spec.NodeName, p.Spec.SchedulingGates)
	}
}

// gangNamespace is an enabled namespace where cluster-2 and cluster-3 have
// room for three gang members each and the source, once earlier scenarios'
// pods are gone, for two on each of that many of its nodes.
func gangNamespace(t *testing.T, prefix string, nodes int) string {
	t.Helper()
	names := sb.ClusterNames()
	for _, c := range names[1:] {
		holdRoomForThree(t, c)
	}
	waitForRoom(t, names[0], nodes)
	return enabledNamespace(t, prefix, names[1:]...)
}

// oneDelegateEach checks that every selected proxy has one live delegate,
// in its elected cluster only: losers never bind.
func oneDelegateEach(t *testing.T, ctx context.Context, ns, selector string) {
	t.Helper()
	proxies, err := kube(t, sandbox.SourceCluster).CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
	require.NoError(t, err)
	for i := range proxies.Items {
		p := &proxies.Items[i]
		if p.Labels[v1alpha1.LabelParentUID] != "" {
			continue
		}
		var bound []string
		for c, pods := range delegatesOf(t, ctx, p) {
			for _, d := range pods {
				if d.Spec.NodeName != "" {
					bound = append(bound, c+"/"+d.Name)
				}
			}
		}
		assert.Falsef(t, len(bound) != 1 || !strings.HasPrefix(bound[0], clusterOfNode(p.Spec.NodeName)+"/"), "proxy %s on %s has bound delegates %v, want one, there", p.Name, p.Spec.NodeName, bound)
	}
}

// restartSourceManager stops the source's manager (it gives up its lease)
// and starts it again with extra arguments, until the next restart.
func restartSourceManager(t *testing.T, args ...string) {
	t.Helper()
	ctx := context.Background()
	require.NoError(t, sb.StopComponent(ctx, sandbox.SourceCluster, sandbox.ComponentManager))
	require.NoError(t, sb.StartComponentWith(ctx, sandbox.SourceCluster, sandbox.ComponentManager, args...))
	waitLeading(t, sandbox.ComponentManager)
}

func gangMember(t *testing.T, ns, name, group string, min int) {
	t.Helper()
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns,
			Labels:      map[string]string{v1alpha1.LabelGroup: group},
			Annotations: map[string]string{v1alpha1.AnnotationGroupMinMembers: fmt.Sprint(min)}},
		Spec: podSpec(gangCPU),
	}
	_, err := kube(t, sandbox.SourceCluster).CoreV1().Pods(ns).Create(context.Background(), p, metav1.CreateOptions{})
	require.NoError(t, err)
}

// holdRoomForThree leaves a cluster room for three gang members only:
// another tenant's pods take one place on node 2 and both on node 3.
func holdRoomForThree(t *testing.T, cluster string) {
	t.Helper()
	ctx := context.Background()
	k := kube(t, cluster)
	ns := fmt.Sprintf("other-tenant-%d", time.Now().UnixNano()%1_000_000)
	_, err := k.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = k.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{}) })
	for node, cpu := range map[int]string{2: gangCPU, 3: "22"} {
		spec := podSpec(cpu)
		spec.NodeName = sandbox.NodeName(cluster, node)
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("filler-%d", node), Namespace: ns}, Spec: spec}
		_, err := k.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
		require.Falsef(t, err != nil && !apierrors.IsAlreadyExists(err), "creating %s: %v", p.Name, err)
	}
}

// waitForRoom waits until n nodes of a cluster have room for two gang
// members (earlier scenarios' pods gone).
func waitForRoom(t *testing.T, cluster string, n int) {
	t.Helper()
	two := resource.MustParse(gangCPU)
	two.Add(resource.MustParse(gangCPU))
	eventually(t, 2*time.Minute, fmt.Sprintf("%d nodes of %s with room for two gang members", n, cluster), func(ctx context.Context) (bool, string) {
		room := nodesWithRoom(t, ctx, cluster, two)
		return len(room) >= n, fmt.Sprintf("nodes with room: %v", room)
	})
}

// reservedChaperons names a namespace's chaperons that hold a reservation
// in a cluster.
func reservedChaperons(t *testing.T, ctx context.Context, cluster, ns string) []string {
	t.Helper()
	var list v1alpha1.PodChaperonList
	require.NoError(t, ctrlClient(t, cluster).List(ctx, &list, client.InNamespace(ns)))
	var out []string
	for _, pc := range list.Items {
		if pc.Annotations[v1alpha1.AnnotationReserved] != "" && pc.DeletionTimestamp == nil {
			out = append(out, pc.Name)
		}
	}
	return out
}
