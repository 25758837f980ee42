package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fleetlet/fleetlet/pkg/sandbox"
)

// Killing the manager (SIGKILL: no Lease released, no cleanup), and
// separately the candidate schedulers, in the middle of elections, five
// times each, never yields two delegates for one proxy; every proxy ends
// bound with exactly one.
func TestCrashesMidElectionNeverDoubleDelegates(t *testing.T) {
	need(t)
	ns := enabledNamespace(t, "crash", sb.ClusterNames()[1:]...)
	ctx := context.Background()
	src := kube(t, sandbox.SourceCluster)
	type crash struct {
		what     string
		clusters []string
		comp     string
	}
	crashes := []crash{
		{"the source manager", []string{sandbox.SourceCluster}, sandbox.ComponentManager},
		{"every candidate scheduler", sb.ClusterNames(), sandbox.ComponentScheduler},
	}
	created := 0
	for _, c := range crashes {
		for round := range 5 {
			label := fmt.Sprintf("crash-%d", created)
			for i := range 4 {
				p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%d", label, i), Namespace: ns, Labels: map[string]string{"round": label}}, Spec: podSpec("100m")}
				_, err := src.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
				require.NoError(t, err)
			}
			created++
			time.Sleep(time.Duration(rand.IntN(800)) * time.Millisecond)
			for _, cl := range c.clusters {
				require.NoErrorf(t, sb.KillComponent(ctx, cl, c.comp), "round %d: killing %s", round, c.what)
			}
			// While it is down, nothing may have two delegates.
			checkAtMostOneDelegate(t, ctx, ns)
			for _, cl := range c.clusters {
				require.NoErrorf(t, sb.StartComponent(ctx, cl, c.comp), "round %d: restarting %s", round, c.what)
			}
			checkAtMostOneDelegate(t, ctx, ns)
		}
		t.Logf("killed %s 5 times mid-election", c.what)
	}
	for i := range created {
		waitBound(t, ns, fmt.Sprintf("round=crash-%d", i), 4, 3*time.Minute)
	}
}

// checkAtMostOneDelegate fails when any proxy of ns has two bound pods
// standing for it, in any clusters.
func checkAtMostOneDelegate(t *testing.T, ctx context.Context, ns string) {
	t.Helper()
	proxies, err := kube(t, sandbox.SourceCluster).CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "round"})
	require.NoError(t, err)
	for i := range proxies.Items {
		p := &proxies.Items[i]
		bound := 0
		for _, ps := range delegatesOf(t, ctx, p) {
			for _, d := range ps {
				if d.Spec.NodeName != "" {
					bound++
				}
			}
		}
		if bound > 1 {
			assert.Failf(t, "a proxy has more than one bound delegate", "proxy %s has %d bound delegates: %v", p.Name, bound, names(delegatesOf(t, ctx, p)))
		}
	}
}
