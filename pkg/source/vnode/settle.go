package vnode

import (
	"time"

	corev1 "k8s.io/api/core/v1"
)

// A virtual node's allocatable is its target's free room plus what the
// proxies counting on it request (Allocatable), so it moves with every
// election (a proxy starts counting) and every ClusterSummary (the
// delegate starts counting in the target's requests), most often back to
// where it was: one status write per election, and as many watch events
// in every node informer of the source, for a figure nobody needed yet.
//
// Such a change waits (up to Config.ResourceInterval) when the node as
// last written still covers every proxy counting on it: each resource at
// least what those proxies request. Then every pinned proxy fits the
// node the source scheduler sees, which is what the figure is for. A
// change the proxies need (one more proxy than the written node has room
// for), and any change of labels or conditions, is written at once.

// holdsBack reports whether n, newly built, may wait before it is written
// over written: only its resources differ, written covers the proxies,
// and written is younger than the interval.
func (c *Controller) holdsBack(vn *virtualNode, n *corev1.Node, proxies corev1.ResourceList) bool {
	written := vn.built
	if c.cfg.ResourceInterval <= 0 || c.cfg.Clock.Since(vn.builtAt) >= c.cfg.ResourceInterval {
		return false
	}
	if !covers(written.Status.Allocatable, proxies) {
		return false
	}
	same := *n // the struct only: its status's resource lists are replaced, never written
	same.Status.Allocatable, same.Status.Capacity = written.Status.Allocatable, written.Status.Capacity
	return sameNode(written, &same)
}

// covers reports whether allocatable holds, for each resource, at least
// what the proxies request (the pod count under "pods").
func covers(allocatable, proxies corev1.ResourceList) bool {
	for name, q := range proxies {
		if a := allocatable[name]; !q.IsZero() && a.Cmp(q) < 0 {
			return false
		}
	}
	return true
}

// settleLater writes vn's node once the interval since the last write has
// passed, whatever it shows then; one timer per node at a time.
func (c *Controller) settleLater(vn *virtualNode) {
	if vn.settling {
		return
	}
	vn.settling = true
	wait := max(c.cfg.ResourceInterval-c.cfg.Clock.Since(vn.builtAt), 0)
	time.AfterFunc(wait, func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		vn.settling = false
		if c.nodes[vn.key] == vn && vn.feed != nil {
			c.buildLocked(vn, nil, true)
		}
	})
}
