package sandbox

import (
	"fmt"
	"time"
)

// step says, on Out, what a cluster's start is doing as it begins it, with
// the time since that start began: a first `make demo` never waits in
// silence. "cluster-2 (2 of 3) [+3.1s]: installing the fleetlet chart".
func (s *Sandbox) step(c *ClusterState, began time.Time, format string, args ...any) {
	fmt.Fprintf(s.opts.Out, "%s (%d of %d) [+%.1fs]: %s\n", c.Name, c.Index, len(s.state.Clusters),
		time.Since(began).Seconds(), fmt.Sprintf(format, args...))
}
