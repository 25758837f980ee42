package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/prometheus/procfs"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/fleetlet/fleetlet/pkg/sandbox"
)

// snapshot is what the clusters had spent at one moment: the API requests
// each API server answered, by "VERB resource" (apiserver_request_total,
// every client); the requests fleetlet's own processes made
// (rest_client_requests_total of every manager and candidate scheduler,
// towards every cluster); the elector's requeues by reason
// (fleetlet_elector_requeues_total, every manager); the reconcile passes
// by controller (controller_runtime_reconcile_total, every manager); and
// the CPU-seconds and memory of every sandbox process. A run's cost is the difference of two.
type snapshot struct {
	at       time.Time
	requests map[string]map[string]float64 // cluster → "VERB resource" → requests
	fleetlet map[string]float64            // "cluster/component" → requests it made
	requeues map[string]float64            // reason → passes
	passes   map[string]float64            // controller → reconcile passes
	found    map[string]float64            // what an elector pass found → passes
	// fallbacks: proxies whose --candidate-targets best-ranked targets
	// all said no (fleetlet_candidate_fallbacks_total, every manager).
	fallbacks float64
	cpu       map[string]float64 // "cluster/component" → CPU-seconds
	rss       map[string]float64 // "cluster/component" → resident MiB now
	peakRSS   map[string]float64 // "cluster/component" → resident MiB at most, since it started
}

// take reads every cluster's counters. A counter that cannot be read is
// left out (and said on stderr by the caller's table as missing).
func take(ctx context.Context, sb *sandbox.Sandbox, clients map[string]kubernetes.Interface) snapshot {
	s := snapshot{at: time.Now(), requests: map[string]map[string]float64{}, fleetlet: map[string]float64{}, requeues: map[string]float64{},
		passes: map[string]float64{}, found: map[string]float64{}, cpu: map[string]float64{}, rss: map[string]float64{}, peakRSS: map[string]float64{}}
	st := sb.State()
	for _, c := range st.Clusters {
		if raw, err := clients[c.Name].CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx); err == nil {
			s.requests[c.Name] = apiRequests(parse(strings.NewReader(string(raw))))
		}
		if fams, err := scrape(ctx, http.DefaultClient, fmt.Sprintf("http://127.0.0.1:%d/metrics", c.Ports.FleetletMetrics)); err == nil {
			if n, ok := clientRequests(fams); ok {
				s.fleetlet[c.Name+"/"+sandbox.ComponentManager] = n
			}
			for reason, n := range requeues(fams) {
				s.requeues[reason] += n
			}
			for controller, n := range passes(fams) {
				s.passes[controller] += n
			}
			for found, n := range byLabel(fams, "fleetlet_elector_passes_total", "found") {
				s.found[found] += n
			}
			s.fallbacks += counterSum(fams, "fleetlet_candidate_fallbacks_total")
		}
		// The candidate scheduler serves its client's requests beside
		// kube-scheduler's metrics (cmd/fleetlet/scheduler_metrics.go).
		if hc, err := adminHTTPClient(sb, c.Name); err == nil {
			if fams, err := scrape(ctx, hc, fmt.Sprintf("https://127.0.0.1:%d/metrics", c.Ports.FleetletScheduler)); err == nil {
				if n, ok := clientRequests(fams); ok {
					s.fleetlet[c.Name+"/"+sandbox.ComponentScheduler] = n
				}
			}
		}
		for _, p := range c.Processes {
			proc, err := procfs.NewProc(p.PID)
			if err != nil {
				continue
			}
			stat, err := proc.Stat()
			if err != nil || stat.Starttime != p.StartTime {
				continue
			}
			s.cpu[c.Name+"/"+p.Component] = stat.CPUTime()
			if st, err := proc.NewStatus(); err == nil {
				s.rss[c.Name+"/"+p.Component] = float64(st.VmRSS) / (1 << 20)
				s.peakRSS[c.Name+"/"+p.Component] = float64(st.VmHWM) / (1 << 20)
			}
		}
	}
	return s
}

// adminHTTPClient is an HTTP client with the cluster administrator's
// credentials and CA: the candidate scheduler authorizes /metrics through
// the API server.
func adminHTTPClient(sb *sandbox.Sandbox, cluster string) (*http.Client, error) {
	cfg, err := sb.RESTConfig(cluster)
	if err != nil {
		return nil, err
	}
	return rest.HTTPClientFor(cfg)
}

