package follow

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestSeen(t *testing.T) {
	now := time.Unix(1000, 0)
	s := seen{now: func() time.Time { return now }}
	require.False(t, s.Has("t1", "ns"), "seen before Add")
	s.Add("t1", "ns")
	require.True(t, s.Has("t1", "ns"), "not seen right after Add")
	require.False(t, s.Has("t2", "ns") || s.Has("t1", "other"), "seen in another target or namespace")
	now = now.Add(seenFor + time.Second)
	require.False(t, s.Has("t1", "ns"), "still seen after seenFor")
}
