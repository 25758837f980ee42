package podsums

import (
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// lists are the distinct request lists of the pods counted, by listID, each
// with how many pods add it. Pods made from one template (a Deployment's, a
// Job's) request the same, and a list is a map of quantities: kept once per
// pod, they were most of what the sums hold, and the source keeps several
// sums over the same proxies. Guarded by the Sums' lock.
type lists map[string]*list

// list is one distinct request list and its pods.
type list struct {
	id       string
	requests corev1.ResourceList
	pods     int
}

// take returns the list of id, with one more pod; requests is copied when
// the list is new (the caller keeps its own).
func (ls lists) take(id string, requests corev1.ResourceList) *list {
	l := ls[id]
	if l == nil {
		l = &list{id: id, requests: requests.DeepCopy()}
		ls[id] = l
	}
	l.pods++
	return l
}

// drop removes one pod from l, and l when no pod is left.
func (ls lists) drop(l *list) {
	if l.pods--; l.pods == 0 {
		delete(ls, l.id)
	}
}

// listID names a request list by its content: its resources in order, each
// with its quantity in canonical form, so that equal lists written alike
// ("1000m" and "1" are) share an ID. Two lists of equal amounts written in
// different formats ("1Gi" and "1073741824") get two IDs and are kept
// apart, which costs memory, never a wrong sum.
func listID(requests corev1.ResourceList) string {
	names := make([]string, 0, len(requests))
	for name := range requests {
		names = append(names, string(name))
	}
	slices.Sort(names)
	var b strings.Builder
	for _, name := range names {
		q := requests[corev1.ResourceName(name)]
		b.WriteString(name)
		b.WriteByte('=')
		b.WriteString(q.String())
		b.WriteByte(';')
	}
	return b.String()
}
