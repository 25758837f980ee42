package candidate

import (
	"sync"

	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
)

// Metrics of the candidate plugin. They are registered in the Kubernetes
// component registry (legacyregistry), which the candidate scheduler serves
// on /metrics beside its own scheduler_* metrics.
const (
	metricsNamespace = "fleetlet"
	metricsSubsystem = "candidate"
)

// Values of the result label of permitTotal.
const (
	permitElected  = "elected"  // the chaperon was already elected: allowed at once
	permitRejected = "rejected" // the chaperon is gone or being deleted
	permitWaiting  = "waiting"  // waits for the election
	permitError    = "error"    // the chaperon could not be read
)

// Values of the result label of waitsTotal and waitDuration.
const (
	waitAllowed  = "allowed"  // the watch saw the chaperon elected
	waitRejected = "rejected" // the watch saw the chaperon deleted
	waitEnded    = "ended"    // the scheduler stopped waiting: Permit timeout, pod deleted or preempted
)

// Values of the operation and result labels of reservationWrites.
const (
	opReserve   = "reserve"
	opUnreserve = "unreserve"

	writeDone      = "written"   // the annotation was written or removed
	writeUnchanged = "unchanged" // the chaperon already was as wanted: no request
	writeGone      = "gone"      // the chaperon is gone, replaced or no longer names the node: nothing to do
	writeRetry     = "retry"     // the request failed and is retried
	writeDropped   = "dropped"   // the request kept failing and was given up
)

var (
	permitTotal = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace:      metricsNamespace,
		Subsystem:      metricsSubsystem,
		Name:           "permit_total",
		Help:           "Candidates seen at Permit, by the plugin's immediate answer: elected (allowed at once), rejected (chaperon gone), waiting, error.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"result"})

	waitsTotal = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace:      metricsNamespace,
		Subsystem:      metricsSubsystem,
		Name:           "waits_total",
		Help:           "Candidates that waited at Permit, by how the wait ended: allowed (elected), rejected (chaperon deleted), ended (timeout, pod deleted or preempted).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"result"})

	waitDuration = metrics.NewHistogramVec(&metrics.HistogramOpts{
		Namespace:      metricsNamespace,
		Subsystem:      metricsSubsystem,
		Name:           "wait_duration_seconds",
		Help:           "How long candidates waited at Permit, by how the wait ended.",
		Buckets:        metrics.ExponentialBuckets(0.01, 2, 17), // 10ms to about 11 minutes
		StabilityLevel: metrics.ALPHA,
	}, []string{"result"})

	waitingPods = metrics.NewGauge(&metrics.GaugeOpts{
		Namespace:      metricsNamespace,
		Subsystem:      metricsSubsystem,
		Name:           "waiting_pods",
		Help:           "Candidates waiting at Permit for their election.",
		StabilityLevel: metrics.ALPHA,
	})

	reservationWrites = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace:      metricsNamespace,
		Subsystem:      metricsSubsystem,
		Name:           "reservation_writes_total",
		Help:           "Writes of the multicluster.fleetlet.io/reserved annotation, by operation (reserve, unreserve) and result (written, unchanged, gone, retry, dropped).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"operation", "result"})

	reservationLatency = metrics.NewHistogram(&metrics.HistogramOpts{
		Namespace:      metricsNamespace,
		Subsystem:      metricsSubsystem,
		Name:           "reservation_latency_seconds",
		Help:           "Time from Reserve to the reservation written on the chaperon.",
		Buckets:        metrics.ExponentialBuckets(0.001, 2, 16), // 1ms to about 33s
		StabilityLevel: metrics.ALPHA,
	})

	registerOnce sync.Once
)

// registerMetrics registers the plugin's metrics once per process;
// unregistered component-base metrics record nothing.
func registerMetrics() {
	registerOnce.Do(func() {
		legacyregistry.MustRegister(permitTotal, waitsTotal, waitDuration, waitingPods, reservationWrites, reservationLatency)
	})
}
