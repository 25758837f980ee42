package kubeletapi

import (
	"context"
	"errors"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	metricsv1beta1 "k8s.io/metrics/pkg/apis/metrics/v1beta1"

	"github.com/fleetlet/fleetlet/pkg/proxy"
)

var t0 = time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)

func TestCountersNeverGoBackwards(t *testing.T) {
	var c counters
	k := counterKey{uid: "u1", container: "main"}
	steps := []struct {
		name   string
		rate   float64
		at     time.Time
		window time.Duration
		want   float64
	}{
		{"a first sample counts its window", 0.5, t0, 20 * time.Second, 10},
		{"the next integrates the rate since the last", 2, t0.Add(15 * time.Second), 20 * time.Second, 40},
		{"an older sample (another metrics-server replica) changes nothing", 9, t0.Add(5 * time.Second), 20 * time.Second, 40},
		{"the same sample again changes nothing", 2, t0.Add(15 * time.Second), 20 * time.Second, 40},
		{"a replaced delegate's first sample continues the proxy's count", 1, t0.Add(75 * time.Second), 20 * time.Second, 100},
	}
	for _, s := range steps {
		assert.Equal(t, s.want, c.add(k, s.rate, s.at, s.window), s.name)
	}
	c.add(counterKey{uid: "u2", container: "main"}, 1, t0, time.Second)
	c.add(nodeKey, 1, t0, 0)
	c.keep(map[types.UID]bool{"u1": true})
	assert.NotContains(t, c.m, counterKey{uid: "u2", container: "main"}, "the counter of a proxy gone from the node was kept")
	assert.Contains(t, c.m, nodeKey, "the node's counter was dropped")
	got := c.add(k, 0, t0.Add(80*time.Second), 0)
	assert.Equal(t, 100.0, got, "a kept counter restarted")
}

func running(p *corev1.Pod, uid types.UID, started time.Time) *corev1.Pod {
	p.UID = uid
	p.Status.Phase = corev1.PodRunning
	p.Status.StartTime = &metav1.Time{Time: started}
	p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "main", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(started)}}}}
	return p
}

func sample(name string, at time.Time, cpu, mem string) metricsv1beta1.PodMetrics {
	return metricsv1beta1.PodMetrics{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "apps"},
		Timestamp: metav1.NewTime(at), Window: metav1.Duration{Duration: 10 * time.Second},
		Containers: []metricsv1beta1.ContainerMetrics{{Name: "main", Usage: corev1.ResourceList{
			corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse(mem)}}}}
}

// usageFixture: node fleetlet-cluster-2 holds web-1 and web-2 (fresh
// samples), web-3 (a stale sample), web-4 (Pending), web-5 (elected in
// cluster-3, whose metrics cannot be read: a test stand-in for a target
// out of reach) and web-6 (elected in cluster-9, not connected).
func usageFixture(samples map[string][]metricsv1beta1.PodMetrics) *nodeHandlers {
	const node = "fleetlet-cluster-2"
	in2 := func(c string) *proxy.Record { return &proxy.Record{TargetName: "cluster-2", Chaperon: c} }
	pending := proxyPod("web-4", node, in2("web-4-d"))
	return &nodeHandlers{
		node: node,
		targets: fakeTargets{
			"/cluster-2": {Host: "https://cluster-2"},
			"/cluster-3": {Host: "https://cluster-3"},
		},
		source: sourceWith(
			running(proxyPod("web-1", node, in2("web-1-d")), "u1", t0.Add(-time.Hour)),
			running(proxyPod("web-2", node, in2("web-2-d")), "u2", t0.Add(-time.Hour)),
			running(proxyPod("web-3", node, in2("web-3-d")), "u3", t0.Add(-time.Hour)),
			pending,
			running(proxyPod("web-5", node, &proxy.Record{TargetName: "cluster-3", Chaperon: "web-5-d"}), "u5", t0.Add(-time.Hour)),
			running(proxyPod("web-6", node, &proxy.Record{TargetName: "cluster-9", Chaperon: "web-6-d"}), "u6", t0.Add(-time.Hour)),
		),
		podMetrics: func(_ context.Context, d delegate, ns string) ([]metricsv1beta1.PodMetrics, error) {
			if d.config.Host == "https://cluster-3" {
				return nil, errors.New("connection refused")
			}
			return samples[d.config.Host], nil
		},
	}
}

