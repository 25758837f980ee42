package main

import (
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestSmallNodeLikeIsTooSmallForABenchPod: the nodes a fragmented cluster
// gets share the labels of the cluster's nodes (what the summary exposes
// for placement stays shared), have their own hostname, and each has less
// CPU than one bench pod asks for; the node they copy is left as it was.
func TestSmallNodeLikeIsTooSmallForABenchPod(t *testing.T) {
	like := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "cluster-3-node-1", Labels: map[string]string{
			"type": "kwok", corev1.LabelHostname: "cluster-3-node-1", "topology.kubernetes.io/region": "cluster-3",
		}},
		Status: corev1.NodeStatus{Capacity: corev1.ResourceList{
			corev1.ResourceCPU: resource.MustParse("32"), corev1.ResourceMemory: resource.MustParse("128Gi"),
		}},
	}
	n := smallNodeLike(like, "cluster-3-small-3", resource.MustParse(fragmentedCPU))

	require.Equal(t, "cluster-3-small-3", n.Name)
	require.Equal(t, "cluster-3-small-3", n.Labels[corev1.LabelHostname])
	require.Equal(t, "kwok", n.Labels["type"])
	require.Equal(t, "cluster-3", n.Labels["topology.kubernetes.io/region"])
	podCPU := benchPod("p", "bench", "k", "v").Spec.Containers[0].Resources.Requests[corev1.ResourceCPU]
	for _, list := range []corev1.ResourceList{n.Status.Capacity, n.Status.Allocatable} {
		cpu := list[corev1.ResourceCPU]
		require.Negative(t, cpu.Cmp(podCPU), "a node of a fragmented cluster must not fit a bench pod")
		require.True(t, list.Memory().Equal(resource.MustParse("128Gi")))
	}
	require.Equal(t, "cluster-3-node-1", like.Labels[corev1.LabelHostname], "the node copied is left as it was")
	require.True(t, like.Status.Capacity.Cpu().Equal(resource.MustParse("32")))
}

// TestFragmentRefusesWhatCannotRunWithIt: a fragmented fleet needs a
// cluster where the pods fit, and no case that places pods in the
// fragmented cluster; without --fragment nothing is refused.
func TestFragmentRefusesWhatCannotRunWithIt(t *testing.T) {
	for _, tc := range []struct {
		name string
		o    options
		ok   bool
	}{
		{name: "fragmented, 3 clusters", o: options{fragment: true, clusters: 3}, ok: true},
		{name: "fragmented, 1 cluster", o: options{fragment: true, clusters: 1}},
		{name: "fragmented, placement cases", o: options{fragment: true, clusters: 3, placementPods: 100}},
		{name: "fragmented, global Service", o: options{fragment: true, clusters: 3, globalPods: 10}},
		{name: "not fragmented, 1 cluster, placement cases", o: options{clusters: 1, placementPods: 100}, ok: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.o.validate()
			if tc.ok {
				require.NoError(t, err)
			} else {
				require.Error(t, err)
			}
		})
	}
}
