package vnode

import (
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	resourcehelper "k8s.io/component-helpers/resource"
	v1helper "k8s.io/kubernetes/pkg/apis/core/v1/helper"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
)

// baseResources are on every virtual node, even when zero.
var baseResources = []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory, corev1.ResourcePods}

// Allocatable returns a virtual node's allocatable resources: what its
// target can still run, plus what the proxies bound or pinned to the node
// request (proxies, pod count under "pods"; see ProxyRequests).
//
// What the target can still run is, per resource, its ClusterSummary's
// allocatable minus everything requested there — this source's own
// delegates included — never less than zero. A nil summary (not read yet)
// can run nothing.
//
// Adding the proxies is what keeps the source scheduler from ever refusing a
// pinned proxy: whatever the summary says, allocatable minus the proxies
// bound to the node is at least what the pinned ones request. And because
// the own delegates stay counted in requested, they are not counted twice:
// once a proxy is bound, allocatable minus the bound proxies is exactly what
// the target can still run, as on a kubelet's node. (Subtracting only the
// others' load and then adding the proxies would show this source's own
// delegates as free room a second time.)
//
// The result has cpu, memory and pods, and every other resource the target
// offers (ephemeral-storage, hugepages, extended resources) or a proxy
// requests.
func Allocatable(summary *v1alpha1.ClusterSummaryStatus, proxies corev1.ResourceList) corev1.ResourceList {
	var allocatable, requested corev1.ResourceList
	if summary != nil {
		allocatable, requested = summary.Allocatable, summary.Requested
	}
	out := corev1.ResourceList{}
	for _, name := range resourceNames(allocatable, proxies) {
		free := sub(allocatable[name], requested[name])
		sum := zero(name)
		sum.Add(free)
		sum.Add(proxies[name])
		out[name] = whole(name, sum)
	}
	return out
}

// whole rounds a quantity of a resource counted in whole units (pods,
// extended resources such as GPUs) down to a whole number: what a target
// reports is not trusted to be one, and the API server refuses a node
// whose status says 1.5 GPUs (its status would stop following).
func whole(name corev1.ResourceName, q resource.Quantity) resource.Quantity {
	if name != corev1.ResourcePods && !v1helper.IsExtendedResourceName(name) {
		return q
	}
	if m := q.MilliValue(); m%1000 != 0 {
		return *resource.NewQuantity(m/1000, resource.DecimalSI)
	}
	return q
}

func Capacity(summary *v1alpha1.ClusterSummaryStatus, allocatable corev1.ResourceList) corev1.ResourceList {
	var capacity corev1.ResourceList
	if summary != nil {
		capacity = summary.Capacity
	}
	out := make(corev1.ResourceList, len(allocatable))
	for name, a := range allocatable {
		c, ok := capacity[name]
		if ok {
			c = whole(name, c)
		}
		if !ok || c.Cmp(a) < 0 {
			c = a
		}
		out[name] = c.DeepCopy()
	}
	return out
}

// ProxyRequests returns what the pods request together, with "pods" their
// number, computed as the kube-scheduler does for a pod it has not bound
// yet (pinned proxies; bound is false) or for one it has (bound is true:
// resources a resize has allocated count too, whichever is larger).
func ProxyRequests(pods []*corev1.Pod, bound bool) corev1.ResourceList {
	out := corev1.ResourceList{}
	opts := resourcehelper.PodResourcesOptions{}
	if bound {
		opts.UseStatusResources = true
		opts.InPlacePodLevelResourcesVerticalScalingEnabled = true
	}
	for _, pod := range pods {
		for name, q := range resourcehelper.PodRequests(pod, opts) {
			sum, ok := out[name]
			if !ok {
				sum = zero(name)
			}
			sum.Add(q)
			out[name] = sum
		}
	}
	count := zero(corev1.ResourcePods)
	count.Add(*resource.NewQuantity(int64(len(pods)), resource.DecimalSI))
	out[corev1.ResourcePods] = count
	return out
}

// AddResources returns a + b, per resource in either.
func AddResources(a, b corev1.ResourceList) corev1.ResourceList {
	out := make(corev1.ResourceList, len(a)+len(b))
	for _, name := range resourceNames(a, b) {
		sum := zero(name)
		sum.Add(a[name])
		sum.Add(b[name])
		out[name] = sum
	}
	return out
}

// resourceNames returns the base resources and every resource of the lists,
// each once.
func resourceNames(lists ...corev1.ResourceList) []corev1.ResourceName {
	seen := map[corev1.ResourceName]bool{}
	var names []corev1.ResourceName
	add := func(n corev1.ResourceName) {
		if !seen[n] {
			seen[n] = true
			names = append(names, n)
		}
	}
	for _, n := range baseResources {
		add(n)
	}
	for _, l := range lists {
		for n := range l {
			add(n)
		}
	}
	return names
}

// sub returns max(0, a - b).
func sub(a, b resource.Quantity) resource.Quantity {
	d := a.DeepCopy()
	d.Sub(b)
	if d.Sign() < 0 {
		return resource.Quantity{}
	}
	return d
}

// zero returns a zero quantity in the format usual for the resource.
func zero(name corev1.ResourceName) resource.Quantity {
	switch {
	case name == corev1.ResourceMemory, name == corev1.ResourceEphemeralStorage,
		name == corev1.ResourceStorage, strings.HasPrefix(string(name), corev1.ResourceHugePagesPrefix):
		return *resource.NewQuantity(0, resource.BinarySI)
	default:
		return *resource.NewQuantity(0, resource.DecimalSI)
	}
}
