package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
	"github.com/fleetlet/fleetlet/pkg/sandbox"
)

// labelNamespace turns one of the furnished clusters' mutators on for a
// namespace there.
func labelNamespace(t *testing.T, cluster, ns, label string) {
	t.Helper()
	patch := fmt.Appendf(nil, `{"metadata":{"labels":{%q:"true"}}}`, label)
	_, err := kube(t, cluster).CoreV1().Namespaces().Patch(context.Background(), ns, types.MergePatchType, patch, metav1.PatchOptions{})
	require.NoError(t, err)
}

// Targets run other mutating admission than fleetlet's. One that rewrites
// every pod's schedulerName (as batch schedulers' admission does) would
// have the target's own scheduler place fleetlet's candidates, which would
// then run before the election, in every target: the target's
// fleetlet-delegate-pods policy refuses them instead, the proxies are
// elected where the candidate scheduler answers, a pod that may only run in
// that target gets Elected=False saying why, and no candidate of the
// namespace ever exists there. A sidecar injector in another target adds
// its container to the delegates, as it would to any pod there, while the
// proxies keep their own containers.
func TestOtherMutatingAdmissionInTargets(t *testing.T) {
	need(t)
	ctx := context.Background()
	ns := enabledNamespace(t, "mutators", "cluster-2", "cluster-3")
	labelNamespace(t, "cluster-3", ns, sandbox.LabelRewriteScheduler)
	labelNamespace(t, "cluster-2", ns, sandbox.LabelInjectSidecar)

	deployment(t, ns, "web", 3, notSource("web"))
	for _, p := range waitDeploymentRunning(t, ns, "web", 3, 2*time.Minute) {
		assert.Equalf(t, "fleetlet-cluster-2", p.Spec.NodeName, "%s runs on %s: only cluster-2 schedules its candidates", p.Name, p.Spec.NodeName)
		assert.Lenf(t, p.Spec.Containers, 1, "proxy %s has containers %v: the sidecar was injected in the target, not here", p.Name, containerNames(p.Spec.Containers))
	}
	delegates, err := kube(t, "cluster-2").CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: v1alpha1.LabelParentCluster})
	require.NoError(t, err)
	for _, d := range delegates.Items {
		names := containerNames(d.Spec.Containers)
		assert.Containsf(t, strings.Join(names, ","), sandbox.SidecarName, "delegate %s in cluster-2 has containers %v, want the injected %s", d.Name, names, sandbox.SidecarName)
	}

	pinned := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "batch", Namespace: ns,
		Annotations: map[string]string{v1alpha1.AnnotationClusterSelector: "topology.kubernetes.io/region=cluster-3"}}, Spec: podSpec("100m")}
	_, err = kube(t, sandbox.SourceCluster).CoreV1().Pods(ns).Create(ctx, pinned, metav1.CreateOptions{})
	require.NoError(t, err)
	eventually(t, time.Minute, "Elected=False naming the rewritten scheduler in cluster-3", func(ctx context.Context) (bool, string) {
		p, err := kube(t, sandbox.SourceCluster).CoreV1().Pods(ns).Get(ctx, "batch", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		c := electedCondition(p)
		if c == nil {
			return false, "no Elected condition"
		}
		return c.Status == corev1.ConditionFalse && strings.Contains(c.Message, "schedulerName") && strings.Contains(c.Message, sandbox.RewrittenSchedulerName), c.Message
	})
	pods, err := kube(t, "cluster-3").CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	assert.Emptyf(t, pods.Items, "pods in cluster-3, whose admission rewrites the scheduler: %v", podNames(pods.Items))
}

func containerNames(cs []corev1.Container) []string {
	var out []string
	for _, c := range cs {
		out = append(out, c.Name)
	}
	return out
}

func podNames(ps []corev1.Pod) []string {
	var out []string
	for _, p := range ps {
		out = append(out, p.Name+" ("+p.Spec.SchedulerName+")")
	}
	return out
}
