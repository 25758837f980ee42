package gc

import (
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// Metrics of the collector, served with controller-runtime's. The cluster
// label is the Target's key, bounded by the number of targets; its series
// are deleted when the target goes.
var (
	deletedTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "fleetlet_gc_deleted_total",
		Help: "Remote objects whose proxy pod is gone that the garbage collector deleted, by target and kind.",
	}, []string{"cluster", "kind"})
	passesTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "fleetlet_gc_passes_total",
		Help: "Garbage collection passes by result (success or error).",
	}, []string{"result"})
)

func init() {
	metrics.Registry.MustRegister(deletedTotal, passesTotal)
}

func forgetCluster(cluster string) {
	deletedTotal.DeletePartialMatch(prometheus.Labels{"cluster": cluster})
}
