package main

import (
	"github.com/KimMachineGun/automemlimit/memlimit"
)

// memoryRatio is the share of the container's memory limit the Go runtime
// aims to stay under: the rest is room for what it does not count (the
// binary, thread stacks outside its heap) before the kernel's limit.
// pkg/sandbox (goMemoryRatio) gives its local processes the same share.
const memoryRatio = 0.9

// setMemoryLimit gives the Go runtime a soft memory limit (GOMEMLIMIT) of
// memoryRatio of the container's memory limit as limits reports it (its
// cgroup's, which the chart's resources.limits.memory sets), so that the
// garbage collector works harder as the process nears that limit instead
// of the kernel killing it there. GOMEMLIMIT, when set, wins, and
// AUTOMEMLIMIT=off leaves the runtime's default (no limit). Without a limit
// (a process outside a container) the runtime keeps no limit either.
func setMemoryLimit(limits memlimit.Provider) (int64, error) {
	return memlimit.Set(memlimit.WithProvider(limits), memlimit.WithRatio(memoryRatio))
}