func scrape(ctx context.Context, hc *http.Client, url string) (map[string]*dto.MetricFamily, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: %s", url, resp.Status)
	}
	return parse(resp.Body), nil
}

func parse(r io.Reader) map[string]*dto.MetricFamily {
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, _ := p.TextToMetricFamilies(r)
	return fams
}

// apiRequests sums apiserver_request_total by verb and resource (with its
// subresource).
func apiRequests(fams map[string]*dto.MetricFamily) map[string]float64 {
	out := map[string]float64{}
	f := fams["apiserver_request_total"]
	if f == nil {
		return out
	}
	for _, m := range f.GetMetric() {
		l := labels(m)
		res := l["resource"]
		if sub := l["subresource"]; sub != "" {
			res += "/" + sub
		}
		if res == "" {
			res = "(non-resource)"
		}
		out[l["verb"]+" "+res] += m.GetCounter().GetValue()
	}
	return out
}

// clientRequests sums rest_client_requests_total over hosts, methods and
// codes: every request a process made; ok is false when it is not served.
func clientRequests(fams map[string]*dto.MetricFamily) (total float64, ok bool) {
	f := fams["rest_client_requests_total"]
	if f == nil {
		return 0, false
	}
	for _, m := range f.GetMetric() {
		total += m.GetCounter().GetValue()
	}
	return total, true
}

// requeues sums fleetlet_elector_requeues_total by reason.
func requeues(fams map[string]*dto.MetricFamily) map[string]float64 {
	out := map[string]float64{}
	if f := fams["fleetlet_elector_requeues_total"]; f != nil {
		for _, m := range f.GetMetric() {
			out[labels(m)["reason"]] += m.GetCounter().GetValue()
		}
	}
	return out
}

// passes sums controller_runtime_reconcile_total by controller.
func passes(fams map[string]*dto.MetricFamily) map[string]float64 {
	return byLabel(fams, "controller_runtime_reconcile_total", "controller")
}

// byLabel sums a counter by one of its labels.
func byLabel(fams map[string]*dto.MetricFamily, name, label string) map[string]float64 {
	out := map[string]float64{}
	if f := fams[name]; f != nil {
		for _, m := range f.GetMetric() {
			out[labels(m)[label]] += m.GetCounter().GetValue()
		}
	}
	return out
}

// counterSum sums a counter over its labels; 0 when it is not served.
func counterSum(fams map[string]*dto.MetricFamily, name string) float64 {
	sum := 0.0
	if f := fams[name]; f != nil {
		for _, m := range f.GetMetric() {
			sum += m.GetCounter().GetValue()
		}
	}
	return sum
}

func labels(m *dto.Metric) map[string]string {
	out := map[string]string{}
	for _, l := range m.GetLabel() {
		out[l.GetName()] = l.GetValue()
	}
	return out
}

// cost is what a run spent per pod.
type cost struct {
	// Requests is, per cluster, the API requests per pod by "VERB
	// resource", all clients.
	Requests map[string]map[string]float64 `json:"requestsPerPod"`
	// Fleetlet is, per fleetlet process, the requests it made per pod.
	Fleetlet map[string]float64 `json:"fleetletRequestsPerPod"`
	// Requeues is, by reason, the elector's passes per pod not caused by
	// a proxy's own or its candidates' events.
	Requeues map[string]float64 `json:"requeuesPerPod"`
	// Passes is, by controller, the managers' reconcile passes per pod.
	Passes map[string]float64 `json:"passesPerPod"`
	// Found is, by what it found (the proxy's phase), the elector's
	// passes per pod.
	Found map[string]float64 `json:"electorPassesPerPod"`
	// Fallbacks is the share of pods whose candidates in the
	// --candidate-targets best-ranked targets all said no, so that every
	// other eligible target got one.
	Fallbacks float64 `json:"fallbacksPerPod"`
	// CPU is, per process, the CPU-milliseconds per pod.
	CPU map[string]float64 `json:"cpuMillisPerPod"`
	// RSS is, per process, its resident memory in MiB at the run's end
	// (all pods Running), and PeakRSS the most it has held since it
	// started: not per pod.
	RSS     map[string]float64 `json:"rssMiB"`
	PeakRSS map[string]float64 `json:"peakRSSMiB"`
}

