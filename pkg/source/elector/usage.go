// usage: what the pods that take each node's room request together (bound
// and active, or ungated and about to bind), and what the elections decided
// for each target and not carried out yet request (inflight.go), kept up
// to date by the pod informer's events, so that whether a proxy fits its
// virtual node, and how full a target is about to be, are read in O(1)
// instead of summing every such pod on each pass (O(n²) over a burst).

package elector

import (
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"

	"github.com/fleetlet/fleetlet/pkg/indexer"
	"github.com/fleetlet/fleetlet/pkg/proxy"
)

// podSums sums, per key (a node, a target), the requests and the number of
// the pods that key says count there; a pod counts under one key at most.
type podSums struct {
	// key is where a pod counts as it is now; "" nowhere.
	key   func(*corev1.Pod) string
	mu    sync.RWMutex
	pods  map[types.UID]podUse
	nodes map[string]*used
	// synced tells whether every pod the cache had at start was counted.
	synced func() bool
}

type podUse struct {
	node     string
	requests corev1.ResourceList
}

type used struct {
	requests corev1.ResourceList
	pods     int64
}

// newNodeUsage sums, per node, the requests and the number of the pods
// that take its room at the source scheduler's next binding: the active
// pods (indexer.IsActivePod) bound to it, and the proxies pinned to it
// whose gate is gone but that are not bound yet (they bind next, whether
// or not the node's allocatable counts them yet).
func newNodeUsage() *podSums { return newPodSums(takesRoom) }

func newPodSums(key func(*corev1.Pod) string) *podSums {
	return &podSums{key: key, pods: map[types.UID]podUse{}, nodes: map[string]*used{}, synced: func() bool { return false }}
}

// handler is the informer event handler that keeps the sums.
func (u *podSums) handler() toolscache.ResourceEventHandler {
	return toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { u.set(obj) },
		UpdateFunc: func(_, obj any) { u.set(obj) },
		DeleteFunc: func(obj any) {
			if tomb, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
				obj = tomb.Obj
			}
			if pod, ok := obj.(*corev1.Pod); ok {
				u.mu.Lock()
				u.dropLocked(pod.UID)
				u.mu.Unlock()
			}
		},
	}
}

// takesRoom is the node whose room a pod takes: the one it is bound to
// while active, or the one it is pinned to once ungated, until bound.
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

// set counts a pod as it is now: under its key, nowhere else.
func (u *podSums) set(obj any) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	old, had := u.pods[pod.UID]
	node := u.key(pod)
	if node == "" {
		u.dropLocked(pod.UID)
		return
	}
	requests := proxy.PodRequests(pod)
	if had && old.node == node && equality.Semantic.DeepEqual(old.requests, requests) {
		return
	}
	u.dropLocked(pod.UID)
	n := u.nodes[node]
	if n == nil {
		n = &used{requests: corev1.ResourceList{}}
		u.nodes[node] = n
	}
	n.pods++
	for name, q := range requests {
		total := n.requests[name]
		total.Add(q)
		n.requests[name] = total
	}
	u.pods[pod.UID] = podUse{node: node, requests: requests}
}

func (u *podSums) dropLocked(uid types.UID) {
	old, ok := u.pods[uid]
	if !ok {
		return
	}
	delete(u.pods, uid)
	n := u.nodes[old.node]
	n.pods--
	if n.pods == 0 {
		delete(u.nodes, old.node)
		return
	}
	for name, q := range old.requests {
		total := n.requests[name]
		total.Sub(q)
		n.requests[name] = total
	}
}

// of returns what the pods counted under a key request together (a copy)
// and how many they are; ok is false until every pod at start was counted.
func (u *podSums) of(node string) (requests corev1.ResourceList, pods int64, ok bool) {
	if !u.synced() {
		return nil, 0, false
	}
	u.mu.RLock()
	defer u.mu.RUnlock()
	n := u.nodes[node]
	if n == nil {
		return corev1.ResourceList{}, 0, true
	}
	return n.requests.DeepCopy(), n.pods, true
}
