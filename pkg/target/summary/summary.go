package summary

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
	"github.com/fleetlet/fleetlet/pkg/indexer"
)

// IsSchedulableNode reports whether node counts in the summary: a real node
// (not labelled type=virtual-kubelet), not cordoned, and Ready.
//
// Taints are deliberately not looked at: which taints a pod tolerates is the
// pod's business, and the candidate scheduler, which really schedules every
// candidate, has the last word anyway.
func IsSchedulableNode(node *corev1.Node) bool {
	if node.Labels[v1alpha1.LabelNodeType] == v1alpha1.NodeTypeVirtualKubelet {
		return false
	}
	if node.Spec.Unschedulable {
		return false
	}
	for _, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// IsActivePod reports whether pod holds resources on its node: bound and not
// finished (neither Succeeded nor Failed). Terminating pods still count, as
// they do for the scheduler, until they are gone.
func IsActivePod(pod *corev1.Pod) bool { return indexer.IsActivePod(pod) }

// Summarize returns the summary of nodes and pods: capacity, allocatable and
// node count of the schedulable nodes (IsSchedulableNode), the labels they
// all share, and the requests of the active pods (IsActivePod) bound to
// them, in total and by source (the value of a pod's
// multicluster.fleetlet.io/parent-cluster label). Other nodes and pods are
// ignored, so callers may pass more than needed. Requested always has cpu,
// memory and pods, at zero if need be. Conditions are left empty.
func Summarize(nodes []*corev1.Node, pods []*corev1.Pod) v1alpha1.ClusterSummaryStatus {
	return summarizeTotals(nodes, totalsOf(pods))
}

// summarizeTotals is Summarize from what the active pods request on each
// node, by source (totals.go, kept by podsums), instead of the pods themselves.
func summarizeTotals(nodes []*corev1.Node, totals nodeTotals) v1alpha1.ClusterSummaryStatus {
	var status v1alpha1.ClusterSummaryStatus
	schedulable := make(map[string]bool, len(nodes))
	var counted []*corev1.Node
	for _, node := range nodes {
		if !IsSchedulableNode(node) || schedulable[node.Name] {
			continue
		}
		schedulable[node.Name] = true
		counted = append(counted, node)
		status.Capacity = addResources(status.Capacity, node.Status.Capacity)
		status.Allocatable = addResources(status.Allocatable, node.Status.Allocatable)
	}
	status.NodeCount = int32(len(counted))
	status.Labels = SharedLabels(counted)

	status.Requested = zeroRequests()
	byNode := make(map[string]corev1.ResourceList, len(counted))
	for _, node := range counted {
		for source, sum := range totals[node.Name] {
			addResources(status.Requested, sum)
			if byNode[node.Name] == nil {
				byNode[node.Name] = zeroRequests()
			}
			addResources(byNode[node.Name], sum)
			if source == "" {
				continue
			}
			if status.RequestedBySource == nil {
				status.RequestedBySource = map[string]corev1.ResourceList{}
			}
			if status.RequestedBySource[source] == nil {
				status.RequestedBySource[source] = zeroRequests()
			}
			addResources(status.RequestedBySource[source], sum)
		}
	}
	status.LargestFree = largestFree(counted, byNode)
	return status
}

// largestFree is, per resource, the most any one node has free:
// allocatable minus what its pods request (used), never below zero.
func largestFree(nodes []*corev1.Node, used map[string]corev1.ResourceList) corev1.ResourceList {
	var out corev1.ResourceList
	for _, node := range nodes {
		for name, alloc := range node.Status.Allocatable {
			free := alloc.DeepCopy()
			if q, ok := used[node.Name][name]; ok {
				free.Sub(q)
			}
			if free.Sign() < 0 {
				free = *resource.NewQuantity(0, alloc.Format)
			}
			if out == nil {
				out = corev1.ResourceList{}
			}
			if cur, ok := out[name]; !ok || free.Cmp(cur) > 0 {
				out[name] = free
			}
		}
	}
	return out
}

// SharedLabels returns the labels, key and value, that every node carries;
// nil for no nodes.
func SharedLabels(nodes []*corev1.Node) map[string]string {
	if len(nodes) == 0 {
		return nil
	}
	shared := make(map[string]string, len(nodes[0].Labels))
	for k, v := range nodes[0].Labels {
		shared[k] = v
	}
	for _, node := range nodes[1:] {
		for k, v := range shared {
			if got, ok := node.Labels[k]; !ok || got != v {
				delete(shared, k)
			}
		}
	}
	if len(shared) == 0 {
		return nil
	}
	return shared
}

// zeroRequests is the requested list of no pods: cpu, memory and pods at
// zero, so that `kubectl get` shows 0 rather than nothing.
func zeroRequests() corev1.ResourceList {
	return corev1.ResourceList{
		corev1.ResourceCPU:    *resource.NewQuantity(0, resource.DecimalSI),
		corev1.ResourceMemory: *resource.NewQuantity(0, resource.BinarySI),
		corev1.ResourcePods:   *resource.NewQuantity(0, resource.DecimalSI),
	}
}

// addResources adds every quantity of add to sum, allocating sum if it is
// nil and add is not empty, and returns sum.
func addResources(sum, add corev1.ResourceList) corev1.ResourceList {
	if len(add) == 0 {
		return sum
	}
	if sum == nil {
		sum = make(corev1.ResourceList, len(add))
	}
	for name, q := range add {
		if cur, ok := sum[name]; ok {
			cur.Add(q)
			sum[name] = cur
		} else {
			sum[name] = q.DeepCopy()
		}
	}
	return sum
}
