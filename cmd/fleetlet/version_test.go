package main

import (
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/fleetlet/fleetlet/pkg/version"
)

// TestBuildInfoMetric: fleetlet_build_info is on the registry the manager
// serves, 1, labelled with this binary's build.
func TestBuildInfoMetric(t *testing.T) {
	families, err := metrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	want := version.Get()
	for _, f := range families {
		if f.GetName() != "fleetlet_build_info" {
			continue
		}
		if len(f.GetMetric()) != 1 {
			t.Fatalf("fleetlet_build_info has %d series, want 1", len(f.GetMetric()))
		}
		m := f.GetMetric()[0]
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		if m.GetGauge().GetValue() != 1 || labels["version"] != want.Version || labels["commit"] != want.Commit ||
			labels["goversion"] != want.GoVersion || labels["platform"] != want.Platform {
			t.Fatalf("fleetlet_build_info %v = %v, want %+v = 1", labels, m.GetGauge().GetValue(), want)
		}
		return
	}
	t.Fatal("fleetlet_build_info is not registered")
}
