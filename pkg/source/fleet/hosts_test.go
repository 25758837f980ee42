package fleet

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestHostAllowList(t *testing.T) {
	l, err := ParseHostAllowList([]string{"api.example.com", "*.clusters.example.com", "10.0.0.0/8", "192.168.1.7", "fd00::/8"})
	require.NoError(t, err)
	for server, want := range map[string]bool{
		"https://api.example.com:6443":         true,
		"https://API.example.com.":             true,
		"https://other.example.com":            false,
		"https://a.clusters.example.com":       true,
		"https://a.b.clusters.example.com:443": true,
		"https://clusters.example.com":         false, // the wildcard is for names under it
		"https://evilclusters.example.com":     false,
		"https://10.1.2.3:6443":                true,
		"https://11.1.2.3:6443":                false,
		"https://192.168.1.7":                  true,
		"https://192.168.1.8":                  false,
		"https://[fd00::1]:6443":               true,
		"https://[::ffff:10.0.0.1]:6443":       true, // v4-mapped
		"https://169.254.169.254":              false,
		"https://localhost":                    false,
	} {
		got := l.Allows(server)
		assert.Falsef(t, got != want, "Allows(%q) = %t, want %t", server, got, want)
	}
	empty, _ := ParseHostAllowList(nil)
	assert.True(t, empty.Allows("https://169.254.169.254"), "an empty list must allow any host")
	for _, bad := range []string{"10.0.0.0/33", "a.*.example.com", "*.*.example.com"} {
		if _, err := ParseHostAllowList([]string{bad}); err == nil {
			assert.Failf(t, "ParseHostAllowList", "ParseHostAllowList(%q) accepted it", bad)
		}
	}
}
