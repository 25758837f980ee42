// Package summary is the target side of fleetlet's capacity accounting: it
// keeps the cluster's ClusterSummary up to date and ensures the
// fleetlet-candidate PriorityClass.
//
// # ClusterSummary
//
// Sources read the one cluster-scoped ClusterSummary, named default, of each
// target to size the target's virtual node: its allocatable minus requested
// is what the target can still run. ClusterSummaryReconciler owns it and
// writes only its status. The status sums, over the schedulable real nodes
// (IsSchedulableNode: Ready, not cordoned, not labelled
// type=virtual-kubelet):
//
//   - nodeCount, capacity and allocatable of those nodes;
//   - labels, the node labels (key and value) all of them share, which
//     sources expose on the virtual node under target.multicluster.fleetlet.io/
//     for cluster-level placement;
//   - requested, the effective requests of the active pods (IsActivePod:
//     bound, neither Succeeded nor Failed) bound to those nodes, computed as
//     the kube-scheduler does (PodRequests: init containers, sidecars,
//     pod-level resources, in-place resizes and overhead), with "pods" their
//     number. Pods on virtual nodes and other excluded nodes are not counted;
//   - largestFree, for each resource, the most of it free on any one of
//     those nodes (allocatable minus its active pods' requests, "pods"
//     their number, never below zero): a source ranks last a target where
//     no node has room for a pod, however much it has free in total;
//   - requestedBySource, the part of requested that comes from each source's
//     delegates (pods labelled multicluster.fleetlet.io/parent-cluster). A
//     source subtracts its own part so that its own delegates, which its
//     virtual node already accounts for as bound proxies, are not counted as
//     others' load.
//   - devices, where the cluster serves resource.k8s.io/v1 (Dynamic
//     Resource Allocation): per DeviceClass, how many published devices its
//     CEL selectors select (ResourceSlices of schedulable nodes, and slices
//     not tied to one node; the newest generation of each pool) and how
//     many of those ResourceClaims hold (SummarizeDevices), in
//     deviceClasses, with devicesCounted true. A cluster that does not serve
//     the API has devicesCounted false, and its sources leave device checks
//     to its scheduler.
//
// The Ready condition (with observedGeneration) says the summary reflects
// the nodes and pods as the controller last saw them.
//
// What it watches: nodes, pods and the ClusterSummary itself, from the
// manager's shared informers (and DeviceClasses, ResourceSlices and the
// allocations of ResourceClaims where resource.k8s.io/v1 is served), plus
// one request at start (a cluster without nodes sends no event). Every
// event maps to the single request "default", so a burst of events
// collapses into one reconcile, and
// predicates drop the updates that cannot change the sum (node heartbeats).
// Pods are not read on a reconcile: the pod informer's events keep what the
// active pods request on each node, by source (totals.go), and only a
// change of those totals (a pod bound, finished, resized or deleted; not
// its readiness or container statuses) asks for a reconcile. A reconcile
// is one list of nodes read from the cache without copying, and sums over
// nodes and sources, whatever the number of pods; until the totals have
// counted every pod at start, it reads each schedulable node's pods by
// indexer.ActivePodNodeName instead. There is no polling.
//
// What it writes: the ClusterSummary is created if missing (so deleting it
// just brings it back), and its status is written with server-side apply as
// field owner "fleetlet", only when the recomputed status differs from the
// cached one. Applying the whole status each time means a resource or a
// source that is gone is removed, not left behind. An apply does not remove
// what another field manager added (a map key set with kubectl edit, say):
// when the applied object still differs, a JSON merge patch with the
// resourceVersion as precondition removes it.
//
// Summarize, SharedLabels and PodRequests are pure functions, so that the
// arithmetic can be tested without a cluster and reused by the source side.
//
// # PriorityClass
//
// EnsurePriorityClass creates the fleetlet-candidate PriorityClass (value 0,
// preemptionPolicy Never) that every candidate pod uses, corrects its mutable
// fields, and reports, without touching it, a class whose immutable value or
// preemptionPolicy someone changed.
package summary
