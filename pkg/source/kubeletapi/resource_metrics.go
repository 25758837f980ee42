package kubeletapi

import (
	"errors"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
)

// The metrics of a kubelet's /metrics/resource that metrics-server reads,
// with the kubelet's names, labels and help.
var (
	nodeCPUDesc = prometheus.NewDesc("node_cpu_usage_seconds_total",
		"Cumulative cpu time consumed by the node in core-seconds", nil, nil)
	nodeMemoryDesc = prometheus.NewDesc("node_memory_working_set_bytes",
		"Current working set of the node in bytes", nil, nil)
	podCPUDesc = prometheus.NewDesc("pod_cpu_usage_seconds_total",
		"Cumulative cpu time consumed by the pod in core-seconds", []string{"namespace", "pod"}, nil)
	podMemoryDesc = prometheus.NewDesc("pod_memory_working_set_bytes",
		"Current working set of the pod in bytes", []string{"namespace", "pod"}, nil)
	containerCPUDesc = prometheus.NewDesc("container_cpu_usage_seconds_total",
		"Cumulative cpu time consumed by the container in core-seconds", []string{"container", "namespace", "pod"}, nil)
	containerMemoryDesc = prometheus.NewDesc("container_memory_working_set_bytes",
		"Current working set of the container in bytes", []string{"container", "namespace", "pod"}, nil)
	containerStartDesc = prometheus.NewDesc("container_start_time_seconds",
		"Start time of the container since unix epoch in seconds", []string{"container", "namespace", "pod"}, nil)
	scrapeErrorDesc = prometheus.NewDesc("scrape_error",
		"1 if there was an error while getting container metrics, 0 otherwise", nil, nil)
)

// resourceCollector renders one scrape's usage as a kubelet's
// /metrics/resource: each sample stamped with its delegate's sample time.
type resourceCollector struct{ u nodeUsage }

func (c resourceCollector) Describe(ch chan<- *prometheus.Desc) {
	prometheus.DescribeByCollect(c, ch)
}

func (c resourceCollector) Collect(ch chan<- prometheus.Metric) {
	at := func(t time.Time, m prometheus.Metric) { ch <- prometheus.NewMetricWithTimestamp(t, m) }
	u := c.u
	at(u.at, prometheus.MustNewConstMetric(nodeCPUDesc, prometheus.CounterValue, u.cpuSeconds))
	at(u.at, prometheus.MustNewConstMetric(nodeMemoryDesc, prometheus.GaugeValue, float64(u.memory)))
	for _, p := range u.pods {
		at(p.at, prometheus.MustNewConstMetric(podCPUDesc, prometheus.CounterValue, p.cpuSeconds(), p.namespace, p.name))
		at(p.at, prometheus.MustNewConstMetric(podMemoryDesc, prometheus.GaugeValue, float64(p.memory()), p.namespace, p.name))
		for _, k := range p.containers {
			at(p.at, prometheus.MustNewConstMetric(containerCPUDesc, prometheus.CounterValue, k.cpuSeconds, k.name, p.namespace, p.name))
			at(p.at, prometheus.MustNewConstMetric(containerMemoryDesc, prometheus.GaugeValue, float64(k.memory), k.name, p.namespace, p.name))
			if !k.start.IsZero() {
				ch <- prometheus.MustNewConstMetric(containerStartDesc, prometheus.GaugeValue, float64(k.start.UnixNano())/1e9, k.name, p.namespace, p.name)
			}
		}
	}
	failed := 0.0
	if len(u.errs) > 0 {
		failed = 1
	}
	ch <- prometheus.MustNewConstMetric(scrapeErrorDesc, prometheus.GaugeValue, failed)
}

// serveResourceMetrics answers /metrics/resource for the proxies bound to
// the node, from their delegates' usage in the target. What could not be
// read is left out, scrape_error is 1, and the errors are logged.
func (h *nodeHandlers) serveResourceMetrics(w http.ResponseWriter, r *http.Request) {
	u := h.usage(r.Context(), time.Now())
	if err := errors.Join(u.errs...); err != nil {
		ctrllog.FromContext(r.Context()).V(1).Info("Usage left out of /metrics/resource", "error", err.Error())
	}
	writeResourceMetrics(w, r, u)
}

func writeResourceMetrics(w http.ResponseWriter, r *http.Request, u nodeUsage) {
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(resourceCollector{u: u}); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError}).ServeHTTP(w, r)
}
