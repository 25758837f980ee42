package elector_test

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/fleetlet/fleetlet/pkg/elector"
	"github.com/fleetlet/fleetlet/pkg/proxy"
)

// requestBudget is how many requests the elector may make per proxy, over
// both API servers, from creation to ungated, with two targets (one
// candidate elected, one unschedulable). The floor is 8: two candidates,
// the record and its Event, the mark, the loser's deletion, the pin and
// the ungate; every read is served from a cache. Before the event-driven
// rework a proxy cost 11.7 (a Namespace GET per candidate, candidates
// created again and losers deleted again from caches behind our writes).
const requestBudget = 9

// TestRequestsPerProxy counts the elector's requests per proxy as the API
// servers count them (apiserver_request_total, every verb but WATCH;
// leases and clustersummaries left out: the targets' probes and
// heartbeats, whose rate does not depend on the pods), less the requests
// of the harness, which plays the candidate schedulers and the kubelet.
func TestRequestsPerProxy(t *testing.T) {
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
	before, beforeBy := served(t)
	harness := h.calls.Load()
	elect(names...)
	own := h.calls.Load() - harness
	after, afterBy := served(t)
	total := after - before
	var by []string
	for k, v := range afterBy {
		if d := v - beforeBy[k]; d > 0 {
			by = append(by, fmt.Sprintf("%s %d", k, d))
		}
	}
	sort.Strings(by)
	t.Logf("served, harness included: %s", strings.Join(by, ", "))
	perProxy := float64(total-own) / n
	t.Logf("%d requests served, %d of them the harness's: %.1f per proxy (budget %d)", total, own, perProxy, requestBudget)
	if perProxy > requestBudget {
		t.Errorf("the elector made %.1f requests per proxy; the budget is %d", perProxy, requestBudget)
	}
}

// served sums apiserver_request_total over both control planes, WATCH,
// leases, clustersummaries and non-resource requests (reading /metrics
// itself) left out.
func served(t *testing.T) (int64, map[string]int64) {
	t.Helper()
	var sum float64
	by := map[string]int64{}
	for _, cfg := range []*rest.Config{sourceEnv.Config, targetEnv.Config} {
		cs, err := kubernetes.NewForConfig(cfg)
		require.NoError(t, err)
		raw, err := cs.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(context.Background())
		require.NoError(t, err)
		p := expfmt.NewTextParser(model.UTF8Validation)
		fams, err := p.TextToMetricFamilies(strings.NewReader(string(raw)))
		require.NoError(t, err)
		f := fams["apiserver_request_total"]
		require.NotNil(t, f, "no apiserver_request_total")
		for _, m := range f.GetMetric() {
			l := map[string]string{}
			for _, lp := range m.GetLabel() {
				l[lp.GetName()] = lp.GetValue()
			}
			if l["verb"] == "WATCH" || l["resource"] == "leases" || l["resource"] == "clustersummaries" || l["resource"] == "" {
				continue
			}
			sum += m.GetCounter().GetValue()
			by[l["verb"]+" "+l["resource"]+"/"+l["subresource"]] += int64(m.GetCounter().GetValue())
		}
	}
	return int64(sum), by
}
