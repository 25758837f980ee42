// Package fleet is the source side's registry of target clusters (the fleet it
// sends pods to).
//
// It watches Targets and ClusterTargets, and the metadata of Secrets (the
// kubeconfigs themselves are read uncached, only when a Target that names
// one is reconciled). For each target it keeps one live Cluster: a client
// built from the kubeconfig — untrusted input, accepted only as a server URL
// with inline credentials and CA data (RESTConfigFromKubeconfig) — or from
// fleetlet's own credentials for a `self` target.
//
// A Cluster probes its target by reading the ClusterSummary, which proves at
// once that the target answers, that the credentials are accepted and that
// fleetlet runs there; it then renews this source's heartbeat Lease in the
// namespace of its identity there (the kubeconfig context's namespace). A
// healthy target is probed every ProbeInterval; a failing one with backoff.
// A change of health or summary re-queues the Target, whose reconcile writes
// the Ready condition (reasons a user can act on: KubeconfigSecretNotFound,
// BadKubeconfig, Unreachable, Forbidden, FleetletMissing, InvalidSpec) and
// hands the state to the virtual node controller (package vnode).
//
// Adding, changing or deleting a Target, or changing its Secret, takes
// effect live for that target only: a changed connection replaces its
// Cluster, a deleted Target stops its Cluster and deletes its virtual node.
// When fleetlet stops, probes stop and nothing is deleted.
package fleet
