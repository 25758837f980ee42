// cleared: the targets a deleted proxy is known to have left.

package elector

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/fleetlet/fleetlet/pkg/proxy"
)

// clearedTargets remembers, per deleted proxy, the targets finalize has
// confirmed empty of it: no chaperon, and no pod that may run it. Nothing
// of a proxy being deleted is created again (an election never runs for
// it, and this reconciler's passes for one proxy never overlap), so a
// target confirmed empty stays so, and the passes that follow (each
// target's event as the delegate goes) read only the targets still
// holding something instead of every target again. In memory only: after
// a restart the first pass reads every target, as before.
type clearedTargets struct {
	mu sync.Mutex
	m  map[types.UID]clearedEntry
}

type clearedEntry struct {
	targets map[proxy.TargetKey]struct{}
	since   time.Time
}

// clearedIdle bounds how long the entry of a proxy whose finalize never
// completed here (another replica led, or its finalizer was removed by
// hand) is kept.
const clearedIdle = time.Hour

func (c *clearedTargets) has(uid types.UID, key proxy.TargetKey) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.m[uid].targets[key]
	return ok
}

func (c *clearedTargets) add(uid types.UID, key proxy.TargetKey, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[types.UID]clearedEntry{}
	}
	e, ok := c.m[uid]
	if !ok {
		for u, old := range c.m {
			if now.Sub(old.since) > clearedIdle {
				delete(c.m, u)
			}
		}
		e = clearedEntry{targets: map[proxy.TargetKey]struct{}{}, since: now}
		c.m[uid] = e
	}
	e.targets[key] = struct{}{}
}

func (c *clearedTargets) forget(uid types.UID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.m, uid)
}
