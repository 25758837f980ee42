package e2e

import (
	"context"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
	"github.com/fleetlet/fleetlet/pkg/crashpoint"
	"github.com/fleetlet/fleetlet/pkg/proxy"
	"github.com/fleetlet/fleetlet/pkg/sandbox"
)

// The source manager is killed (SIGKILL, by its own --crash-point) at each
// named point of a proxy's life, leadership moves between two live source
// manager replicas mid-election, the target-side manager is killed
// mid-election, and a target is stopped mid-election. After convergence,
// in every cluster: every proxy is bound with exactly one delegate,
// Terminating pods counted (no overlap), or deleted; no proxy stays
// Terminating or gated; no chaperon or delegate stands for a proxy that is
// gone or for a target that lost its election.
func TestChaosEveryCrashPointKeepsTheInvariants(t *testing.T) {
	need(t)
	ns := enabledNamespace(t, "chaos", sb.ClusterNames()[1:]...)
	ctx := context.Background()
	src := kube(t, sandbox.SourceCluster)
	create := func(round string, n int) {
		t.Helper()
		for i := range n {
			p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%d", round, i), Namespace: ns, Labels: map[string]string{"chaos": round}}, Spec: podSpec("100m")}
			_, err := src.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
			require.NoErrorf(t, err, "round %s", round)
		}
	}

	// Each run is killed holding the Lease; with fastLease, the next one
	// takes over after 6 s rather than 15 s.
	for _, point := range crashpoint.Points {
		began := time.Now()
		restartManager(t, append([]string{"--crash-point=" + point}, fastLease...)...)
		if point == crashpoint.MidFinalize {
			// Deletions: the proxies of an earlier round, once bound.
			waitBound(t, ns, "chaos="+crashpoint.AfterRecord, 3, 3*time.Minute)
			for i := range 2 {
				require.NoError(t, src.CoreV1().Pods(ns).Delete(ctx, fmt.Sprintf("%s-%d", crashpoint.AfterRecord, i), metav1.DeleteOptions{}))
			}
		} else {
			create(point, 3)
		}
		waitCrashed(t, sandbox.SourceCluster, sandbox.ComponentManager, point, 2*time.Minute)
		restartManager(t, fastLease...)
		t.Logf("crash point %s: the manager died there and was restarted, %s", point, time.Since(began).Round(100*time.Millisecond))
		checkNoOverlap(t, ctx, ns)
	}

	leaderChange(t, ctx, func() { create("leader-change", 6) }, ns)

	// The target side crashes mid-election.
	create("target-kill", 3)
	require.NoError(t, sb.KillComponent(ctx, sb.ClusterNames()[1], sandbox.ComponentManager))
	checkNoOverlap(t, ctx, ns)
	require.NoError(t, sb.StartComponent(ctx, sb.ClusterNames()[1], sandbox.ComponentManager))

	// A target stops mid-election, and comes back.
	create("target-stop", 3)
	stopped := sb.ClusterNames()[2]
	require.NoError(t, sb.Stop(ctx, stopped))
	checkNoOverlap(t, ctx, ns)
	require.NoError(t, sb.Start(ctx, stopped))

	took := eventually(t, 5*time.Minute, "every proxy bound with one delegate, nothing left over", func(ctx context.Context) (bool, string) {
		return converged(t, ctx, ns)
	})
	t.Logf("converged %s after the last fault", took.Round(100*time.Millisecond))
}

// fastLease makes a replica that stops renewing lose the leader election
// Lease within seconds (15 s by default).
var fastLease = []string{"--leader-election-lease-duration=6s", "--leader-election-renew-deadline=4s", "--leader-election-retry-period=1s"}

