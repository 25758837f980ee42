// phase: where a proxy is in its life, read from the API at every pass.

package elector

import (
	corev1 "k8s.io/api/core/v1"

	"github.com/fleetlet/fleetlet/pkg/proxy"
)

// Phase is where a proxy is in its life. It is derived from what the API
// shows of the proxy (deletionTimestamp, scheduling gates, the Elected
// record, the hostname pin) at the start of every pass, never remembered:
// a restarted or newly elected leader reads the same phase.
type Phase string

// The phases of a proxy; doc.go has the transition table.
const (
	// PhaseNotProxy: not a pod of ours (no fleetlet finalizer).
	PhaseNotProxy Phase = ""
	// PhaseFinalizing: deleted; its chaperons go before our finalizer.
	PhaseFinalizing Phase = "Finalizing"
	// PhaseHeld: another controller's scheduling gate too (a quota
	// system decides first).
	PhaseHeld Phase = "Held"
	// PhaseElecting: our gate, no election record standing.
	PhaseElecting Phase = "Electing"
	// PhaseElected: the record stands; the proxy is not pinned yet.
	PhaseElected Phase = "Elected"
	// PhasePinned: pinned to a virtual node, still gated.
	PhasePinned Phase = "Pinned"
	// PhaseUngated: our gate is lifted; the source scheduler binds it.
	PhaseUngated Phase = "Ungated"
)

// PhaseOf derives a proxy's phase.
func PhaseOf(p *corev1.Pod) Phase {
	switch {
	case !proxy.IsManaged(p):
		return PhaseNotProxy
	case p.DeletionTimestamp != nil:
		return PhaseFinalizing
	case proxy.GateIndex(p) < 0:
		return PhaseUngated
	case len(p.Spec.SchedulingGates) > 1:
		return PhaseHeld
	case proxy.PinnedNode(p) != "":
		return PhasePinned
	}
	if _, ok := proxy.Elected(p); ok {
		return PhaseElected
	}
	return PhaseElecting
}
