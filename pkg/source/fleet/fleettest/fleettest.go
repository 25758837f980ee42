// Package fleettest helps tests run a target registry (pkg/source/fleet).
// It is not in pkg/testenv: fleet imports pkg/source/vnode, whose own
// tests import testenv, so testenv importing fleet would be a cycle.
package fleettest

import (
	"context"
	"time"

	"github.com/fleetlet/fleetlet/pkg/proxy"
	"github.com/fleetlet/fleetlet/pkg/source/fleet"
	"github.com/fleetlet/fleetlet/pkg/source/vnode"
)

// Options are a registry's options for a source named sourceName, with
// probes fast enough for tests: a Target's readiness follows its
// cluster's within a second or two.
func Options(sourceName string) fleet.Options {
	return fleet.Options{
		SourceName:          sourceName,
		ProbeInterval:       500 * time.Millisecond,
		ProbeTimeout:        2 * time.Second,
		ProbeBackoffInitial: 100 * time.Millisecond,
		HeartbeatDuration:   5 * time.Second,
	}
}

// NoNodes stands in for the virtual node controller: it does nothing, and
// the tests create the virtual nodes they need themselves.
type NoNodes struct{}

var _ fleet.VirtualNodes = NoNodes{}

// Upsert does nothing.
func (NoNodes) Upsert(context.Context, vnode.TargetState) {}

// Remove does nothing.
func (NoNodes) Remove(context.Context, proxy.TargetKey) error { return nil }

// Release does nothing.
func (NoNodes) Release(proxy.TargetKey) {}
