package sandbox

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseDevices(t *testing.T) {
	got, err := ParseDevices(" cluster-2=8, cluster-3=0,")
	require.NoError(t, err)
	assert.Equal(t, map[string]int{"cluster-2": 8, "cluster-3": 0}, got)
	assert.Equal(t, "cluster-2=8,cluster-3=0", FormatDevices(got))
	for _, bad := range []string{"cluster-2", "=3", "cluster-2=x", "cluster-2=-1"} {
		_, err := ParseDevices(bad)
		assert.Error(t, err, bad)
	}
}

func TestValidateDevicesNameClusters(t *testing.T) {
	o := Options{Dir: t.TempDir(), Clusters: 2, NoFleetlet: true, BinDir: t.TempDir()}.Defaulted()
	o.Devices = map[string]int{"cluster-2": 4, "cluster-3": 1, "other": 1}
	err := o.Validate()
	require.Error(t, err)
	assert.Contains(t, err.Error(), "cluster-3=1 names no cluster")
	assert.Contains(t, err.Error(), "other=1 names no cluster")
	assert.NotContains(t, err.Error(), "cluster-2=4")
}

func TestDeviceSlice(t *testing.T) {
	s := deviceSlice("n1-gpus", "n1", 3)
	require.Len(t, s.Spec.Devices, 3)
	assert.Equal(t, DeviceDriver, s.Spec.Driver)
	assert.Equal(t, "n1", *s.Spec.NodeName)
	assert.Equal(t, "n1", s.Spec.Pool.Name)
	assert.Equal(t, "gpu-2", s.Spec.Devices[2].Name)
}