func TestUsageLeavesOutWhatIsNotFresh(t *testing.T) {
	now := t0.Add(30 * time.Second)
	h := usageFixture(map[string][]metricsv1beta1.PodMetrics{"https://cluster-2": {
		sample("web-1-d", t0.Add(20*time.Second), "250m", "64Mi"),
		sample("web-2-d", t0.Add(25*time.Second), "1", "128Mi"),
		sample("web-3-d", t0.Add(-5*time.Minute), "3", "1Gi"),
		sample("web-4-d", t0.Add(25*time.Second), "3", "1Gi"),
	}})
	u := h.usage(context.Background(), now)
	var names []string
	for _, p := range u.pods {
		names = append(names, p.name)
	}
	assert.Equal(t, "web-1,web-2", strings.Join(names, ","), "pods reported, want web-1 and web-2 only (web-3 stale, web-4 Pending, web-5 unreadable)")
	err := errors.Join(u.errs...)
	assert.Falsef(t, len(u.errs) != 2 || !strings.Contains(err.Error(), "target cluster-3") || !strings.Contains(err.Error(), "cluster-9, which is not connected"),
		"errors %v, want two, naming target cluster-3 and the unconnected cluster-9", u.errs)
	assert.Falsef(t, u.cpuCores != 1.25 || u.memory != (64+128)<<20, "node totals %g cores, %d bytes; want 1.25 cores and 192Mi", u.cpuCores, u.memory)
	assert.Truef(t, u.at.Equal(t0.Add(25*time.Second)), "node sample time %s, want the newest delegate sample's", u.at)
	c := u.pods[0].containers[0]
	assert.Falsef(t, c.cpuSeconds != 2.5 || !c.start.Equal(t0.Add(-time.Hour)), "web-1 main: %g s since %s, want 2.5 s (250m over its 10 s window) since the proxy's start", c.cpuSeconds, c.start)
}

