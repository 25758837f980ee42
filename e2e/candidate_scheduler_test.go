package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
	"github.com/fleetlet/fleetlet/pkg/sandbox"
)

// waitSchedulerCondition waits until the ClusterTarget of cluster shows
// CandidateSchedulerRunning with status and reason.
func waitSchedulerCondition(t *testing.T, cluster string, status metav1.ConditionStatus, reason string, timeout time.Duration) *metav1.Condition {
	t.Helper()
	var cond *metav1.Condition
	eventually(t, timeout, fmt.Sprintf("ClusterTarget %s CandidateSchedulerRunning=%s (%s)", cluster, status, reason), func(ctx context.Context) (bool, string) {
		var ct v1alpha1.ClusterTarget
		if err := ctrlClient(t, sandbox.SourceCluster).Get(ctx, client.ObjectKey{Name: cluster}, &ct); err != nil {
			return false, err.Error()
		}
		cond = meta.FindStatusCondition(ct.Status.Conditions, v1alpha1.ConditionCandidateScheduler)
		if cond == nil {
			return false, "no condition"
		}
		return cond.Status == status && cond.Reason == reason, fmt.Sprintf("%s/%s: %s", cond.Status, cond.Reason, cond.Message)
	})
	return cond
}

// targetProbeInterval is how often the sandbox's managers probe their
// targets (pkg/sandbox: --target-probe-interval).
const targetProbeInterval = 3 * time.Second

// needWholeFleet waits until every cluster of the sandbox is a target the
// source may elect into (its ClusterTarget Ready and its candidate
// scheduler running), for a scenario whose outcome counts on every one: a
// scenario before it may have restarted a control plane or a scheduler,
// which takes its lease over only once the old one lapses.
func needWholeFleet(t *testing.T) {
	t.Helper()
	// The ClusterTargets' conditions are what the source's manager last
	// wrote: right after the source restarts they still say what the
	// manager before it saw, while the new one may not count a cluster yet.
	// Each cluster's own ClusterSummary says whether its candidate
	// scheduler runs now; the source's manager reads it at its next probe.
	waited := eventually(t, 2*time.Minute, "every ClusterTarget Ready, every ClusterSummary with its candidate scheduler running", func(ctx context.Context) (bool, string) {
		for _, c := range sb.ClusterNames() {
			var ct v1alpha1.ClusterTarget
			if err := ctrlClient(t, sandbox.SourceCluster).Get(ctx, client.ObjectKey{Name: c}, &ct); err != nil {
				return false, err.Error()
			}
			for _, typ := range []string{v1alpha1.ConditionReady, v1alpha1.ConditionCandidateScheduler} {
				if cond := meta.FindStatusCondition(ct.Status.Conditions, typ); cond == nil || cond.Status != metav1.ConditionTrue {
					return false, fmt.Sprintf("ClusterTarget %s: %s not True: %+v", c, typ, cond)
				}
			}
			var cs v1alpha1.ClusterSummary
			if err := ctrlClient(t, c).Get(ctx, client.ObjectKey{Name: v1alpha1.ClusterSummaryName}, &cs); err != nil {
				return false, err.Error()
			}
			if cond := meta.FindStatusCondition(cs.Status.Conditions, v1alpha1.ConditionCandidateScheduler); cond == nil || cond.Status != metav1.ConditionTrue {
				return false, fmt.Sprintf("ClusterSummary of %s: %s not True: %+v", c, v1alpha1.ConditionCandidateScheduler, cond)
			}
		}
		return true, ""
	})
	if waited > time.Second {
		// The source's manager sees the summaries at its next probe.
		time.Sleep(targetProbeInterval)
		t.Logf("waited %s for every cluster to be a target again", (waited + targetProbeInterval).Round(100*time.Millisecond))
	}
}

