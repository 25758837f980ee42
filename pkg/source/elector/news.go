// news: which of the targets' news about a proxy is worth a pass.

package elector

import (
	"k8s.io/apimachinery/pkg/types"

	"github.com/fleetlet/fleetlet/pkg/proxy"
)

// newsWanted says whether news of a target about proxy nn is worth a pass:
// not while the source's cache still shows the proxy as it was before our
// last write of it. That pass would only wait for the cache (a
// CacheBehind pass and its timer); the write's own event brings the proxy
// back, and that pass reads the targets' caches, news included. In a
// burst such passes were nearly half of the elector's (9.7 a proxy of 20.8,
// 500 proxies over 3 targets; docs/performance.md). A proxy the cache
// cannot tell of, or does not have, is news: Reconcile decides.
func (r *Reconciler) newsWanted(_ proxy.TargetKey, nn types.NamespacedName) bool {
	p, err := proxy.Peek(r.client, nn)
	if err != nil {
		return true
	}
	return !r.writes.Stale(p.UID, p.ResourceVersion)
}
