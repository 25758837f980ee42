package sandbox

import (
	"strconv"

	"k8s.io/apimachinery/pkg/api/resource"
)

// The chart's default resources.limits.memory of the manager and of the
// candidate scheduler (charts/fleetlet/values.yaml; a test keeps them
// equal).
const (
	chartManagerMemoryLimit   = "512Mi"
	chartSchedulerMemoryLimit = "512Mi"
)

// goMemoryRatio is the share of its container's memory limit a fleetlet
// process keeps its Go heap under (cmd/fleetlet's memoryRatio, read from
// the cgroup there).
const goMemoryRatio = 0.9

// memoryEnv is the environment that gives a local process the soft memory
// limit (GOMEMLIMIT) a container with the chart's memory limit gives it:
// the sandbox runs no containers, so that without it a benchmark measures
// a process whose collector nothing asks to return memory, not what a
// deployment holds. None without a limit.
func memoryEnv(limit string) []string {
	if limit == "" {
		return nil
	}
	q := resource.MustParse(limit)
	return []string{"GOMEMLIMIT=" + strconv.FormatInt(int64(float64(q.Value())*goMemoryRatio), 10)}
}
