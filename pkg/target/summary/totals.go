package summary

import (
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
	"github.com/fleetlet/fleetlet/pkg/proxy"
)

// podTotals keeps what the active pods (IsActivePod) bound to each node
// request, by source (their multicluster.fleetlet.io/parent-cluster label,
// "" for the cluster's own), with the pod count under "pods". The pod
// informer's events keep it, so that a recompute of the summary costs the
// nodes and sources, not every pod of the cluster: a burst recomputed it
// on nearly every pod event, each time walking every pod bound to a
// schedulable node.
type podTotals struct {
	mu     sync.Mutex
	pods   map[types.UID]podTotal
	byNode nodeTotals
	// synced tells whether every pod the cache had at start was counted.
	synced func() bool
	// onChange, if set, is called after each change of the totals (a pod
	// bound, finished, resized, deleted), outside the lock.
	onChange func()
}

// nodeTotals is, per node and source, what the active pods there request.
type nodeTotals map[string]map[string]corev1.ResourceList

type podTotal struct {
	node, source string
	requests     corev1.ResourceList
}

func newPodTotals() *podTotals {
	return &podTotals{pods: map[types.UID]podTotal{}, byNode: nodeTotals{}, synced: func() bool { return false }}
}

// handler is the pod informer's event handler that keeps the totals.
func (t *podTotals) handler() toolscache.ResourceEventHandler {
	changed := func(yes bool) {
		if yes && t.onChange != nil {
			t.onChange()
		}
	}
	return toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { changed(t.set(obj)) },
		UpdateFunc: func(_, obj any) { changed(t.set(obj)) },
		DeleteFunc: func(obj any) {
			if tomb, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
				obj = tomb.Obj
			}
			if pod, ok := obj.(*corev1.Pod); ok {
				t.mu.Lock()
				dropped := t.dropLocked(pod.UID)
				t.mu.Unlock()
				changed(dropped)
			}
		},
	}
}

// set counts a pod as it is now: on its node and source while active,
// nowhere otherwise. It tells whether that changed the totals: binding,
// finishing, a resize or a new source do; readiness, container statuses
// and most other updates do not.
func (t *podTotals) set(obj any) bool {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return false
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if !IsActivePod(pod) {
		return t.dropLocked(pod.UID)
	}
	now := totalOf(pod)
	if old, had := t.pods[pod.UID]; had && old.node == now.node && old.source == now.source && equality.Semantic.DeepEqual(old.requests, now.requests) {
		return false
	}
	t.dropLocked(pod.UID)
	t.byNode.add(now)
	t.pods[pod.UID] = now
	return true
}

// add counts one pod.
func (n nodeTotals) add(p podTotal) {
	sources := n[p.node]
	if sources == nil {
		sources = map[string]corev1.ResourceList{}
		n[p.node] = sources
	}
	sum := sources[p.source]
	if sum == nil {
		sum = zeroRequests()
		sources[p.source] = sum
	}
	addPod(sum, p.requests)
}

// totalOf is what an active pod counts for.
func totalOf(pod *corev1.Pod) podTotal {
	return podTotal{node: pod.Spec.NodeName, source: pod.Labels[v1alpha1.LabelParentCluster], requests: proxy.PodRequests(pod)}
}

// dropLocked stops counting a pod; it tells whether it was counted.
func (t *podTotals) dropLocked(uid types.UID) bool {
	old, ok := t.pods[uid]
	if !ok {
		return false
	}
	delete(t.pods, uid)
	sources := t.byNode[old.node]
	sum := sources[old.source]
	pods := sum[corev1.ResourcePods]
	if pods.Value() <= 1 {
		delete(sources, old.source)
		if len(sources) == 0 {
			delete(t.byNode, old.node)
		}
		return true
	}
	for name, q := range old.requests {
		total := sum[name]
		total.Sub(q)
		sum[name] = total
	}
	pods.Sub(*onePod())
	sum[corev1.ResourcePods] = pods
	return true
}

// of returns a copy of the totals of nodes (nil: none counted yet); ok is
// false until every pod at start was counted.
func (t *podTotals) of(nodes []*corev1.Node) (nodeTotals, bool) {
	if !t.synced() {
		return nil, false
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make(nodeTotals, len(nodes))
	for _, n := range nodes {
		sources := t.byNode[n.Name]
		if sources == nil {
			continue
		}
		cp := make(map[string]corev1.ResourceList, len(sources))
		for s, sum := range sources {
			cp[s] = sum.DeepCopy()
		}
		out[n.Name] = cp
	}
	return out, true
}

// totalsOf counts pods as the informer's events would, each once.
func totalsOf(pods []*corev1.Pod) nodeTotals {
	out := nodeTotals{}
	for _, p := range pods {
		if IsActivePod(p) {
			out.add(totalOf(p))
		}
	}
	return out
}