func TestResourceMetricsText(t *testing.T) {
	h := usageFixture(map[string][]metricsv1beta1.PodMetrics{"https://cluster-2": {
		sample("web-1-d", t0.Add(20*time.Second), "500m", "64Mi"),
		sample("web-2-d", t0.Add(20*time.Second), "1", "128Mi"),
	}})
	scrape := func(now time.Time) map[string][]textSample {
		t.Helper()
		rec := httptest.NewRecorder()
		writeResourceMetrics(rec, httptest.NewRequest("GET", "/metrics/resource", nil), h.usage(context.Background(), now))
		p := expfmt.NewTextParser(model.UTF8Validation)
		fams, err := p.TextToMetricFamilies(rec.Body)
		require.NoError(t, err, "parsing /metrics/resource")
		out := map[string][]textSample{}
		for name, f := range fams {
			for _, m := range f.Metric {
				s := textSample{labels: map[string]string{}, ms: m.GetTimestampMs()}
				for _, l := range m.Label {
					s.labels[l.GetName()] = l.GetValue()
				}
				switch {
				case m.Counter != nil:
					s.value = m.Counter.GetValue()
				case m.Gauge != nil:
					s.value = m.Gauge.GetValue()
				}
				out[name] = append(out[name], s)
			}
		}
		return out
	}
	first := scrape(t0.Add(30 * time.Second))
	want := map[string]float64{
		"node_cpu_usage_seconds_total": 0, "node_memory_working_set_bytes": (64 + 128) << 20, "scrape_error": 1,
	}
	for name, v := range want {
		s := first[name]
		assert.Falsef(t, len(s) != 1 || s[0].value != v, "%s = %v, want one sample of %g", name, s, v)
	}
	for _, name := range []string{"container_cpu_usage_seconds_total", "container_memory_working_set_bytes", "container_start_time_seconds", "pod_cpu_usage_seconds_total", "pod_memory_working_set_bytes"} {
		assert.Len(t, first[name], 2, "%s: want one sample per fresh proxy (2)", name)
	}
	c := first["container_cpu_usage_seconds_total"][0]
	assert.Falsef(t, c.labels["container"] != "main" || c.labels["namespace"] != "apps" || c.labels["pod"] != "web-1" || c.value != 5, "web-1's CPU sample %v, want container=main namespace=apps pod=web-1 5 (500m over 10 s)", c)
	assert.Equal(t, t0.Add(20*time.Second).UnixMilli(), c.ms, "web-1's CPU sample stamp, want its delegate's sample time")
	assert.Equal(t, float64(t0.Add(-time.Hour).Unix()), first["container_start_time_seconds"][0].value, "web-1's start, want the proxy's container start")

	// 10 s later both samples are newer: the counts grow by rate × 10 s.
	h.podMetrics = func(_ context.Context, d delegate, _ string) ([]metricsv1beta1.PodMetrics, error) {
		return []metricsv1beta1.PodMetrics{sample("web-1-d", t0.Add(30*time.Second), "500m", "64Mi"), sample("web-2-d", t0.Add(30*time.Second), "1", "100Mi")}, nil
	}
	second := scrape(t0.Add(40 * time.Second))
	assert.Equal(t, 15.0, second["node_cpu_usage_seconds_total"][0].value, "node CPU after 10 s at 1.5 cores")
	assert.Equal(t, 10.0, second["container_cpu_usage_seconds_total"][0].value, "web-1 CPU after 10 s more at 500m")
	h.source = sourceWith(running(proxyPod("web-1", h.node, &proxy.Record{TargetName: "cluster-2", Chaperon: "web-1-d"}), "u1", t0.Add(-time.Hour)),
		running(proxyPod("web-2", h.node, &proxy.Record{TargetName: "cluster-2", Chaperon: "web-2-d"}), "u2", t0.Add(-time.Hour)))
	assert.Equal(t, 0.0, scrape(t0.Add(40 * time.Second))["scrape_error"][0].value, "scrape_error with every target read, want 0")
}

type textSample struct {
	labels map[string]string
	value  float64
	ms     int64
}

func TestStatsSummary(t *testing.T) {
	h := usageFixture(map[string][]metricsv1beta1.PodMetrics{"https://cluster-2": {
		sample("web-1-d", t0.Add(20*time.Second), "500m", "64Mi"),
		sample("web-2-d", t0.Add(10*time.Second), "1", "128Mi"),
	}})
	s := summary(h.node, t0.Add(-2*time.Hour), h.usage(context.Background(), t0.Add(30*time.Second)))
	assert.Falsef(t, s.Node.NodeName != "fleetlet-cluster-2" || *s.Node.CPU.UsageNanoCores != 1.5e9 || *s.Node.Memory.WorkingSetBytes != 192<<20, "node %s: %d nanocores, %d bytes; want fleetlet-cluster-2, 1.5e9, 192Mi", s.Node.NodeName, *s.Node.CPU.UsageNanoCores, *s.Node.Memory.WorkingSetBytes)
	assert.Truef(t, s.Node.StartTime.Time.Equal(t0.Add(-2*time.Hour)), "node start %s, want its kubelet API's", s.Node.StartTime)
	require.Len(t, s.Pods, 2, "pods, want the two with fresh samples")
	p := s.Pods[0]
	assert.Falsef(t, p.PodRef.Name != "web-1" || p.PodRef.UID != "u1" || len(p.Containers) != 1 || *p.Containers[0].CPU.UsageCoreNanoSeconds != 5e9 ||
		!p.CPU.Time.Time.Equal(t0.Add(20*time.Second)) || !p.StartTime.Time.Equal(t0.Add(-time.Hour)),
		"web-1: %+v", p)
}
