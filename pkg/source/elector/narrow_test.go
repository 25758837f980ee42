package elector_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

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