// watchChaperons records the PodChaperons created in namespace ns of
// cluster from now until the test ends; the returned func lists them.
func watchChaperons(t *testing.T, cluster, ns string) func() []string {
	t.Helper()
	cfg, err := sb.RESTConfig(cluster)
	require.NoError(t, err)
	c, err := client.NewWithWatch(cfg, client.Options{Scheme: scheme})
	require.NoError(t, err)
	w, err := c.Watch(context.Background(), &v1alpha1.PodChaperonList{}, client.InNamespace(ns))
	require.NoError(t, err)
	var mu sync.Mutex
	var seen []string
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range w.ResultChan() {
			if pc, ok := ev.Object.(*v1alpha1.PodChaperon); ok && ev.Type == watch.Added {
				mu.Lock()
				seen = append(seen, pc.Name)
				mu.Unlock()
			}
		}
	}()
	t.Cleanup(func() { w.Stop(); <-done })
	return func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(seen)
	}
}

// A target whose candidate scheduler has crashed (its Lease no longer
// renewed) says so on its ClusterTarget and takes no new candidate: the
// Deployment's pods run in the other clusters without waiting on it, and a
// pod only that cluster may run stays gated and says why. Once the
// scheduler is back, the cluster takes candidates again and that pod runs
// there. Before: nothing told the source; the cluster, with nothing
// reserved there, ranked as the emptiest, drew the candidates, and they
// waited there for a scheduler that never came.
func TestCandidateSchedulerOutage(t *testing.T) {
	need(t)
	const down = "cluster-3"
	ns := enabledNamespace(t, "sched-outage", sb.ClusterNames()[1:]...)
	ctx := context.Background()
	src := kube(t, sandbox.SourceCluster)

	require.NoError(t, sb.KillComponent(ctx, down, sandbox.ComponentScheduler))
	restarted := false
	t.Cleanup(func() {
		if !restarted {
			_ = sb.StartComponent(context.Background(), down, sandbox.ComponentScheduler)
		}
	})
	cond := waitSchedulerCondition(t, down, metav1.ConditionFalse, v1alpha1.ReasonLeaseExpired, 2*time.Minute)
	t.Logf("%s: %s", down, cond.Message)

	// Every candidate sent there is seen: losers are deleted once elected
	// elsewhere, so the namespace is watched from before the first.
	sent := watchChaperons(t, down, ns)
	sel := deployment(t, ns, "web", 4)
	waitBound(t, ns, sel, 4, 3*time.Minute)
	for node, ps := range proxiesOn(t, ctx, ns, sel) {
		assert.NotEqualf(t, down, clusterOfNode(node), "%d proxies bound to the cluster whose scheduler is down", len(ps))
	}
	assert.Emptyf(t, sent(), "candidates were sent to %s, whose scheduler is down", down)

	only := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "only-" + down, Namespace: ns, Labels: map[string]string{"app": "only"},
		Annotations: map[string]string{v1alpha1.AnnotationClusterSelector: "topology.kubernetes.io/region=" + down}}, Spec: podSpec("100m")}
	_, err := src.CoreV1().Pods(ns).Create(ctx, only, metav1.CreateOptions{})
	require.NoError(t, err)
	eventually(t, time.Minute, "Elected=False naming the stopped scheduler", func(ctx context.Context) (bool, string) {
		p, err := src.CoreV1().Pods(ns).Get(ctx, only.Name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		c := electedCondition(p)
		if c == nil || c.Status != corev1.ConditionFalse {
			return false, fmt.Sprintf("%+v", c)
		}
		return strings.Contains(c.Message, down+":") && strings.Contains(c.Message, "candidate scheduler does not run"), c.Message
	})

	require.NoError(t, sb.StartComponent(ctx, down, sandbox.ComponentScheduler))
	restarted = true
	waitSchedulerCondition(t, down, metav1.ConditionTrue, v1alpha1.ReasonLeaseHeld, 2*time.Minute)
	bound := waitBound(t, ns, "app=only", 1, 2*time.Minute)
	assert.Equal(t, "fleetlet-"+down, bound[0].Spec.NodeName, "the pod only the restored cluster may run")
}
