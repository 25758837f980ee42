// Package crashpoint is a fault-injection seam: named points in the
// source's reconcilers where a test can make the process crash (SIGKILL to
// itself: no deferred function, no Lease released), to check that every
// invariant holds when the manager dies between two steps. It is off
// unless the manager's --crash-point flag (or FLEETLET_CRASH_POINT) names a
// point; nothing else changes behaviour.
package crashpoint

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// The named points, in the order of a proxy's life.
const (
	// AfterRecord: the election record is written, the winner not yet
	// marked.
	AfterRecord = "after-record"
	// AfterMark: the winner is marked elected (it may bind), the losers
	// not yet deleted.
	AfterMark = "after-mark"
	// AfterUngate: the proxy is pinned to its virtual node and our gate
	// lifted (one write), the proxy not yet bound.
	AfterUngate = "after-ungate"
	// MidFinalize: a deleted proxy's chaperons are being deleted, our
	// finalizer not yet removed.
	MidFinalize = "mid-finalize"
)

// Points lists every named point.
var Points = []string{AfterRecord, AfterMark, AfterUngate, MidFinalize}

// EnvVar names a point when the flag does not.
const EnvVar = "FLEETLET_CRASH_POINT"

var (
	mu    sync.Mutex
	point string
	after int // crash at the after-th hit
	hits  int
	kill  = func() { _ = syscall.Kill(os.Getpid(), syscall.SIGKILL) }
)

// Parse reads a crash point: "<name>" (crash at its first hit) or
// "<name>:<n>" (at its n-th hit). The empty string is no crash point.
func Parse(spec string) (name string, n int, err error) {
	if spec == "" {
		return "", 0, nil
	}
	name, count, hasCount := strings.Cut(spec, ":")
	if !slices.Contains(Points, name) {
		return "", 0, fmt.Errorf("crash point %q: not one of %s", name, strings.Join(Points, ", "))
	}
	n = 1
	if hasCount {
		if n, err = strconv.Atoi(count); err != nil || n < 1 {
			return "", 0, fmt.Errorf("crash point %q: the hit count must be a positive integer", spec)
		}
	}
	return name, n, nil
}

// Set arms a crash point (spec as Parse reads it; empty: the environment
// variable's, if any). The manager calls it once at start.
func Set(spec string) error {
	if spec == "" {
		spec = os.Getenv(EnvVar)
	}
	name, n, err := Parse(spec)
	if err != nil {
		return err
	}
	mu.Lock()
	defer mu.Unlock()
	point, after, hits = name, n, 0
	return nil
}

// Hit marks that the process passed a named point: it dies there when
// that point is armed and this is its hit.
func Hit(name string) {
	mu.Lock()
	if point == "" || name != point {
		mu.Unlock()
		return
	}
	hits++
	die := hits == after
	mu.Unlock()
	if die {
		fmt.Fprintf(os.Stderr, "crash point %s reached (hit %d): killing the process\n", name, after)
		kill()
	}
}
