package elector_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
	"github.com/fleetlet/fleetlet/pkg/proxy"
	"github.com/fleetlet/fleetlet/pkg/source/elector"
	"github.com/fleetlet/fleetlet/pkg/testenv"
)

// With CandidateTargets 1, a proxy gets one candidate, in the best-ranked
// target; the other target gets one only once that one said no, and the
// proxy is elected there.
// The fallback is counted once (fleetlet_candidate_fallbacks_total), not
// once per pass, so that the bench can tell how often the ranking missed.
func TestCandidatesInTheBestTargetsFirst(t *testing.T) {
	h, remote, local := start(t, elector.Options{CandidateTargets: 1})
	fallbacks := counter(t, "fleetlet_candidate_fallbacks_total")
	p := h.proxy(t, "web-1")
	var first, second proxy.TargetKey
	testenv.EventuallyTrue(t, waitTimeout, "a first candidate", func(context.Context) bool {
		_, inRemote := h.chaperon(t, remote, p)
		_, inLocal := h.chaperon(t, local, p)
		switch {
		case inRemote && !inLocal:
			first, second = remote, local
		case inLocal && !inRemote:
			first, second = local, remote
		default:
			return false
		}
		return true
	})
	assert.Never(t, func() bool { _, ok := h.chaperon(t, second, p); return ok }, 2*time.Second, 100*time.Millisecond,
		"a candidate in %s while the one in %s has not answered", second.Name, first.Name)

	h.unschedulable(t, first, p)
	h.reserve(t, second, p)
	h.waitProxy(t, p, "elected in "+second.Name, electedIn(second.Name))
	assert.InDelta(t, 1, counter(t, "fleetlet_candidate_fallbacks_total")-fallbacks, 0, "fallbacks counted for one proxy whose first target said no")
}

// counter reads a counter, summed over its labels, from this process's
// registry, where the harness's elector counts.
func counter(t *testing.T, name string) float64 {
	t.Helper()
	fams, err := metrics.Registry.Gather()
	require.NoError(t, err)
	sum := 0.0
	for _, f := range fams {
		if f.GetName() == name {
			for _, m := range f.GetMetric() {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return sum
}

// setSummary sets the ClusterSummary status of the control plane c reaches
// until the test ends.
func setSummary(t *testing.T, c client.Client, status v1alpha1.ClusterSummaryStatus) {
	t.Helper()
	write := func(status v1alpha1.ClusterSummaryStatus) error {
		return retry.RetryOnConflict(retry.DefaultRetry, func() error {
			var cs v1alpha1.ClusterSummary
			if err := c.Get(context.Background(), client.ObjectKey{Name: v1alpha1.ClusterSummaryName}, &cs); err != nil {
				return err
			}
			cs.Status = status
			return c.Status().Update(context.Background(), &cs)
		})
	}
	require.NoError(t, write(status))
	t.Cleanup(func() { _ = write(v1alpha1.ClusterSummaryStatus{}) })
}

// With CandidateTargets 1, a target whose free CPU is spread over nodes
// too small for the pod (largestFree) is not the one that gets the first
// candidate, however much it has free in total. Before: it ranked first by
// its total, its candidate was refused, and every such pod fell back.
func TestCandidateSkipsATargetWhereNoNodeFits(t *testing.T) {
	h, remote, local := start(t, elector.Options{CandidateTargets: 1})
	cpu := func(q string) corev1.ResourceList {
		return corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(q)}
	}
	// remote: 100 CPUs free, at most 50m of them on one node; local: 5 of
	// 10 free, 2 on one node. The proxy asks for 100m.
	setSummary(t, h.target, v1alpha1.ClusterSummaryStatus{Allocatable: cpu("100"), Requested: cpu("0"), LargestFree: cpu("50m")})
	setSummary(t, h.source, v1alpha1.ClusterSummaryStatus{Allocatable: cpu("10"), Requested: cpu("5"), LargestFree: cpu("2")})
	time.Sleep(3 * time.Second) // several of the registry's 500 ms probes
	fallbacks := counter(t, "fleetlet_candidate_fallbacks_total")

	p := h.proxy(t, "fragmented")
	testenv.EventuallyTrue(t, waitTimeout, "a candidate in "+local.Name, func(context.Context) bool {
		_, ok := h.chaperon(t, local, p)
		return ok
	})
	assert.Never(t, func() bool { _, ok := h.chaperon(t, remote, p); return ok }, 2*time.Second, 100*time.Millisecond,
		"a candidate in %s, where no node has room for the pod", remote.Name)
	h.reserve(t, local, p)
	h.waitProxy(t, p, "elected in "+local.Name, electedIn(local.Name))
	assert.InDelta(t, 0, counter(t, "fleetlet_candidate_fallbacks_total")-fallbacks, 0, "a fallback counted")
}
