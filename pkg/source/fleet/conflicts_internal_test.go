package fleet

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/fleetlet/fleetlet/pkg/proxy"
)

// The order of two claims on a node name or a cluster: holding it first,
// then the creation time, then the key. creationTimestamp has one-second
// resolution: a claim made within the second of one that holds must not win
// on the key (the reverted 877f361 ranked "ns-x" before "ns/x").
func TestClaimOrder(t *testing.T) {
	t0 := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	target := proxy.TargetKey{Namespace: "ns", Name: "x"}
	clusterTarget := proxy.TargetKey{Name: "ns-x"}
	for _, tc := range []struct {
		name  string
		a, b  claim
		first bool
	}{
		{"the holder wins a tie", claim{key: target, created: t0, holds: true}, claim{key: clusterTarget, created: t0}, true},
		{"the holder wins over an older one", claim{key: target, created: t0.Add(time.Hour), holds: true}, claim{key: clusterTarget, created: t0}, true},
		{"neither holds: the older", claim{key: target, created: t0}, claim{key: clusterTarget, created: t0.Add(time.Second)}, true},
		{"neither holds, a tie: the smaller key", claim{key: target, created: t0}, claim{key: clusterTarget, created: t0}, false},
		{"both hold: the older", claim{key: clusterTarget, created: t0, holds: true}, claim{key: target, created: t0.Add(time.Second), holds: true}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.a.before(tc.b); got != tc.first {
				assert.Failf(t, "before", "%+v before %+v = %t, want %t", tc.a, tc.b, got, tc.first)
			}
			if got := tc.b.before(tc.a); got == tc.first {
				assert.Failf(t, "the order is not antisymmetric", "the order is not antisymmetric: %+v before %+v = %t", tc.b, tc.a, got)
			}
		})
	}
}
