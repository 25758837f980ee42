package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
	"github.com/fleetlet/fleetlet/pkg/proxy"
	"github.com/fleetlet/fleetlet/pkg/sandbox"
)

// fragmentedCPU is the CPU of each node of a fragmented cluster: less than
// one bench pod requests (benchPod), so that no node there can run one.
const fragmentedCPU = "9m"

// fragmentedNodes is how many nodes a fragmented cluster has: enough that,
// empty, 99 % of its CPU is free after a pod.
const fragmentedNodes = 100

// kwokNodes selects the sandbox's fake nodes, the real nodes of a
// cluster (not a source's virtual nodes).
var kwokNodes = metav1.ListOptions{LabelSelector: sandbox.KwokNodeSelector}

// fillerNamespace holds, in the other clusters, pods that take half of
// each node's CPU (another tenant's load): their free share, 50 %, is
// then below the fragmented cluster's 99 %, so that a ranking by free
// share alone sends every pod there first.
const fillerNamespace = "bench-filler"

// validate refuses options that cannot run together: --fragment needs a
// cluster besides the fragmented one for the pods, and the placement and
// global Service cases place pods in the last cluster, the fragmented one.
func (o options) validate() error {
	if !o.fragment {
		return nil
	}
	switch {
	case o.clusters < 2:
		return fmt.Errorf("--fragment needs at least 2 clusters, not %d: the last one is fragmented, the pods run in the others", o.clusters)
	case o.placementPods > 0 || o.globalPods > 0:
		return errors.New("--fragment cannot run with --placement-pods or --global-service-pods: their cases place pods in the last cluster, the fragmented one")
	}
	return nil
}

// fragmentFleet makes the last of the clusters fragmented (fragment) and
// fills half of every other cluster (fill), then waits until the source's
// virtual nodes show both.
func fragmentFleet(ctx context.Context, clients map[string]kubernetes.Interface, names []string, source string) error {
	last := names[len(names)-1]
	for _, c := range names[:len(names)-1] {
		if err := fill(ctx, clients[c], clients[source], c); err != nil {
			return err
		}
	}
	return fragment(ctx, clients[last], clients[source], last)
}

// fill runs, on every node of cluster c, a pod of another tenant that
// takes half its CPU, and waits until the source's virtual node of c
// shows that much less allocatable.
func fill(ctx context.Context, cs, source kubernetes.Interface, c string) error {
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: fillerNamespace}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	nodes, err := cs.CoreV1().Nodes().List(ctx, kwokNodes)
	if err != nil {
		return err
	}
	var total, left resource.Quantity
	for _, n := range nodes.Items {
		cpu := n.Status.Allocatable.Cpu().DeepCopy()
		total.Add(cpu)
		half := resource.NewMilliQuantity(cpu.MilliValue()/2, resource.DecimalSI)
		left.Add(*resource.NewMilliQuantity(cpu.MilliValue()-half.MilliValue(), resource.DecimalSI))
		pod := benchPod("filler-"+n.Name, fillerNamespace, "bench", "filler")
		pod.Spec.NodeName = n.Name
		pod.Spec.Containers[0].Resources.Requests[corev1.ResourceCPU] = *half
		if _, err := cs.CoreV1().Pods(fillerNamespace).Create(ctx, pod, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("filling node %s of %s: %w", n.Name, c, err)
		}
	}
	if err := virtualNodeCPUAtMost(ctx, source, c, left); err != nil {
		return fmt.Errorf("waiting for the source's virtual node of %s to show %s of its %s of CPU free: %w", c, left.String(), total.String(), err)
	}
	return nil
}

// virtualNodeCPUAtMost waits until the source's virtual node of cluster c
// shows at most cpu of allocatable CPU: the source has read c's summary.
func virtualNodeCPUAtMost(ctx context.Context, source kubernetes.Interface, c string, cpu resource.Quantity) error {
	shown := func(ctx context.Context) (bool, error) {
		n, err := source.CoreV1().Nodes().Get(ctx, proxy.NodeName(proxy.TargetKey{Name: c}), metav1.GetOptions{})
		if err != nil {
			return false, nil //nolint:nilerr // poll again
		}
		q, ok := n.Status.Allocatable[corev1.ResourceCPU]
		return ok && q.Cmp(cpu) <= 0, nil
	}
	return wait.PollUntilContextTimeout(ctx, time.Second, 2*time.Minute, true, shown)
}

