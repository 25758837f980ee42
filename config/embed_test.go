package config

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestCRDsEmbedsEveryKind(t *testing.T) {
	crds, err := CRDs()
	require.NoError(t, err)
	var kinds []string
	for _, c := range crds {
		assert.Equal(t, "multicluster.fleetlet.io", c.Spec.Group, "%s: group", c.Name)
		kinds = append(kinds, c.Spec.Names.Kind)
	}
	want := []string{"ClusterSource", "ClusterSummary", "ClusterTarget", "PodChaperon", "Source", "Target"}
	assert.Empty(t, cmp.Diff(want, kinds), "embedded CRD kinds (-want,+got)")
}
