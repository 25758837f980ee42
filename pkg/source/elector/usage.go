// usage: what the pods that take each node's room request together (bound
// and active, or ungated and about to bind), and what the elections decided
// for each target and not carried out yet request (inflight.go), kept up
// to date by the pod informer's events, so that whether a proxy fits its
// virtual node, and how full a target is about to be, are read in O(1)
// instead of summing every such pod on each pass (O(n²) over a burst).

package elector

import (
	corev1 "k8s.io/api/core/v1"

	"github.com/fleetlet/fleetlet/pkg/indexer"
	"github.com/fleetlet/fleetlet/pkg/podsums"
	"github.com/fleetlet/fleetlet/pkg/proxy"
)

// keyed counts a pod under the key key gives it ("": nowhere), with its
// requests.
func keyed(key func(*corev1.Pod) string) podsums.Counter[string] {
	return func(pod *corev1.Pod) (string, corev1.ResourceList, bool) {
		k := key(pod)
		if k == "" {
			return "", nil, false
		}
		return k, proxy.PodRequests(pod), true
	}
}

// sumOf returns what the pods counted under a key request together (a
// copy) and how many they are; ok is false until every pod at start was
// counted.
func sumOf(sums *podsums.Sums[string], key string) (requests corev1.ResourceList, pods int64, ok bool) {
	if !sums.Synced() {
		return nil, 0, false
	}
	sum := sums.Of(key)
	return sum.Requests, sum.Pods, true
}

// takesRoom is the node whose room a pod takes at the source scheduler's
// next binding: the one it is bound to while active
// (indexer.IsActivePod), or the one it is pinned to once ungated, until
// bound (it binds next, whether or not the node's allocatable counts it
// yet). r.usage counts pods by it.
func takesRoom(pod *corev1.Pod) string {
	if indexer.IsActivePod(pod) {
		return pod.Spec.NodeName
	}
	if pod.Spec.NodeName == "" && pod.DeletionTimestamp == nil && pod.Status.Phase != corev1.PodSucceeded && pod.Status.Phase != corev1.PodFailed &&
		proxy.IsManaged(pod) && !proxy.Gated(pod) {
		return proxy.PinnedNode(pod)
	}
	return ""
}
