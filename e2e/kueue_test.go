package e2e

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
	"github.com/fleetlet/fleetlet/pkg/sandbox"
)

// kueueGate is the scheduling gate Kueue puts on the plain pods it queues.
const kueueGate = "kueue.x-k8s.io/admission"

// kueueQueues creates, for a namespace, one ResourceFlavor per cluster
// (node label multicluster.fleetlet.io/cluster, a cluster-level label)
// with the CPU quota given, a ClusterQueue over them in that order and a
// LocalQueue "q", and removes the cluster-scoped ones after the test.
func kueueQueues(t *testing.T, ns string, quota map[string]string, order ...string) {
	t.Helper()
	var flavors []string
	docs := []string{}
	for _, cluster := range order {
		name := ns + "-" + cluster
		docs = append(docs, fmt.Sprintf(`apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: %s}
spec:
  nodeLabels: {%s: %s}`, name, v1alpha1.LabelCluster, cluster))
		flavors = append(flavors, fmt.Sprintf(`    - name: %s
      resources:
      - {name: cpu, nominalQuota: "%s"}
      - {name: memory, nominalQuota: 64Gi}`, name, quota[cluster]))
	}
	docs = append(docs, fmt.Sprintf(`apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: %s}
spec:
  namespaceSelector:
    matchLabels: {kubernetes.io/metadata.name: %s}
  queueingStrategy: BestEffortFIFO
  resourceGroups:
  - coveredResources: [cpu, memory]
    flavors:
%s`, ns, ns, strings.Join(flavors, "\n")), fmt.Sprintf(`apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {name: q, namespace: %s}
spec: {clusterQueue: %s}`, ns, ns))
	createObjects(t, docs...)
}

// createObjects creates the objects of YAML documents in the source and
// deletes them after the test.
func createObjects(t *testing.T, docs ...string) {
	t.Helper()
	c := ctrlClient(t, sandbox.SourceCluster)
	var created []*unstructured.Unstructured
	for _, d := range docs {
		u := &unstructured.Unstructured{}
		require.NoError(t, yaml.Unmarshal([]byte(d), &u.Object))
		require.NoErrorf(t, c.Create(context.Background(), u), "creating %s %s", u.GetKind(), u.GetName())
		created = append(created, u)
	}
	t.Cleanup(func() {
		for i := len(created) - 1; i >= 0; i-- {
			_ = c.Delete(context.Background(), created[i])
		}
	})
}

// kueueNamespace is an enabled namespace whose Jobs and pods Kueue queues.
func kueueNamespace(t *testing.T, prefix string, targets ...string) string {
	t.Helper()
	ns := enabledNamespace(t, prefix, targets...)
	patch := fmt.Appendf(nil, `{"metadata":{"labels":{%q:"true"}}}`, sandbox.KueueNamespaceLabel)
	require.NoError(t, ctrlClient(t, sandbox.SourceCluster).Patch(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}},
		client.RawPatch("application/merge-patch+json", patch)))
	return ns
}

// queuedJob creates a Job of n pods of cpu each in Kueue's queue q; each
// pod runs for `runs`.
func queuedJob(t *testing.T, ns, name string, n int32, cpu string, runs time.Duration) {
	t.Helper()
	spec := podSpec(cpu)
	spec.RestartPolicy = corev1.RestartPolicyNever
	job := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{"kueue.x-k8s.io/queue-name": "q"}},
		Spec: batchv1.JobSpec{
			Completions:  ptr.To(n),
			Parallelism:  ptr.To(n),
			BackoffLimit: ptr.To[int32](0),
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{sandbox.AnnotationCompleteAfter: runs.String()}},
				Spec:       spec,
			},
		},
	}
	_, err := kube(t, sandbox.SourceCluster).BatchV1().Jobs(ns).Create(context.Background(), job, metav1.CreateOptions{})
	require.NoError(t, err)
}

// chaperonsOf counts, per cluster, the PodChaperons in ns whose candidate
// carries label=value.
func chaperonsOf(t *testing.T, ctx context.Context, ns, label, value string) map[string]int {
	t.Helper()
	out := map[string]int{}
	for _, c := range sb.ClusterNames() {
		var pcs v1alpha1.PodChaperonList
		require.NoError(t, ctrlClient(t, c).List(ctx, &pcs, client.InNamespace(ns)))
		for _, pc := range pcs.Items {
			l := pc.Spec.Template.Metadata.Labels
			if l[label] == value || l[selfKey(label)] == value {
				out[c]++
			}
		}
	}
	return out
}

