package feedback

import (
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

var updatesTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "fleetlet_feedback_updates_total",
	Help: "Proxy status writes from their delegates, by result (updated, error, deleted: the delegate was deleted so the proxy was).",
}, []string{"result"})

var eventsTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "fleetlet_feedback_events_total",
	Help: "Events about delegates mirrored onto their proxies, by result (mirrored, dropped by the rate limit).",
}, []string{"result"})

func init() {
	metrics.Registry.MustRegister(updatesTotal, eventsTotal)
}
