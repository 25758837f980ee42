package fleet

import (
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strings"
)

// HostAllowList says which API servers a Target's kubeconfig may name: a
// namespaced Target is written by a namespace's users, and without a list
// they could point the manager at any address it reaches (its probes' errors
// would map the internal network). Empty allows any https host.
type HostAllowList struct {
	names    []string // exact host names, or "*.suffix" for any subdomain
	prefixes []netip.Prefix
}

// ParseHostAllowList parses entries: host names ("api.example.com"),
// wildcards ("*.clusters.example.com": any name under it, not the suffix
// itself), IP addresses and CIDRs ("10.0.0.0/8", "fd00::/8").
func ParseHostAllowList(entries []string) (HostAllowList, error) {
	var l HostAllowList
	for _, e := range entries {
		e = strings.TrimSpace(strings.ToLower(e))
		switch {
		case e == "":
		case strings.Contains(e, "/"):
			p, err := netip.ParsePrefix(e)
			if err != nil {
				return HostAllowList{}, fmt.Errorf("allowed target host %q: %w", e, err)
			}
			l.prefixes = append(l.prefixes, p.Masked())
		default:
			if a, err := netip.ParseAddr(e); err == nil {
				l.prefixes = append(l.prefixes, netip.PrefixFrom(a, a.BitLen()))
				continue
			}
			if strings.Contains(strings.TrimPrefix(e, "*."), "*") {
				return HostAllowList{}, fmt.Errorf("allowed target host %q: a wildcard is allowed only as the first label (*.example.com)", e)
			}
			l.names = append(l.names, e)
		}
	}
	return l, nil
}

// Empty reports whether the list allows any host.
func (l HostAllowList) Empty() bool { return len(l.names) == 0 && len(l.prefixes) == 0 }

// Allows reports whether the API server at server (an https URL) may be
// contacted. An IP address must be in one of the prefixes; a name must match
// one of the names (it is not resolved: a name is allowed by name).
func (l HostAllowList) Allows(server string) bool {
	if l.Empty() {
		return true
	}
	u, err := url.Parse(server)
	if err != nil {
		return false
	}
	host := strings.ToLower(u.Hostname())
	if a, err := netip.ParseAddr(host); err == nil {
		a = a.Unmap()
		for _, p := range l.prefixes {
			if p.Contains(a) {
				return true
			}
		}
		return false
	}
	host = strings.TrimSuffix(host, ".")
	for _, n := range l.names {
		if suffix, ok := strings.CutPrefix(n, "*"); ok {
			if strings.HasSuffix(host, suffix) && len(host) > len(suffix) {
				return true
			}
			continue
		}
		if host == n {
			return true
		}
	}
	return false
}

// String lists the entries, for messages.
func (l HostAllowList) String() string {
	out := append([]string(nil), l.names...)
	for _, p := range l.prefixes {
		if p.IsSingleIP() {
			out = append(out, p.Addr().String())
		} else {
			out = append(out, p.String())
		}
	}
	return strings.Join(out, ", ")
}

// hostOf returns the host part of a server URL, for messages.
func hostOf(server string) string {
	u, err := url.Parse(server)
	if err != nil {
		return server
	}
	if h, _, err := net.SplitHostPort(u.Host); err == nil {
		return h
	}
	return u.Host
}