func selfKey(k string) string {
	return v1alpha1.DelegateLabelPrefix + strings.ReplaceAll(k, "/", ".")
}

// runningIn counts the Running proxies selected by selector, per cluster.
func runningIn(t *testing.T, ctx context.Context, ns, selector string) map[string]int {
	t.Helper()
	pods, err := kube(t, sandbox.SourceCluster).CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
	require.NoError(t, err)
	out := map[string]int{}
	for _, p := range pods.Items {
		if p.Status.Phase == corev1.PodRunning && p.Spec.NodeName != "" {
			out[clusterOfNode(p.Spec.NodeName)]++
		}
	}
	return out
}

func gateNames(p *corev1.Pod) []string {
	var out []string
	for _, g := range p.Spec.SchedulingGates {
		out = append(out, g.Name)
	}
	sort.Strings(out)
	return out
}

// Kueue in the source, with one flavor per cluster (node label
// multicluster.fleetlet.io/cluster): a Job Kueue admits runs entirely in
// its flavor's cluster; a Job without quota stays suspended, with no
// chaperon in any cluster, until the first finishes, and then runs in its
// flavor's cluster; a plain pod held by Kueue's gate gets no chaperon
// before its admission and runs in its flavor's cluster after; one that fits the other flavor runs in the other
// cluster.
func TestKueueFlavorsAreClusters(t *testing.T) {
	need(t)
	names := sb.ClusterNames()
	two, three := names[1], names[2]
	ns := kueueNamespace(t, "kueue", two, three)
	ctx := context.Background()
	src := kube(t, sandbox.SourceCluster)
	kueueQueues(t, ns, map[string]string{two: "9", three: "2"}, two, three)

	// First: 6 pods of 1.5 CPUs, the whole of cluster-2's quota.
	queuedJob(t, ns, "first", 6, "1500m", 40*time.Second)
	took := eventually(t, 2*time.Minute, "the first Job's 6 pods Running", func(ctx context.Context) (bool, string) {
		got := runningIn(t, ctx, ns, "batch.kubernetes.io/job-name=first")
		return got[two] == 6, fmt.Sprintf("running by cluster %v", got)
	})
	t.Logf("the first Job ran 6 pods in %s, %s after its creation", two, took.Round(time.Second))
	firstChaperons := chaperonsOf(t, ctx, ns, "batch.kubernetes.io/job-name", "first")
	assert.Falsef(t, firstChaperons[two] != 6 || len(firstChaperons) != 1, "chaperons of the first Job by cluster %v, want 6 in %s only", firstChaperons, two)

	// Second: 6 pods of one CPU; no flavor has 6 CPUs left. A plain pod of
	// 3 CPUs fits none either.
	queuedJob(t, ns, "second", 6, "1", 5*time.Second)
	plain := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "plain", Namespace: ns, Labels: map[string]string{"kueue.x-k8s.io/queue-name": "q", "app": "plain"}},
		Spec:       podSpec("3"),
	}
	_, err := src.CoreV1().Pods(ns).Create(ctx, plain, metav1.CreateOptions{})
	require.NoError(t, err)
	// A plain pod of one CPU fits cluster-3's quota: admitted at once
	// (the queue is BestEffortFIFO), it runs there.
	small := plain.DeepCopy()
	small.Name, small.Labels["app"] = "small", "small"
	small.Spec.Containers[0].Resources.Requests[corev1.ResourceCPU] = resource.MustParse("1")
	_, err = src.CoreV1().Pods(ns).Create(ctx, small, metav1.CreateOptions{})
	require.NoError(t, err)
	// Held: for 10 s, the second Job stays suspended with no pod, and the
	// plain pod keeps Kueue's gate and ours, no election record and no
	// chaperon anywhere.
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		j, err := src.BatchV1().Jobs(ns).Get(ctx, "second", metav1.GetOptions{})
		require.NoError(t, err)
		require.Falsef(t, !ptr.Deref(j.Spec.Suspend, false) || j.Status.Active > 0, "the second Job runs without quota: suspend %v, active %d", ptr.Deref(j.Spec.Suspend, false), j.Status.Active)
		p, err := src.CoreV1().Pods(ns).Get(ctx, "plain", metav1.GetOptions{})
		require.NoError(t, err)
		g := gateNames(p)
		require.Falsef(t, !slices.Contains(g, kueueGate) || !slices.Contains(g, v1alpha1.SchedulingGateElection), "the plain pod's gates %v, want Kueue's and fleetlet's", g)
		c := electedCondition(p)
		require.Nilf(t, c, "the plain pod, held by Kueue, has an election record: %+v", c)
		require.Empty(t, chaperonsOf(t, ctx, ns, "app", "plain"), "chaperons of the plain pod held by Kueue")
		require.Empty(t, chaperonsOf(t, ctx, ns, "batch.kubernetes.io/job-name", "second"), "chaperons of the second Job without quota")
		time.Sleep(time.Second)
	}

	eventually(t, time.Minute, "the small plain pod Running in "+three, func(ctx context.Context) (bool, string) {
		p, err := src.CoreV1().Pods(ns).Get(ctx, "small", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return p.Status.Phase == corev1.PodRunning && clusterOfNode(p.Spec.NodeName) == three,
			fmt.Sprintf("phase %s on %q, gates %v, nodeSelector %v", p.Status.Phase, p.Spec.NodeName, gateNames(p), p.Spec.NodeSelector)
	})

	// The first finishes: the second and the plain pod (6 + 3 CPUs) are
	// admitted to cluster-2 and run there.
	took = eventually(t, 3*time.Minute, "the second Job's 6 pods Running in "+two, func(ctx context.Context) (bool, string) {
		got := runningIn(t, ctx, ns, "batch.kubernetes.io/job-name=second")
		return got[two] == 6, fmt.Sprintf("running by cluster %v", got)
	})
	t.Logf("the second Job ran 6 pods in %s %s after the hold", two, took.Round(time.Second))
	secondChaperons := chaperonsOf(t, ctx, ns, "batch.kubernetes.io/job-name", "second")
	assert.Falsef(t, secondChaperons[two] != 6 || len(secondChaperons) != 1, "chaperons of the second Job by cluster %v, want 6 in %s only", secondChaperons, two)
	took = eventually(t, time.Minute, "the plain pod Running in "+two, func(ctx context.Context) (bool, string) {
		p, err := src.CoreV1().Pods(ns).Get(ctx, "plain", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return p.Status.Phase == corev1.PodRunning && clusterOfNode(p.Spec.NodeName) == two,
			fmt.Sprintf("phase %s on %q, gates %v, nodeSelector %v", p.Status.Phase, p.Spec.NodeName, gateNames(p), p.Spec.NodeSelector)
	})
	t.Logf("the plain pod ran in %s %s after the second Job did", two, took.Round(time.Second))

	// A flavor with a node-level label, on the plain-pod path: Kueue
	// writes it onto the proxy, where it can never be taken off, and no
	// virtual node carries it: Elected=False says so, and nothing is
	// pinned or made in any cluster.
	createObjects(t, fmt.Sprintf(`apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: %[1]s-spot}
spec:
  nodeLabels: {instance-type: spot}`, ns), fmt.Sprintf(`apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: %[1]s-spot}
spec:
  namespaceSelector:
    matchLabels: {kubernetes.io/metadata.name: %[1]s}
  resourceGroups:
  - coveredResources: [cpu, memory]
    flavors:
    - name: %[1]s-spot
      resources:
      - {name: cpu, nominalQuota: "4"}
      - {name: memory, nominalQuota: 64Gi}`, ns), fmt.Sprintf(`apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {name: spot, namespace: %[1]s}
spec: {clusterQueue: %[1]s-spot}`, ns))
	spot := small.DeepCopy()
	spot.Name, spot.Labels["app"], spot.Labels["kueue.x-k8s.io/queue-name"] = "spot", "spot", "spot"
	_, err = src.CoreV1().Pods(ns).Create(ctx, spot, metav1.CreateOptions{})
	require.NoError(t, err)
	eventually(t, time.Minute, "Elected=False naming the node-level flavor label", func(ctx context.Context) (bool, string) {
		p, err := src.CoreV1().Pods(ns).Get(ctx, "spot", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		c := electedCondition(p)
		return c != nil && c.Status == corev1.ConditionFalse && strings.Contains(c.Message, "instance-type=spot") && strings.Contains(c.Message, "node-level"),
			fmt.Sprintf("gates %v, nodeSelector %v, elected %+v", gateNames(p), p.Spec.NodeSelector, c)
	})
	p, err := src.CoreV1().Pods(ns).Get(ctx, "spot", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Falsef(t, p.Spec.NodeSelector[corev1.LabelHostname] != "" || p.Spec.NodeName != "", "the proxy with a node-level flavor label was pinned or bound: nodeSelector %v, node %q", p.Spec.NodeSelector, p.Spec.NodeName)
	assert.Empty(t, chaperonsOf(t, ctx, ns, "app", "spot"), "chaperons of the proxy with a node-level flavor label")
}
