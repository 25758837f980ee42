package summary

import (
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
	"github.com/fleetlet/fleetlet/pkg/podsums"
	"github.com/fleetlet/fleetlet/pkg/proxy"
)

// The totals: what the active pods (IsActivePod) bound to each node
// request, by source, kept by the pod informer's events (podsums), so that
// a recompute of the summary costs the nodes and sources, not every pod of
// the cluster: a burst recomputed it on nearly every pod event, each time
// walking every pod bound to a schedulable node.

// nodeSource is where an active pod counts: its node, and its source (its
// multicluster.fleetlet.io/parent-cluster label, "" for the cluster's own).
type nodeSource struct{ node, source string }

// countActive counts an active pod on its node and source, with its
// requests; any other pod nowhere. Only binding, finishing, a resize or a
// new source change what it counts; readiness and container statuses do
// not.
func countActive(pod *corev1.Pod) (nodeSource, corev1.ResourceList, bool) {
	if !IsActivePod(pod) {
		return nodeSource{}, nil, false
	}
	return nodeSource{node: pod.Spec.NodeName, source: pod.Labels[v1alpha1.LabelParentCluster]}, proxy.PodRequests(pod), true
}

// nodeTotals is, per node and source, what the active pods there request,
// their number under "pods".
type nodeTotals map[string]map[string]corev1.ResourceList

// totalsFor returns the totals of nodes (a copy); ok is false until every
// pod at start was counted.
func totalsFor(sums *podsums.Sums[nodeSource], nodes []*corev1.Node) (nodeTotals, bool) {
	if !sums.Synced() {
		return nil, false
	}
	names := make(map[string]bool, len(nodes))
	for _, n := range nodes {
		names[n.Name] = true
	}
	return toNodeTotals(sums.Select(func(k nodeSource) bool { return names[k.node] })), true
}

// totalsOf counts pods as the informer's events would, each once.
func totalsOf(pods []*corev1.Pod) nodeTotals {
	sums := podsums.New[nodeSource]()
	for i, p := range pods {
		if key, requests, ok := countActive(p); ok {
			sums.Set(types.UID(strconv.Itoa(i)), key, requests)
		}
	}
	return toNodeTotals(sums.Select(func(nodeSource) bool { return true }))
}

// toNodeTotals arranges sums by node and source, each pod count under
// "pods".
func toNodeTotals(sums map[nodeSource]podsums.Sum) nodeTotals {
	out := nodeTotals{}
	for k, sum := range sums {
		list := sum.Requests
		list[corev1.ResourcePods] = *resource.NewQuantity(sum.Pods, resource.DecimalSI)
		if out[k.node] == nil {
			out[k.node] = map[string]corev1.ResourceList{}
		}
		out[k.node][k.source] = list
	}
	return out
}
