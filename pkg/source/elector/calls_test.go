package elector_test

import (
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/fleetlet/fleetlet/pkg/proxy"
	"github.com/fleetlet/fleetlet/pkg/source/elector"
	"github.com/fleetlet/fleetlet/pkg/testenv"
)

// writeBudget is how many writes the elector may make per proxy, over
// both API servers, from creation to ungated, with two targets (one
// candidate elected, one unschedulable). The floor is 6: two candidates,
// the record, the mark, the loser's deletion, and the pin with the ungate
// in one patch. Before the event-driven rework a proxy cost 9.1 to 9.4
// (candidates created again and losers deleted again from caches behind
// our writes, the pin and the ungate apart), and read each target's
// Namespace live before each candidate; before the record's Event went
// (the condition and the delegate's mirrored Scheduled Event say it), 7.
const writeBudget = 6.5

// TestWritesPerProxy counts the elector's writes per proxy as the API
// servers count them (apiserver_request_total, every verb but GET, LIST
// and WATCH; leases and clustersummaries left out: the targets' probes
// and heartbeats, whose rate does not depend on the pods), less the
// writes of the harness, which plays the candidate schedulers and the
// kubelet. Reads are logged, not budgeted: the harness polls.
func TestWritesPerProxy(t *testing.T) {
	h, remote, local := start(t, elector.Options{})
	elect := func(names ...string) {
		var pods []*corev1.Pod
		for _, name := range names {
			pods = append(pods, h.proxy(t, name))
		}
		for _, p := range pods {
			h.reserve(t, remote, p)
			h.unschedulable(t, local, p)
		}
		for _, p := range pods {
			h.bind(t, remote, p)
			h.admit(t, remote, p)
		}
		for _, p := range pods {
			h.waitProxy(t, p, "ungated", func(p *corev1.Pod) bool { return !proxy.Gated(p) && proxy.PinnedNode(p) == nodeName(remote) })
		}
	}
	// Warm: the namespace's caches in both targets have synced.
	elect("warm-up")
	const n = 20
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("web-%d", i)
	}
	before, requeuesBefore := served(t), requeues(t)
	passesBefore, reconcilesBefore := counterBy(t, "fleetlet_elector_passes_total", "found"), counterBy(t, "controller_runtime_reconcile_total", "controller")["proxy"]
	harness := h.writes.Load()
	elect(names...)
	after, requeuesAfter := served(t), requeues(t)
	passes := passesOnceQuiet(t, passesBefore, reconcilesBefore)
	t.Logf("elector passes of %d proxies, by what they found: %v", n, passes)
	assert.Positive(t, passes[string(elector.PhaseElecting)], "passes that found a proxy electing")
	var writes float64
	var by []string
	for k, v := range after {
		d := v - before[k]
		if d <= 0 {
			continue
		}
		by = append(by, fmt.Sprintf("%s %d", k, d))
		if verb, _, _ := strings.Cut(k, " "); verb != "GET" && verb != "LIST" {
			writes += float64(d)
		}
	}
	sort.Strings(by)
	perProxy := (writes - float64(h.writes.Load()-harness)) / n
	t.Logf("served, harness included: %s; the elector's writes: %.1f per proxy (budget %.1f)", strings.Join(by, ", "), perProxy, writeBudget)
	assert.Falsef(t, perProxy > writeBudget, "the elector made %.1f writes per proxy; the budget is %.1f", perProxy, writeBudget)
	// Every pass of the batch came from an event of the proxy or of its
	// candidates: no timer fired, no target change enqueued them.
	for reason, v := range requeuesAfter {
		if d := v - requeuesBefore[reason]; d > 0 {
			assert.Failf(t, "passes not for an event of theirs", "%v passes of %d proxies ran for %s, not for an event of theirs", d, n, reason)
		}
	}
}

// passesOnceQuiet is the elector's passes since before, by what they
// found. Every pass is counted once: once the passes in flight are done,
// their sum is controller-runtime's count of the proxy controller's since
// reconcilesBefore.
func passesOnceQuiet(t *testing.T, before map[string]float64, reconcilesBefore float64) map[string]float64 {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		passes, sum := map[string]float64{}, 0.0
		for found, v := range counterBy(t, "fleetlet_elector_passes_total", "found") {
			if d := v - before[found]; d > 0 {
				passes[found] = d
				sum += d
			}
		}
		reconciles := counterBy(t, "controller_runtime_reconcile_total", "controller")["proxy"] - reconcilesBefore
		if sum > 0 && sum == reconciles {
			return passes
		}
		if time.Now().After(deadline) {
			assert.Failf(t, "passes not counted once each", "%v passes counted by what they found (%v), %v by controller-runtime", sum, passes, reconciles)
			return passes
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// requeues reads fleetlet_elector_requeues_total by reason from this
// process's registry, where the harness's elector counts.
func requeues(t *testing.T) map[string]float64 {
	t.Helper()
	return counterBy(t, "fleetlet_elector_requeues_total", "reason")
}

// counterBy sums a counter of this process's registry by one label.
func counterBy(t *testing.T, name, label string) map[string]float64 {
	t.Helper()
	fams, err := metrics.Registry.Gather()
	require.NoError(t, err)
	by := map[string]float64{}
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == label {
					by[lp.GetValue()] += m.GetCounter().GetValue()
				}
			}
		}
	}
	return by
}

// served is testenv.Served over both control planes.
func served(t *testing.T) map[string]int64 {
	t.Helper()
	return testenv.Served(t, sourceEnv.Config, targetEnv.Config)
}