// leaderChange moves leadership between two live source manager replicas
// while elections are in flight: a standby replica waits for the Lease; the
// leader freezes (SIGSTOP: a long pause, or a partition) past its lease
// right after the proxies are created; the standby takes over and completes
// their elections; the old leader wakes up still believing it leads, finds
// the Lease taken and exits; it comes back as the standby, and the Lease is
// handed back to it when the other replica stops.
func leaderChange(t *testing.T, ctx context.Context, create func(), ns string) {
	t.Helper()
	began := time.Now()
	restartManager(t, fastLease...)
	waitLeading(t, sandbox.ComponentManager)
	first := leaseHolder(t, ctx)
	require.NoError(t, sb.StartComponentWith(ctx, sandbox.SourceCluster, sandbox.ComponentManagerStandby, fastLease...))
	create()
	require.NoError(t, sb.PauseComponent(ctx, sandbox.SourceCluster, sandbox.ComponentManager))
	waitLeading(t, sandbox.ComponentManagerStandby)
	second := leaseHolder(t, ctx)
	require.NotEqualf(t, first, second, "the standby leads, but the Lease still names %s", first)
	waitBound(t, ns, "chaos=leader-change", 6, 3*time.Minute)
	require.NoError(t, sb.ResumeComponent(ctx, sandbox.SourceCluster, sandbox.ComponentManager))
	waitDied(t, sandbox.SourceCluster, sandbox.ComponentManager, "leader election lost", time.Minute)
	checkNoOverlap(t, ctx, ns)
	restartManager(t, fastLease...)
	require.NoError(t, sb.StopComponent(ctx, sandbox.SourceCluster, sandbox.ComponentManagerStandby))
	waitLeading(t, sandbox.ComponentManager)
	checkNoOverlap(t, ctx, ns)
	t.Logf("leader change: %s led, froze, %s took over and completed the elections; the first exited on waking and leads again, %s", first, second, time.Since(began).Round(100*time.Millisecond))
}

// leaseHolder is the holder of the source manager's leader election Lease
// ("" when it cannot be read or no one holds it).
func leaseHolder(t *testing.T, ctx context.Context) string {
	t.Helper()
	l, err := kube(t, sandbox.SourceCluster).CoordinationV1().Leases(sandbox.FleetletNamespace).Get(ctx, "fleetlet-manager", metav1.GetOptions{})
	if err != nil || l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}

// restoreManager restarts the source manager with its own arguments, as a
// scenario that ran it with others leaves it, and waits until it leads:
// the next scenario starts on a source that elects (a killed manager's
// Lease has to lapse first, about 15 s).
func restoreManager(t *testing.T) {
	t.Helper()
	restartManager(t)
	waitLeading(t, sandbox.ComponentManager)
}

// restartManager kills the source manager and starts it again, with extra
// arguments for this run only.
func restartManager(t *testing.T, args ...string) {
	t.Helper()
	ctx := context.Background()
	if componentAlive(sandbox.SourceCluster, sandbox.ComponentManager) {
		require.NoError(t, sb.KillComponent(ctx, sandbox.SourceCluster, sandbox.ComponentManager))
	}
	require.NoError(t, sb.StartComponentWith(ctx, sandbox.SourceCluster, sandbox.ComponentManager, args...))
}

func componentAlive(cluster, component string) bool {
	for _, c := range sb.State().Clusters {
		if c.Name != cluster {
			continue
		}
		for _, p := range c.Processes {
			if p.Component == component && p.Alive() {
				return true
			}
		}
	}
	return false
}

// waitCrashed waits for a component to die on its own, and checks from its
// log that it died at the crash point.
func waitCrashed(t *testing.T, cluster, component, point string, timeout time.Duration) {
	t.Helper()
	waitDied(t, cluster, component, "crash point "+point+" reached", timeout)
}

// waitDied waits for a component to die on its own, and checks that its
// log says why.
func waitDied(t *testing.T, cluster, component, why string, timeout time.Duration) {
	t.Helper()
	eventually(t, timeout, cluster+"'s "+component+" to die: "+why, func(context.Context) (bool, string) {
		return !componentAlive(cluster, component), "still running"
	})
	require.Containsf(t, lastRun(t, cluster, component), why, "%s's %s died, but its log does not say %q", cluster, component, why)
}

// lastRun is the log of a component's last run.
func lastRun(t *testing.T, cluster, component string) string {
	t.Helper()
	var log string
	for _, c := range sb.State().Clusters {
		for _, p := range c.Processes {
			if c.Name == cluster && p.Component == component {
				log = p.Log // the last one started
			}
		}
	}
	data, err := os.ReadFile(log)
	require.NoError(t, err)
	runs := strings.Split(string(data), "\n=== ")
	return runs[len(runs)-1]
}