func costOf(before, after snapshot, pods int) cost {
	n := float64(max(pods, 1))
	c := newCost()
	c.RSS, c.PeakRSS = after.rss, after.peakRSS
	for cluster, a := range after.requests {
		b := before.requests[cluster]
		out := map[string]float64{}
		for k, v := range a {
			if d := v - b[k]; d > 0 {
				out[k] = d / n
			}
		}
		c.Requests[cluster] = out
	}
	for k, v := range after.fleetlet {
		if b, ok := before.fleetlet[k]; ok {
			c.Fleetlet[k] = (v - b) / n
		}
	}
	for k, v := range after.cpu {
		if b, ok := before.cpu[k]; ok {
			c.CPU[k] = (v - b) * 1000 / n
		}
	}
	c.Fallbacks = max(after.fallbacks-before.fallbacks, 0) / n
	for k, v := range after.requeues {
		if d := v - before.requeues[k]; d > 0 {
			c.Requeues[k] = d / n
		}
	}
	for k, v := range after.passes {
		if d := v - before.passes[k]; d > 0 {
			c.Passes[k] = d / n
		}
	}
	for k, v := range after.found {
		if d := v - before.found[k]; d > 0 {
			c.Found[k] = d / n
		}
	}
	return c
}

func newCost() cost {
	return cost{Requests: map[string]map[string]float64{}, Fleetlet: map[string]float64{}, Requeues: map[string]float64{},
		Passes: map[string]float64{}, Found: map[string]float64{}, CPU: map[string]float64{}, RSS: map[string]float64{}, PeakRSS: map[string]float64{}}
}

// total sums a map's values.
func total(m map[string]float64) float64 {
	t := 0.0
	for _, v := range m {
		t += v
	}
	return t
}

// top is a map's n largest entries, "key value" formatted.
func top(m map[string]float64, n int, format string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return m[keys[i]] > m[keys[j]] || (m[keys[i]] == m[keys[j]] && keys[i] < keys[j]) })
	var out []string
	for _, k := range keys[:min(n, len(keys))] {
		out = append(out, fmt.Sprintf("%s "+format, k, m[k]))
	}
	return out
}

// queueDepths are samples of the source manager's workqueue depths, by
// controller name.
type queueDepths map[string][]float64

// sampleQueues reads the source manager's workqueue_depth of the named
// controllers every second until ctx ends; the returned function gives
// the samples so far.
func sampleQueues(ctx context.Context, sb *sandbox.Sandbox, names []string) func() queueDepths {
	var mu sync.Mutex
	out := queueDepths{}
	st := sb.State()
	c, err := st.Cluster(sandbox.SourceCluster)
	if err != nil {
		return func() queueDepths { return nil }
	}
	url := fmt.Sprintf("http://127.0.0.1:%d/metrics", c.Ports.FleetletMetrics)
	go func() {
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			fams, err := scrape(ctx, http.DefaultClient, url)
			if err != nil {
				continue
			}
			f := fams["workqueue_depth"]
			if f == nil {
				continue
			}
			mu.Lock()
			for _, m := range f.GetMetric() {
				name := labels(m)["name"]
				if slices.Contains(names, name) {
					out[name] = append(out[name], m.GetGauge().GetValue())
				}
			}
			mu.Unlock()
		}
	}()
	return func() queueDepths {
		mu.Lock()
		defer mu.Unlock()
		cp := queueDepths{}
		for k, v := range out {
			cp[k] = append([]float64(nil), v...)
		}
		return cp
	}
}

// summary is "name max/mean" of each queue.
func (q queueDepths) summary() string {
	var parts []string
	for _, name := range []string{"proxy", "feedback"} {
		v := q[name]
		if len(v) == 0 {
			continue
		}
		peak, sum := 0.0, 0.0
		for _, x := range v {
			peak = max(peak, x)
			sum += x
		}
		parts = append(parts, fmt.Sprintf("%s %.0f/%.0f", name, peak, sum/float64(len(v))))
	}
	return strings.Join(parts, " ")
}
