package follow

import "time"

// KnowProxiesFromNow makes f know every copy it writes for a proxy created
// from now on, as it would for one created clockSkew after its first use:
// tests need not wait that out.
func KnowProxiesFromNow(f *Follower) {
	f.written.mu.Lock()
	defer f.written.mu.Unlock()
	f.written.since = time.Now().Add(-clockSkew - 2*time.Second)
}
