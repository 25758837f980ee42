package follow

import (
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// Metrics, served with controller-runtime's. The cluster label is the
// target's name as the caller passes it (fleet.Key.String()), bounded by
// the number of targets; ForgetTarget deletes its series.
var (
	objectsGauge = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "fleetlet_follow_objects",
		Help: "Copies of followed objects this source holds in a target, by target and kind.",
	}, []string{"cluster", "kind"})
	errorsTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "fleetlet_follow_errors_total",
		Help: "Objects that could not be followed to a target, by target and reason (a refusal's reason, SourceGone or Error).",
	}, []string{"cluster", "reason"})
)

func init() {
	metrics.Registry.MustRegister(objectsGauge, errorsTotal)
}

// counts are the copies held per target, kind and namespace: set by each
// garbage-collection pass, adjusted as copies are created and deleted
// between passes.
type counts map[string]map[string]map[string]int

func (f *Follower) setCount(cluster, kind, ns string, n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.countLocked(cluster, kind)[ns] = n
	f.publishLocked(cluster, kind)
}

func (f *Follower) addCount(cluster, kind, ns string, delta int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	byNS := f.countLocked(cluster, kind)
	byNS[ns] = max(0, byNS[ns]+delta)
	f.publishLocked(cluster, kind)
}

func (f *Follower) countLocked(cluster, kind string) map[string]int {
	if f.counts[cluster] == nil {
		f.counts[cluster] = map[string]map[string]int{}
	}
	if f.counts[cluster][kind] == nil {
		f.counts[cluster][kind] = map[string]int{}
	}
	return f.counts[cluster][kind]
}

func (f *Follower) publishLocked(cluster, kind string) {
	total := 0
	for _, n := range f.counts[cluster][kind] {
		total += n
	}
	objectsGauge.WithLabelValues(cluster, kind).Set(float64(total))
}

// ForgetTarget deletes a target's metric series and counts: call it when
// the target is removed.
func (f *Follower) ForgetTarget(cluster string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.counts, cluster)
	objectsGauge.DeletePartialMatch(prometheus.Labels{"cluster": cluster})
	errorsTotal.DeletePartialMatch(prometheus.Labels{"cluster": cluster})
}
