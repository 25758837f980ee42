package main

import (
	"testing"

	"github.com/stretchr/testify/require"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/fleetlet/fleetlet/pkg/version"
)

// TestBuildInfoMetric: fleetlet_build_info is on the registry the manager
// serves, 1, labelled with this binary's build.
func TestBuildInfoMetric(t *testing.T) {
	families, err := metrics.Registry.Gather()
	require.NoError(t, err)
	want := version.Get()
	for _, f := range families {
		if f.GetName() != "fleetlet_build_info" {
			continue
		}
		require.Len(t, f.GetMetric(), 1, "fleetlet_build_info series")
		m := f.GetMetric()[0]
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		require.Falsef(t, m.GetGauge().GetValue() != 1 || labels["version"] != want.Version || labels["commit"] != want.Commit ||
			labels["goversion"] != want.GoVersion || labels["platform"] != want.Platform,
			"fleetlet_build_info %v = %v, want %+v = 1", labels, m.GetGauge().GetValue(), want)
		return
	}
	require.FailNow(t, "fleetlet_build_info is not registered")
}
