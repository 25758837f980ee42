package feedback

import (
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
)

// FuzzTranslatePodIPs: whatever pod IPs a target reports for a delegate,
// the proxy publishes only unicast addresses a pod can have, each family at
// most once, podIP first of podIPs: what the API server accepts and what a
// Service may route to.
func FuzzTranslatePodIPs(f *testing.F) {
	for _, seed := range [][3]string{
		{"10.0.0.5", "10.0.0.5", "fd00::5"},
		{"", "127.0.0.1", "169.254.169.254"},
		{"not-an-ip", "::1", "fe80::1%eth0"},
		{"224.0.0.1", "0.0.0.0", "::ffff:10.1.2.3"},
		{"10.0.0.5", "10.0.0.6", "10.0.0.7"},
	} {
		f.Add(seed[0], seed[1], seed[2])
	}
	f.Fuzz(func(t *testing.T, podIP, first, second string) {
		delegate := &corev1.PodStatus{Phase: corev1.PodRunning, PodIP: podIP, PodIPs: []corev1.PodIP{{IP: first}, {IP: second}}}
		if first == "" && second == "" {
			delegate.PodIPs = nil
		}
		out := Translate(&corev1.Pod{}, delegate, "192.0.2.1")
		require.Falsef(t, (out.PodIP == "") != (len(out.PodIPs) == 0) || (out.PodIP != "" && out.PodIP != out.PodIPs[0].IP), "podIP %q, podIPs %v: podIP must be the first of podIPs", out.PodIP, out.PodIPs)
		families := map[bool]bool{}
		for _, ip := range out.PodIPs {
			addr, err := netip.ParseAddr(ip.IP)
			require.Falsef(t, err != nil || addr.String() != ip.IP || addr.Zone() != "" || addr.Is4In6(), "published %q, not a canonical address", ip.IP)
			require.Falsef(t, addr.IsLoopback() || addr.IsUnspecified() || addr.IsMulticast() || addr.IsLinkLocalUnicast() || addr.IsLinkLocalMulticast() || addr.IsInterfaceLocalMulticast(), "published %q, which no pod has", ip.IP)
			require.Falsef(t, families[addr.Is4()], "published two addresses of one family: %v", out.PodIPs)
			families[addr.Is4()] = true
		}
	})
}