// waitLeading waits until a source manager replica says it holds the
// leader election Lease.
func waitLeading(t *testing.T, component string) {
	t.Helper()
	eventually(t, time.Minute, component+" to lead", func(context.Context) (bool, string) {
		return strings.Contains(lastRun(t, sandbox.SourceCluster, component), "Successfully acquired lease"), "not yet"
	})
}

// standing lists, in every cluster that answers, every pod that stands for
// a proxy, Terminating ones included; unanswered lists the others.
func standing(t *testing.T, ctx context.Context, p *corev1.Pod) (out map[string][]string, unanswered []string) {
	t.Helper()
	out = map[string][]string{}
	for _, c := range sb.ClusterNames() {
		pods, err := kube(t, c).CoreV1().Pods(p.Namespace).List(ctx, metav1.ListOptions{LabelSelector: v1alpha1.LabelParentUID + "=" + string(p.UID)})
		if err != nil {
			unanswered = append(unanswered, c)
			continue
		}
		for _, d := range pods.Items {
			out[c] = append(out[c], d.Name+"@"+d.Spec.NodeName)
		}
	}
	return out, unanswered
}

// checkNoOverlap fails when a proxy has two bound pods standing for it,
// Terminating ones counted, in the clusters that answer.
func checkNoOverlap(t *testing.T, ctx context.Context, ns string) {
	t.Helper()
	proxies, err := kube(t, sandbox.SourceCluster).CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "chaos"})
	require.NoError(t, err)
	for i := range proxies.Items {
		bound := 0
		all, _ := standing(t, ctx, &proxies.Items[i])
		for _, ds := range all {
			for _, d := range ds {
				if !strings.HasSuffix(d, "@") {
					bound++
				}
			}
		}
		assert.LessOrEqualf(t, bound, 1, "proxy %s has %d bound pods standing for it: %v", proxies.Items[i].Name, bound, all)
	}
}

// converged says whether the invariants hold once nothing moves any more,
// and if not, why.
func converged(t *testing.T, ctx context.Context, ns string) (bool, string) {
	t.Helper()
	list, err := kube(t, sandbox.SourceCluster).CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "chaos"})
	if err != nil {
		return false, err.Error()
	}
	live := map[types.UID]*corev1.Pod{}
	for i := range list.Items {
		p := &list.Items[i]
		switch {
		case p.DeletionTimestamp != nil:
			return false, fmt.Sprintf("proxy %s still Terminating (finalizers %v)", p.Name, p.Finalizers)
		case proxy.Gated(p) || !strings.HasPrefix(p.Spec.NodeName, "fleetlet-"):
			return false, fmt.Sprintf("proxy %s not bound (gates %v, node %q)", p.Name, p.Spec.SchedulingGates, p.Spec.NodeName)
		}
		all, unanswered := standing(t, ctx, p)
		if len(unanswered) > 0 {
			return false, fmt.Sprintf("no answer from %v", unanswered)
		}
		want := clusterOfNode(p.Spec.NodeName)
		if n := len(slices.Concat(slices.Collect(maps.Values(all))...)); n != 1 || len(all[want]) != 1 || strings.HasSuffix(all[want][0], "@") {
			return false, fmt.Sprintf("proxy %s on %s: pods standing for it %v, want one, bound, in %s", p.Name, p.Spec.NodeName, all, want)
		}
		live[p.UID] = p
	}
	// Nothing in any cluster stands for a proxy that is gone, or in a
	// target its proxy is not bound to.
	for _, c := range sb.ClusterNames() {
		var pcs v1alpha1.PodChaperonList
		if err := ctrlClient(t, c).List(ctx, &pcs, client.InNamespace(ns), client.MatchingLabels{v1alpha1.LabelParentCluster: sandbox.SourceCluster}); err != nil {
			return false, err.Error()
		}
		for _, pc := range pcs.Items {
			p, ok := live[types.UID(pc.Labels[v1alpha1.LabelParentUID])]
			if !ok || clusterOfNode(p.Spec.NodeName) != c {
				return false, fmt.Sprintf("%s: PodChaperon %s left over", c, pc.Name)
			}
		}
	}
	return true, fmt.Sprintf("%d proxies", len(live))
}
