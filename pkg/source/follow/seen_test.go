package follow

import (
	"testing"
	"time"
)

func TestSeen(t *testing.T) {
	now := time.Unix(1000, 0)
	s := seen{now: func() time.Time { return now }}
	if s.Has("t1", "ns") {
		t.Fatal("seen before Add")
	}
	s.Add("t1", "ns")
	if !s.Has("t1", "ns") {
		t.Fatal("not seen right after Add")
	}
	if s.Has("t2", "ns") || s.Has("t1", "other") {
		t.Fatal("seen in another target or namespace")
	}
	now = now.Add(seenFor + time.Second)
	if s.Has("t1", "ns") {
		t.Fatal("still seen after seenFor")
	}
}
