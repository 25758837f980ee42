// Package vnode keeps the source cluster's virtual nodes: one Node per
// Target or ClusterTarget, through which the source's own kube-scheduler
// binds the proxy pods elected to run in that target.
//
// # What it owns
//
// For each target the Controller runs a virtual-kubelet node controller
// (github.com/virtual-kubelet/virtual-kubelet/node) with Lease v1. The node
// controller creates the Node, renews its Lease in kube-node-lease and
// writes its status; this package decides what the node shows, from the
// TargetState the target registry hands it (Upsert) and from the proxy pods
// it watches. It writes nothing else: no pod, no Event.
//
// The node, named NodeName(key), carries
//   - labels type=virtual-kubelet, kubernetes.io/role=cluster,
//     kubernetes.io/hostname=<node> (what a proxy is pinned with),
//     kubernetes.io/os=linux, multicluster.fleetlet.io/cluster=<target>, and
//     the labels the target's nodes share under
//     target.multicluster.fleetlet.io/<key with "/" replaced by "."> minus
//     the target's excludedLabelsRegexp (NodeLabels);
//   - the taint virtual-kubelet.io/provider=fleetlet:NoSchedule, set when
//     the node is created;
//   - conditions Ready (below), and MemoryPressure, DiskPressure,
//     PIDPressure and NetworkUnavailable, always False;
//   - allocatable = what the target can still run, plus what the proxies
//     bound, pinned or elected to the node request, pods counted
//     (Allocatable), and
//     capacity = the larger of the target's capacity and that (Capacity);
//   - the manager's address as its only address (InternalIP: no Hostname
//     no DNS would resolve), the port of the node's own kubelet API
//     (Config.Kubelet, pkg/source/kubeletapi) in daemonEndpoints, and nodeInfo.
//
// After the node is created only labels and status are written: status by
// virtual-kubelet's three-way strategic merge patch of the status
// subresource (it also sets the desired labels), and after each of those a
// merge patch of the labels fleetlet owns only — the conventions, the
// cluster label and every key under target.multicluster.fleetlet.io/ —
// which also removes those a target stopped sharing (labelKeeper). Labels
// and annotations others set are left alone, and spec (cordoning, taints)
// is never touched after creation.
//
// # Two kinds of trouble
//
// The Lease says whether fleetlet runs; the Ready condition says whether the
// target answers. virtual-kubelet renews the Lease and writes the status only
// while its provider's Ping succeeds, so Ping reports fleetlet's own health
// and always succeeds while the Controller runs. An unreachable target is
// Ready=False with the target's reason and message, while the Lease keeps
// being renewed: the node lifecycle controller then taints the node
// not-ready and evicts proxies after their toleration, as for a failed
// node. When fleetlet stops (Run returns), nothing is deleted: the Leases
// lapse, the nodes turn Unknown and get the unreachable taint, which proxies
// tolerate without limit, so a fleetlet outage evicts nothing. Only Remove,
// for a deleted target, deletes a node and its Lease.
//
// # What it watches
//
// Pods of the source cluster, stripped to what resource requests need:
// one informer of the unbound, non-terminal pods, whose proxies (pods with
// the multicluster.fleetlet.io/delegate finalizer) count on the node they
// are pinned to (nodeSelector kubernetes.io/hostname) or, before that,
// elected to (their election record, proxy.HeadedTo); and per virtual
// node one informer of the non-terminal pods bound to it (spec.nodeName),
// like a kubelet's. Each node's requests are sums kept by those events
// (package podsums), so a rebuild does not walk its pods. A change there rebuilds
// that node only. The two watches
// deliver a pod's binding in no set order, so a pinned proxy that leaves the
// first is counted until the second shows it: allocatable never dips while
// a proxy is being bound. A node and its
// status are rebuilt on events only (Upsert, pod events) and written only
// when they changed; virtual-kubelet rewrites the unchanged status every
// StatusInterval. A change of allocatable and capacity alone waits up to
// ResourceInterval while the node as written still has room for every
// proxy counting on it (settle.go): an election and the summary that
// follows it move allocatable and back, and a status write each was one
// request per pod in the source for a figure no proxy needed.
package vnode
