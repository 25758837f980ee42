package fleet

import (
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/fleetlet/fleetlet/pkg/proxy"
)

// Metrics of the target registry, served with controller-runtime's. The
// cluster label is the Target's key (namespace/name, or the ClusterTarget's
// name): bounded by the number of targets, deleted when a target goes.
var (
	targetReady = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "fleetlet_target_ready",
		Help: "Whether the target answered its last probe, accepted the credentials and runs fleetlet (1) or not (0).",
	}, []string{"cluster"})
	targetProbes = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "fleetlet_target_probes_total",
		Help: "Probes of each target by result (the Ready reason).",
	}, []string{"cluster", "result"})
	targetProbeDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "fleetlet_target_probe_duration_seconds",
		Help:    "How long probing a target took.",
		Buckets: prometheus.ExponentialBuckets(0.005, 2, 12),
	}, []string{"cluster"})
)

func init() {
	metrics.Registry.MustRegister(targetReady, targetProbes, targetProbeDuration)
}

func observeProbe(key proxy.TargetKey, h Health, seconds float64) {
	cluster := key.String()
	targetProbes.WithLabelValues(cluster, h.Reason).Inc()
	targetProbeDuration.WithLabelValues(cluster).Observe(seconds)
}

// observeHealth is the target's recorded health (a failed probe below the
// failure threshold leaves it Ready).
func observeHealth(key proxy.TargetKey, h Health) {
	cluster := key.String()
	ready := 0.0
	if h.Ready {
		ready = 1
	}
	targetReady.WithLabelValues(cluster).Set(ready)
}

func forgetTarget(key proxy.TargetKey) {
	cluster := key.String()
	targetReady.DeleteLabelValues(cluster)
	targetProbeDuration.DeleteLabelValues(cluster)
	targetProbes.DeletePartialMatch(prometheus.Labels{"cluster": cluster})
}
