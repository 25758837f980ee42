package main

import (
	"slices"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"k8s.io/component-base/metrics/legacyregistry"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

// schedulerClientMetrics are the API client's metrics the candidate
// scheduler serves from controller-runtime's registry. client-go takes
// one set of client metrics per process, and in the fleetlet binary
// controller-runtime's registers first, so the scheduler's requests are
// counted in controller-runtime's registry, which kube-scheduler's
// /metrics does not serve: without this, its requests were counted
// nowhere one could read them (the bench could not show them).
var schedulerClientMetrics = []string{"rest_client_requests_total"}

// serveSchedulerClientMetrics adds them to the registry the scheduler's
// /metrics serves (legacyregistry).
func serveSchedulerClientMetrics() {
	legacyregistry.RawMustRegister(&forwardedCounters{from: ctrlmetrics.Registry, names: schedulerClientMetrics})
}

// forwardedCounters collects, at each scrape, the counters named names
// that another registry gathers. It describes nothing (an unchecked
// collector): their labels are whatever the other registry has.
type forwardedCounters struct {
	from  prometheus.Gatherer
	names []string
}

func (f *forwardedCounters) Describe(chan<- *prometheus.Desc) {}

func (f *forwardedCounters) Collect(ch chan<- prometheus.Metric) {
	fams, err := f.from.Gather()
	if err != nil {
		return
	}
	for _, fam := range fams {
		if fam.GetType() != dto.MetricType_COUNTER || !slices.Contains(f.names, fam.GetName()) {
			continue
		}
		for _, m := range fam.GetMetric() {
			var names, values []string
			for _, l := range m.GetLabel() {
				names = append(names, l.GetName())
				values = append(values, l.GetValue())
			}
			desc := prometheus.NewDesc(fam.GetName(), fam.GetHelp(), names, nil)
			if cm, err := prometheus.NewConstMetric(desc, prometheus.CounterValue, m.GetCounter().GetValue(), values...); err == nil {
				ch <- cm
			}
		}
	}
}