// fragment makes cluster c fragmented: its nodes (the sandbox's, and more
// like them up to fragmentedNodes) each with fragmentedCPU of CPU, free
// CPU that no single node has enough of for a pod, which only a ranking
// that reads the largest free slot of one node sees. It waits until c's
// ClusterSummary says so (largestFree) and the source's virtual node of c
// shows the cluster's new allocatable (the source has read the summary).
func fragment(ctx context.Context, cs, source kubernetes.Interface, c string) error {
	nodes, err := cs.CoreV1().Nodes().List(ctx, kwokNodes)
	if err != nil {
		return err
	}
	if len(nodes.Items) == 0 {
		return fmt.Errorf("%s has no nodes to fragment", c)
	}
	cpu := resource.MustParse(fragmentedCPU)
	for i := len(nodes.Items); i < fragmentedNodes; i++ {
		n := smallNodeLike(&nodes.Items[0], fmt.Sprintf("%s-small-%d", c, i), cpu)
		if _, err := cs.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating node %s in %s: %w", n.Name, c, err)
		}
	}
	patch, err := json.Marshal(map[string]any{"status": map[string]any{
		"capacity":    map[string]string{string(corev1.ResourceCPU): fragmentedCPU},
		"allocatable": map[string]string{string(corev1.ResourceCPU): fragmentedCPU},
	}})
	if err != nil {
		return err
	}
	all, err := cs.CoreV1().Nodes().List(ctx, kwokNodes)
	if err != nil {
		return err
	}
	for _, n := range all.Items {
		// The created nodes too: the API server drops a status sent with
		// a create.
		if _, err := cs.CoreV1().Nodes().Patch(ctx, n.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status"); err != nil {
			return fmt.Errorf("fragmenting node %s of %s: %w", n.Name, c, err)
		}
	}
	return fragmentedShown(ctx, cs, source, c, len(all.Items))
}

// smallNodeLike is a fake node like like (kwok manages it; the labels the
// cluster's nodes share stay shared) named name, with cpu of CPU.
func smallNodeLike(like *corev1.Node, name string, cpu resource.Quantity) *corev1.Node {
	labels := map[string]string{}
	for k, v := range like.Labels {
		labels[k] = v
	}
	labels[corev1.LabelHostname] = name
	resources := like.Status.Capacity.DeepCopy()
	resources[corev1.ResourceCPU] = cpu
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels, Annotations: map[string]string{
			"node.alpha.kubernetes.io/ttl": "0",
			"kwok.x-k8s.io/node":           "fake",
		}},
		Status: corev1.NodeStatus{Capacity: resources, Allocatable: resources.DeepCopy(), Phase: corev1.NodeRunning},
	}
}

// fragmentedShown waits until cluster c's summary and the source's virtual
// node of c show its nodes, that many, with fragmentedCPU each.
func fragmentedShown(ctx context.Context, cs, source kubernetes.Interface, c string, nodes int) error {
	want := resource.MustParse(fragmentedCPU)
	all := want.DeepCopy()
	all.Mul(int64(nodes))
	summarized := func(ctx context.Context) (bool, error) {
		alloc, free, err := summaryCPU(ctx, cs)
		if err != nil {
			return false, nil //nolint:nilerr // the summary may not be written yet: poll again
		}
		// Every node counted (kwok has made the new ones Ready), none
		// with room for a pod.
		return alloc.Cmp(all) == 0 && free.Cmp(want) <= 0, nil
	}
	if err := wait.PollUntilContextTimeout(ctx, time.Second, 2*time.Minute, true, summarized); err != nil {
		return fmt.Errorf("waiting for %s's summary to show its %d nodes fragmented: %w", c, nodes, err)
	}
	if err := virtualNodeCPUAtMost(ctx, source, c, all); err != nil {
		return fmt.Errorf("waiting for the source's virtual node of %s to show its CPU as %s: %w", c, all.String(), err)
	}
	return nil
}

// summaryCPU reads the CPU of the cluster's schedulable nodes, and the
// most free on any one of them, from its own ClusterSummary.
func summaryCPU(ctx context.Context, cs kubernetes.Interface) (alloc, free resource.Quantity, err error) {
	raw, err := cs.Discovery().RESTClient().Get().
		AbsPath("/apis", v1alpha1.GroupVersion.Group, v1alpha1.GroupVersion.Version, "clustersummaries").DoRaw(ctx)
	if err != nil {
		return alloc, free, err
	}
	var list v1alpha1.ClusterSummaryList
	if err := json.Unmarshal(raw, &list); err != nil {
		return alloc, free, err
	}
	if len(list.Items) != 1 {
		return alloc, free, fmt.Errorf("%d ClusterSummaries, not one", len(list.Items))
	}
	st := list.Items[0].Status
	return st.Allocatable[corev1.ResourceCPU], st.LargestFree[corev1.ResourceCPU], nil
}
