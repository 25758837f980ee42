package sandbox

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"
)

// The sandbox runs the manager and the candidate scheduler with the soft
// memory limit the chart's default limits give them in a cluster, and the
// limits it assumes are the chart's.
func TestProcessesRunWithTheChartsMemoryLimit(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "..", "charts", "fleetlet", "values.yaml"))
	require.NoError(t, err)
	var values struct {
		Manager, Scheduler struct {
			Resources struct {
				Limits struct {
					Memory string `json:"memory"`
				} `json:"limits"`
			} `json:"resources"`
		}
	}
	require.NoError(t, yaml.Unmarshal(raw, &values))
	assert.Equal(t, values.Manager.Resources.Limits.Memory, chartManagerMemoryLimit, "the manager's limit")
	assert.Equal(t, values.Scheduler.Resources.Limits.Memory, chartSchedulerMemoryLimit, "the candidate scheduler's limit")
	for _, c := range []component{fleetletComponent, standbyComponent} {
		assert.Equal(t, chartManagerMemoryLimit, c.memoryLimit, c.name)
	}
	assert.Equal(t, chartSchedulerMemoryLimit, schedulerComponent.memoryLimit, schedulerComponent.name)

	assert.Equal(t, []string{"GOMEMLIMIT=483183820"}, memoryEnv("512Mi"), "90 % of 512Mi")
	assert.Nil(t, memoryEnv(""), "no limit")

	log := filepath.Join(t.TempDir(), "env.log")
	r, err := startProcess(processSpec{component: "env", binary: "/bin/sh", args: []string{"-c", "echo limit=$GOMEMLIMIT; exec sleep 60"},
		log: log, env: memoryEnv("512Mi"), dieWithParent: true})
	require.NoError(t, err)
	waitForText(t, log, "limit=483183820")
	require.NoError(t, stopProcess(r.Process, 5*time.Second))
}
