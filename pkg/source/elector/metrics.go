package elector

import (
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

var (
	electionDuration = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "fleetlet_election_duration_seconds",
		Help:    "From a proxy's first reservation to its election record.",
		Buckets: prometheus.ExponentialBuckets(0.01, 2, 14),
	})
	candidatesTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "fleetlet_candidates_total",
		Help: "Candidates created in targets, by cluster and result.",
	}, []string{"cluster", "result"})
	electionsTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "fleetlet_elections_total",
		Help: "Elections by result.",
	}, []string{"result"})
	requeuesTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "fleetlet_elector_requeues_total",
		Help: "Elector passes not caused by a proxy's own or its candidates' events, by reason: timers that fired (a pass asked to run again after a delay and nothing ran it sooner), and proxies enqueued by a change of a target or a virtual node.",
	}, []string{"reason"})
	electionsInFlight = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "fleetlet_elections_in_flight",
		Help: "Proxies holding a slot for their election (--elections-in-flight bounds them per target).",
	})
	candidateFallbacks = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "fleetlet_candidate_fallbacks_total",
		Help: "Proxies whose candidates in the --candidate-targets best-ranked targets all said no (unschedulable or refused), so that every other eligible target got one: how often the ranking missed.",
	})
	passesTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "fleetlet_elector_passes_total",
		Help: "Elector passes, by what each found: the proxy's phase (Electing, Held, Elected, Pinned, Ungated, Finalizing, NotProxy), Gone (no such pod), Unread (the cache did not answer) or CacheBehind (the cache had not seen our last write).",
	}, []string{"found"})
	electionsWaiting = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "fleetlet_elections_waiting",
		Help: "Proxies waiting for a slot before their candidates are made.",
	})
)

func init() {
	metrics.Registry.MustRegister(electionDuration, candidatesTotal, electionsTotal, requeuesTotal, passesTotal, electionsInFlight, electionsWaiting, candidateFallbacks)
}

// What an elector pass found besides a phase (fleetlet_elector_passes_total).
const (
	passGone        = "Gone"
	passUnread      = "Unread"
	passCacheBehind = "CacheBehind"
)

// passPhase is a phase's label in fleetlet_elector_passes_total.
func passPhase(p Phase) string {
	if p == PhaseNotProxy {
		return "NotProxy"
	}
	return string(p)
}

// controllerOptions run elections in parallel (Options.Workers): each is
// driven by watches and waits on nothing but the API servers (the targets'
// mostly), so workers overlap their round trips. Measured with `PODS=300
// make bench` on 2 cores: 16 workers 1m49s to all proxies Running, 64
// workers 1m24s.
func (r *Reconciler) controllerOptions() controller.Options {
	return controller.Options{MaxConcurrentReconciles: r.opts.Workers}
}
