package crashpoint

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		spec string
		name string
		n    int
		bad  bool
	}{
		{spec: ""},
		{spec: AfterUngate, name: AfterUngate, n: 1},
		{spec: MidFinalize + ":3", name: MidFinalize, n: 3},
		{spec: "after-lunch", bad: true},
		{spec: AfterUngate + ":0", bad: true},
		{spec: AfterUngate + ":x", bad: true},
	} {
		name, n, err := Parse(tc.spec)
		if tc.bad {
			assert.Error(t, err, tc.spec)
			continue
		}
		require.NoError(t, err, tc.spec)
		assert.Equal(t, tc.name, name, tc.spec)
		assert.Equal(t, tc.n, n, tc.spec)
	}
}

func TestHitKillsAtTheNthHitOfItsPointOnly(t *testing.T) {
	killed := 0
	kill = func() { killed++ }
	t.Cleanup(func() { _ = Set("") })
	t.Setenv(EnvVar, "")
	require.NoError(t, Set(AfterMark+":2"))
	Hit(AfterRecord)
	Hit(AfterMark)
	assert.Equal(t, 0, killed, "killed before its hit")
	Hit(AfterMark)
	assert.Equal(t, 1, killed)
	Hit(AfterMark)
	assert.Equal(t, 1, killed, "killed again after its hit")

	require.NoError(t, Set(""))
	Hit(AfterMark)
	assert.Equal(t, 1, killed, "killed with no point armed")
}
