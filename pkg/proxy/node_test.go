package proxy

import (
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/util/validation"
)

// hashed matches a name that ends with a dash and 8 hex digits after an
// alphanumeric character.
var hashed = regexp.MustCompile(`[a-z0-9]-[0-9a-f]{8}$`)

func TestNodeName(t *testing.T) {
	long := strings.Repeat("a", 60)
	cases := []struct {
		name string
		key  TargetKey
		// want is the exact name, or empty to check only its prefix and
		// that it is hashed.
		want       string
		wantPrefix string
	}{
		{name: "cluster target", key: TargetKey{Name: "cluster-2"}, want: "fleetlet-cluster-2"},
		{name: "namespaced target", key: TargetKey{Namespace: "team-a", Name: "cluster-2"}, want: "fleetlet-team-a-cluster-2"},
		{name: "exactly 63 characters is kept", key: TargetKey{Name: strings.Repeat("b", 54)}, want: "fleetlet-" + strings.Repeat("b", 54)},
		{name: "64 characters is hashed", key: TargetKey{Name: strings.Repeat("b", 55)}, wantPrefix: "fleetlet-" + strings.Repeat("b", 45)},
		{name: "long namespaced target is hashed", key: TargetKey{Namespace: long, Name: "x"}, wantPrefix: "fleetlet-" + long[:45]},
		{name: "dots are replaced and the name hashed", key: TargetKey{Name: "eu.west.1"}, wantPrefix: "fleetlet-eu-west-1-"},
		{name: "invalid characters", key: TargetKey{Name: "Prod_Cluster"}, wantPrefix: "fleetlet-prod-cluster-"},
		{name: "trailing invalid character", key: TargetKey{Name: "edge_"}, wantPrefix: "fleetlet-edge-"},
		{name: "cut before a dash", key: TargetKey{Name: strings.Repeat("c", 44) + "-" + strings.Repeat("d", 20)}, wantPrefix: "fleetlet-" + strings.Repeat("c", 44) + "-"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := NodeName(tc.key)
			require.Empty(t, validation.IsDNS1123Label(got), "NodeName(%v) = %q, not a DNS label", tc.key, got)
			require.Empty(t, validation.IsValidLabelValue(got), "NodeName(%v) = %q, not a label value", tc.key, got)
			require.Equal(t, got, NodeName(tc.key), "NodeName(%v) is not stable", tc.key)
			if tc.want != "" {
				assert.Equal(t, tc.want, got, "NodeName(%v)", tc.key)
				return
			}
			assert.Truef(t, strings.HasPrefix(got, tc.wantPrefix), "NodeName(%v) = %q, want prefix %q", tc.key, got, tc.wantPrefix)
			assert.Truef(t, hashed.MatchString(got), "NodeName(%v) = %q does not end with -<%d hex digits>", tc.key, got, nameHashLen)
		})
	}
}

// Names that are cut or changed stay apart, and from the plain names they
// could be confused with.
func TestNodeNameDistinct(t *testing.T) {
	long := strings.Repeat("x", 80)
	keys := []TargetKey{
		{Name: long + "1"},
		{Name: long + "2"},
		{Namespace: "ns", Name: long + "1"},
		{Namespace: strings.Repeat("n", 63), Name: "a"},
		{Namespace: strings.Repeat("n", 63), Name: "b"},
		{Name: "a.b"},
		{Name: "a-b"},
		{Name: "a_b"},
		{Namespace: "a", Name: "b.c"},
		{Namespace: "a", Name: "b-c"},
	}
	seen := map[string]TargetKey{}
	for _, k := range keys {
		n := NodeName(k)
		other, ok := seen[n]
		assert.Falsef(t, ok, "NodeName(%v) = NodeName(%v) = %q", k, other, n)
		seen[n] = k
	}
}
