package config

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestCRDsEmbedsEveryKind(t *testing.T) {
	crds, err := CRDs()
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, c := range crds {
		if c.Spec.Group != "multicluster.fleetlet.io" {
			t.Errorf("%s: group %q", c.Name, c.Spec.Group)
		}
		kinds = append(kinds, c.Spec.Names.Kind)
	}
	want := []string{"ClusterSource", "ClusterSummary", "ClusterTarget", "PodChaperon", "Source", "Target"}
	if diff := cmp.Diff(want, kinds); diff != "" {
		t.Errorf("embedded CRD kinds (-want,+got):\n%s", diff)
	}
}
