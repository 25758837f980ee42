package main

import (
	"math"
	"os"
	"runtime/debug"
	"testing"

	"github.com/KimMachineGun/automemlimit/memlimit"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The Go runtime's memory limit follows the container's: 90 % of it, unless
// GOMEMLIMIT says otherwise; none without a container limit.
func TestMemoryLimitFollowsTheContainer(t *testing.T) {
	before := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetMemoryLimit(before) })
	const mib = 1 << 20

	// AUTOMEMLIMIT (a ratio, or off) would change what is asked.
	t.Setenv("AUTOMEMLIMIT", "")
	require.NoError(t, os.Unsetenv("AUTOMEMLIMIT"))
	t.Setenv("GOMEMLIMIT", "")
	limit := uint64(512 * mib)
	want := int64(float64(limit) * memoryRatio)
	got, err := setMemoryLimit(memlimit.Limit(512 * mib))
	require.NoError(t, err)
	assert.Equal(t, want, got, "the limit set")
	assert.Equal(t, want, debug.SetMemoryLimit(-1), "the runtime's limit")

	got, err = setMemoryLimit(func() (uint64, error) { return 0, memlimit.ErrNoLimit })
	require.NoError(t, err)
	assert.Equal(t, int64(math.MaxInt64), got, "no container limit: no runtime limit")

	t.Setenv("GOMEMLIMIT", "100MiB")
	debug.SetMemoryLimit(100 * mib)
	got, err = setMemoryLimit(memlimit.Limit(512 * mib))
	require.NoError(t, err)
	assert.Equal(t, int64(100*mib), got, "GOMEMLIMIT set by the user was overridden")
}
