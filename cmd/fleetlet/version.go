package main

import (
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/fleetlet/fleetlet/pkg/version"
)

// buildInfo is fleetlet_build_info: 1, labelled with this binary's build, on
// the manager's metrics endpoint (controller-runtime's registry), so that a
// fleet's versions can be read from Prometheus during an upgrade.
var buildInfo = prometheus.NewGaugeVec(prometheus.GaugeOpts{
	Name: "fleetlet_build_info",
	Help: "The fleetlet build that runs: always 1, labelled with its version, commit, Go version and platform.",
}, []string{"version", "commit", "goversion", "platform"})

func init() {
	metrics.Registry.MustRegister(buildInfo)
	info := version.Get()
	buildInfo.WithLabelValues(info.Version, info.Commit, info.GoVersion, info.Platform).Set(1)
}
