// Package feedback is the source-side controller that makes proxy pods tell
// the truth about their delegates (docs/design.md, steps 6 and 7).
//
// For every proxy bound to a virtual node it reads the elected chaperon and
// the delegate pod from the target registry's per-namespace caches — which
// wake it on every change, so no proxy is ever polled — and writes the
// proxy's status through the status subresource: phase, reason and message,
// the delegate's pod IPs, the virtual node's address as host IP, start
// time, and one status per container of the proxy (init, regular and
// ephemeral, in the proxy's order; a container the delegate does not report
// yet is Waiting). Conditions are merged: the kubelet's (Initialized,
// ContainersReady, Ready, PodReadyToStartContainers) come from the delegate,
// every other one (fleetlet's Elected, PodScheduled, DisruptionTarget,
// readiness gates) stays as it is. status.observedGeneration (and that of
// the kubelet conditions, when the delegate's kubelet tracks them) says, as
// a kubelet's does, which generation of the proxy's spec has been acted
// on: the one whose updates its delegate's chaperon holds and whose pod is
// up to them. A finished proxy keeps its final status.
//
// A delegate whose resource claims were allocated devices in its target
// (Dynamic Resource Allocation) has them named on its proxy, once: the
// annotation multicluster.fleetlet.io/devices ("request=driver/pool/device",
// comma-separated) and a DevicesAllocated Event, from one read of each
// claim in the target.
//
// When the delegate or its chaperon is deleted in the target (and it had
// not finished), the proxy is deleted: its controller makes a new one, and
// nothing comes back from the dead. A target that does not answer changes
// nothing here: its virtual node turns NotReady and Kubernetes' eviction
// decides.
package feedback
