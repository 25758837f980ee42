// Package podsums keeps, per key (a node, a target, a node and source),
// what a set of pods requests together and how many they are, pod by pod as
// their events come, so that a key's sum is read in O(1) instead of by
// walking its pods on every pass (O(n²) over a burst). A pod counts under
// one key at most. It is a leaf, used on both sides: the source's virtual
// nodes and elector, the target's ClusterSummary.
package podsums

import (
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
)

// Sum is what the pods counted under one key request together, and how
// many they are.
type Sum struct {
	Requests corev1.ResourceList
	Pods     int64
}

// Sums is a set of sums by key. It is safe for concurrent use.
type Sums[K comparable] struct {
	mu   sync.RWMutex
	pods map[types.UID]share[K]
	keys map[K]*Sum
	// lists are the distinct request lists the pods add (lists.go): the
	// pods of one template share one.
	lists lists
	// synced, when watching, tells whether the handler has seen every
	// pod the informer had at start.
	synced func() bool
}

// share is what one pod adds, and under which key.
type share[K comparable] struct {
	key  K
	list *list
}

// New returns empty sums.
func New[K comparable]() *Sums[K] {
	return &Sums[K]{pods: map[types.UID]share[K]{}, keys: map[K]*Sum{}, lists: lists{}}
}

// Set counts the pod under key with requests, in place of what it counted
// before, under this key or another. The sums keep no reference to
// requests: a pod whose list is one they hold already shares it. It
// returns the key it counted under before (the zero key if none) and
// whether the sums changed.
func (s *Sums[K]) Set(uid types.UID, key K, requests corev1.ResourceList) (before K, changed bool) {
	id := listID(requests)
	s.mu.Lock()
	defer s.mu.Unlock()
	old, had := s.pods[uid]
	if had && old.key == key && old.list.id == id {
		return key, false
	}
	l := s.lists.take(id, requests)
	before, _ = s.removeLocked(uid)
	requests = l.requests
	sum := s.keys[key]
	if sum == nil {
		sum = &Sum{Requests: corev1.ResourceList{}}
		s.keys[key] = sum
	}
	sum.Pods++
	for name, q := range requests {
		total, ok := sum.Requests[name]
		if !ok {
			total = q.DeepCopy()
		} else {
			total.Add(q)
		}
		sum.Requests[name] = total
	}
	s.pods[uid] = share[K]{key: key, list: l}
	return before, true
}

// Remove stops counting the pod. It returns the key it counted under (the
// zero key if none) and whether it was counted.
func (s *Sums[K]) Remove(uid types.UID) (before K, removed bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.removeLocked(uid)
}

func (s *Sums[K]) removeLocked(uid types.UID) (K, bool) {
	old, ok := s.pods[uid]
	if !ok {
		var none K
		return none, false
	}
	delete(s.pods, uid)
	s.lists.drop(old.list)
	sum := s.keys[old.key]
	sum.Pods--
	if sum.Pods == 0 {
		delete(s.keys, old.key)
		return old.key, true
	}
	for name, q := range old.list.requests {
		total := sum.Requests[name]
		total.Sub(q)
		if total.IsZero() {
			// A resource no pod requests any more is not shown as 0:
			// a virtual node would list a resource its target may not
			// have.
			delete(sum.Requests, name)
			continue
		}
		sum.Requests[name] = total
	}
	return old.key, true
}

// Has tells whether the pod counts under key.
func (s *Sums[K]) Has(uid types.UID, key K) bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	old, ok := s.pods[uid]
	return ok && old.key == key
}

// Of returns a copy of what the pods counted under key request together
// (an empty list and 0 pods when none).
func (s *Sums[K]) Of(key K) Sum {
	s.mu.RLock()
	defer s.mu.RUnlock()
	sum := s.keys[key]
	if sum == nil {
		return Sum{Requests: corev1.ResourceList{}}
	}
	return Sum{Requests: sum.Requests.DeepCopy(), Pods: sum.Pods}
}

// Select returns a copy of the sums of the keys keep says to, in O(keys).
func (s *Sums[K]) Select(keep func(K) bool) map[K]Sum {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := map[K]Sum{}
	for key, sum := range s.keys {
		if keep(key) {
			out[key] = Sum{Requests: sum.Requests.DeepCopy(), Pods: sum.Pods}
		}
	}
	return out
}

// Counter says under which key a pod counts as it is now and what it
// requests there; ok false: nowhere.
type Counter[K comparable] func(*corev1.Pod) (key K, requests corev1.ResourceList, ok bool)

// Informer is what Watch needs of a pod informer (client-go's and
// controller-runtime's both).
type Informer interface {
	AddEventHandler(toolscache.ResourceEventHandler) (toolscache.ResourceEventHandlerRegistration, error)
}

// Watch keeps the sums by the informer's pod events, each pod counted as
// count says. onChange, if not nil, is called after each event that
// changed the sums, outside the lock. Synced tells from then on whether
// the first list was counted.
func (s *Sums[K]) Watch(inf Informer, count Counter[K], onChange func()) error {
	reg, err := inf.AddEventHandler(s.Handler(count, onChange))
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.synced = reg.HasSynced
	s.mu.Unlock()
	return nil
}

// Synced tells whether the sums count every pod the watched informer had
// at start: never before Watch (sums set by hand need not ask).
func (s *Sums[K]) Synced() bool {
	s.mu.RLock()
	synced := s.synced
	s.mu.RUnlock()
	return synced != nil && synced()
}

// Handler is the pod event handler that keeps the sums (Watch registers
// it).
func (s *Sums[K]) Handler(count Counter[K], onChange func()) toolscache.ResourceEventHandler {
	changed := func(yes bool) {
		if yes && onChange != nil {
			onChange()
		}
	}
	set := func(obj any) {
		pod, ok := obj.(*corev1.Pod)
		if !ok {
			return
		}
		if key, requests, ok := count(pod); ok {
			_, c := s.Set(pod.UID, key, requests)
			changed(c)
			return
		}
		_, c := s.Remove(pod.UID)
		changed(c)
	}
	return toolscache.ResourceEventHandlerFuncs{
		AddFunc:    set,
		UpdateFunc: func(_, obj any) { set(obj) },
		DeleteFunc: func(obj any) {
			if tomb, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
				obj = tomb.Obj
			}
			if pod, ok := obj.(*corev1.Pod); ok {
				_, c := s.Remove(pod.UID)
				changed(c)
			}
		},
	}
}
