package vnode

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// podSums keeps, per node, what a set of pods requests together, kept by
// their events: each pod's requests are computed once when it is set, and
// a node's sum is read without walking its pods. Not safe for concurrent
// use (the tracker holds its lock).
type podSums struct {
	pods  map[types.UID]podShare
	total map[string]corev1.ResourceList
}

// podShare is what one pod adds to its node's sum.
type podShare struct {
	node     string
	requests corev1.ResourceList
}

func newPodSums() podSums {
	return podSums{pods: map[types.UID]podShare{}, total: map[string]corev1.ResourceList{}}
}

// set counts the pod on node with requests, in place of what it counted
// before (on this node or another), and returns the node it counted on
// before ("" if none).
func (s *podSums) set(uid types.UID, node string, requests corev1.ResourceList) string {
	before := s.remove(uid)
	s.pods[uid] = podShare{node: node, requests: requests}
	sum := s.total[node]
	if sum == nil {
		sum = corev1.ResourceList{}
		s.total[node] = sum
	}
	for name, q := range requests {
		total, ok := sum[name]
		if !ok {
			total = zero(name)
		}
		total.Add(q)
		sum[name] = total
	}
	return before
}

// remove stops counting the pod and returns the node it counted on (""
// if none).
func (s *podSums) remove(uid types.UID) string {
	share, ok := s.pods[uid]
	if !ok {
		return ""
	}
	delete(s.pods, uid)
	sum := s.total[share.node]
	for name, q := range share.requests {
		total := sum[name]
		total.Sub(q)
		if total.IsZero() {
			// A resource no pod requests any more is not shown as 0:
			// the node would list a resource its target may not have.
			delete(sum, name)
			continue
		}
		sum[name] = total
	}
	if len(sum) == 0 {
		delete(s.total, share.node)
	}
	return share.node
}

// has tells whether the pod counts on node.
func (s *podSums) has(uid types.UID, node string) bool {
	share, ok := s.pods[uid]
	return ok && share.node == node
}

// of returns what the pods counted on node request together (nil: none).
// The list is the sum itself: read it, do not keep or change it.
func (s *podSums) of(node string) corev1.ResourceList { return s.total[node] }

// podRequests is what one pod adds to its node (ProxyRequests of it alone:
// its requests, and 1 under "pods").
func podRequests(pod *corev1.Pod, bound bool) corev1.ResourceList {
	return ProxyRequests([]*corev1.Pod{pod}, bound)
}
