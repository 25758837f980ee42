package summary

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
	"github.com/fleetlet/fleetlet/pkg/indexer"
	"github.com/fleetlet/fleetlet/pkg/podsums"
	"github.com/fleetlet/fleetlet/pkg/proxy"
	"github.com/fleetlet/fleetlet/pkg/testenv"
)

func TestIsSchedulableNode(t *testing.T) {
	cases := []struct {
		name string
		node *corev1.Node
		want bool
	}{
		{name: "ready real node", node: makeNode("n").obj(), want: true},
		{name: "cordoned", node: makeNode("n").cordoned().obj()},
		{name: "not ready", node: makeNode("n").ready(corev1.ConditionFalse).obj()},
		{name: "ready unknown", node: makeNode("n").ready(corev1.ConditionUnknown).obj()},
		{name: "no Ready condition yet", node: makeNode("n").noConditions().obj()},
		{name: "virtual node", node: makeNode("n").virtual().obj()},
		{name: "type label of another value", node: makeNode("n").label(v1alpha1.LabelNodeType, "worker").obj(), want: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, IsSchedulableNode(tc.node), "IsSchedulableNode()")
		})
	}
}

func TestIsActivePod(t *testing.T) {
	cases := []struct {
		name string
		pod  *corev1.Pod
		want bool
	}{
		{name: "running", pod: makePod("p", "n").obj(), want: true},
		{name: "pending and bound", pod: makePod("p", "n").phase(corev1.PodPending).obj(), want: true},
		{name: "unknown phase", pod: makePod("p", "n").phase(corev1.PodUnknown).obj(), want: true},
		{name: "unbound", pod: makePod("p", "").phase(corev1.PodPending).obj()},
		{name: "succeeded", pod: makePod("p", "n").phase(corev1.PodSucceeded).obj()},
		{name: "failed", pod: makePod("p", "n").phase(corev1.PodFailed).obj()},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, IsActivePod(tc.pod), "IsActivePod()")
			wantIndex := []string(nil)
			if tc.want {
				wantIndex = []string{tc.pod.Spec.NodeName}
			}
			assert.Empty(t, cmp.Diff(wantIndex, indexer.ActivePodNodeName.Extract(tc.pod)), "indexer.ActivePodNodeName (-want,+got)")
		})
	}
}

func TestPodRequests(t *testing.T) {
	cases := []struct {
		name string
		pod  *corev1.Pod
		want corev1.ResourceList
	}{
		{
			name: "no requests",
			pod:  makePod("p", "n").container().obj(),
			want: corev1.ResourceList{},
		},
		{
			name: "containers are summed",
			pod:  makePod("p", "n").container("cpu", "100m", "memory", "1Gi").container("cpu", "200m", "nvidia.com/gpu", "1").obj(),
			want: resources("cpu", "300m", "memory", "1Gi", "nvidia.com/gpu", "1"),
		},
		{
			name: "a larger init container wins",
			pod:  makePod("p", "n").init("cpu", "1", "memory", "100Mi").container("cpu", "200m", "memory", "1Gi").obj(),
			want: resources("cpu", "1", "memory", "1Gi"),
		},
		{
			name: "sidecars run beside later init containers and the containers",
			// Init phase: sidecar 100m + init 500m = 600m; then sidecar
			// 100m + container 200m = 300m.
			pod:  makePod("p", "n").sidecar("cpu", "100m").init("cpu", "500m").container("cpu", "200m").obj(),
			want: resources("cpu", "600m"),
		},
		{
			name: "a sidecar adds to the containers",
			pod:  makePod("p", "n").sidecar("cpu", "100m", "memory", "64Mi").container("cpu", "200m", "memory", "1Gi").obj(),
			want: resources("cpu", "300m", "memory", "1088Mi"),
		},
		{
			name: "overhead is added",
			pod:  makePod("p", "n").container("cpu", "200m").overhead("cpu", "50m", "memory", "20Mi").obj(),
			want: resources("cpu", "250m", "memory", "20Mi"),
		},
		{
			name: "pod-level requests replace the containers' for cpu and memory",
			pod:  makePod("p", "n").container("cpu", "200m", "ephemeral-storage", "1Gi").podLevel("cpu", "1", "memory", "2Gi").obj(),
			want: resources("cpu", "1", "memory", "2Gi", "ephemeral-storage", "1Gi"),
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			assert.Empty(t, cmp.Diff(tc.want, proxy.PodRequests(tc.pod), quantityEqual), "PodRequests() (-want,+got)")
		})
	}
}

func TestSharedLabels(t *testing.T) {
	cases := []struct {
		name  string
		nodes []*corev1.Node
		want  map[string]string
	}{
		{name: "no nodes", want: nil},
		{
			name:  "one node shares all its labels",
			nodes: []*corev1.Node{makeNode("a").label("zone", "z1").obj()},
			want:  map[string]string{corev1.LabelHostname: "a", "zone": "z1"},
		},
		{
			name: "key and value must both match",
			nodes: []*corev1.Node{
				makeNode("a").label("region", "r1").label("zone", "z1").label("only-a", "x").obj(),
				makeNode("b").label("region", "r1").label("zone", "z2").obj(),
				makeNode("c").label("region", "r1").label("zone", "z1").obj(),
			},
			want: map[string]string{"region": "r1"},
		},
		{
			name: "nothing shared is nil, not empty",
			nodes: []*corev1.Node{
				makeNode("a").obj(),
				makeNode("b").obj(),
			},
			want: nil,
		},
		{
			name: "a node without labels shares nothing",
			nodes: []*corev1.Node{
				makeNode("a").label("region", "r1").obj(),
				makeNode("b").noLabels().obj(),
			},
			want: nil,
		},
		{
			name: "an empty value is a value",
			nodes: []*corev1.Node{
				makeNode("a").label("gpu", "").obj(),
				makeNode("b").label("gpu", "").obj(),
			},
			want: map[string]string{"gpu": ""},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			assert.Empty(t, cmp.Diff(tc.want, SharedLabels(tc.nodes)), "SharedLabels() (-want,+got)")
		})
	}
}

// The input slices are not modified by SharedLabels.
func TestSharedLabelsLeavesNodesAlone(t *testing.T) {
	a := makeNode("a").label("zone", "z1").obj()
	b := makeNode("b").label("zone", "z2").obj()
	SharedLabels([]*corev1.Node{a, b})
	assert.Empty(t, cmp.Diff(makeNode("a").label("zone", "z1").obj().Labels, a.Labels), "labels of node a changed (-want,+got)")
}

func TestSummarize(t *testing.T) {
	big := func(name string) *nodeWrapper {
		return makeNode(name).capacity("cpu", "8", "memory", "32Gi", "pods", "110").
			allocatable("cpu", "7500m", "memory", "30Gi", "pods", "110").label("region", "r1")
	}
	zero := resources("cpu", "0", "memory", "0", "pods", "0")
	cases := []struct {
		name  string
		nodes []*corev1.Node
		pods  []*corev1.Pod
		want  v1alpha1.ClusterSummaryStatus
	}{
		{
			name: "empty cluster",
			want: v1alpha1.ClusterSummaryStatus{Requested: zero},
		},
		{
			name: "nodes are summed and pods counted",
			nodes: []*corev1.Node{
				big("a").label("zone", "z1").obj(),
				makeNode("b").capacity("cpu", "4", "memory", "16Gi", "pods", "110", "nvidia.com/gpu", "2").
					label("region", "r1").label("zone", "z2").obj(),
			},
			pods: []*corev1.Pod{
				makePod("p1", "a").container("cpu", "500m", "memory", "1Gi").obj(),
				makePod("p2", "b").phase(corev1.PodPending).container("cpu", "1", "nvidia.com/gpu", "1").obj(),
				makePod("p3", "b").container().obj(),
			},
			want: v1alpha1.ClusterSummaryStatus{
				NodeCount:   2,
				Capacity:    resources("cpu", "12", "memory", "48Gi", "pods", "220", "nvidia.com/gpu", "2"),
				Allocatable: resources("cpu", "11500m", "memory", "46Gi", "pods", "220", "nvidia.com/gpu", "2"),
				Requested:   resources("cpu", "1500m", "memory", "1Gi", "pods", "3", "nvidia.com/gpu", "1"),
				// cpu, memory and pods free on a, the GPU on b.
				LargestFree: resources("cpu", "7", "memory", "29Gi", "pods", "109", "nvidia.com/gpu", "1"),
				Labels:      map[string]string{"region": "r1"},
			},
		},
		{
			name: "excluded nodes count for nothing, nor do their pods",
			nodes: []*corev1.Node{
				big("real").obj(),
				big("cordoned").cordoned().label("only", "excluded").obj(),
				big("not-ready").ready(corev1.ConditionFalse).obj(),
				big("virtual").virtual().obj(),
			},
			pods: []*corev1.Pod{
				makePod("on-real", "real").container("cpu", "1").obj(),
				makePod("on-cordoned", "cordoned").container("cpu", "1").obj(),
				makePod("on-not-ready", "not-ready").container("cpu", "1").obj(),
				makePod("proxy", "virtual").container("cpu", "1").source("src").obj(),
				makePod("on-unknown-node", "gone").container("cpu", "1").obj(),
			},
			want: v1alpha1.ClusterSummaryStatus{
				NodeCount:   1,
				Capacity:    resources("cpu", "8", "memory", "32Gi", "pods", "110"),
				Allocatable: resources("cpu", "7500m", "memory", "30Gi", "pods", "110"),
				Requested:   resources("cpu", "1", "memory", "0", "pods", "1"),
				LargestFree: resources("cpu", "6500m", "memory", "30Gi", "pods", "109"),
				Labels:      map[string]string{corev1.LabelHostname: "real", "region": "r1"},
			},
		},
		{
			name:  "unbound and finished pods count for nothing",
			nodes: []*corev1.Node{big("a").obj()},
			pods: []*corev1.Pod{
				makePod("unbound", "").phase(corev1.PodPending).container("cpu", "1").obj(),
				makePod("done", "a").phase(corev1.PodSucceeded).container("cpu", "1").source("src").obj(),
				makePod("crashed", "a").phase(corev1.PodFailed).container("cpu", "1").obj(),
			},
			want: v1alpha1.ClusterSummaryStatus{
				NodeCount:   1,
				Capacity:    resources("cpu", "8", "memory", "32Gi", "pods", "110"),
				Allocatable: resources("cpu", "7500m", "memory", "30Gi", "pods", "110"),
				Requested:   zero,
				LargestFree: resources("cpu", "7500m", "memory", "30Gi", "pods", "110"),
				Labels:      map[string]string{corev1.LabelHostname: "a", "region": "r1"},
			},
		},
		{
			name:  "requests by source are part of requested",
			nodes: []*corev1.Node{big("a").obj(), big("b").obj()},
			pods: []*corev1.Pod{
				makePod("local", "a").container("cpu", "1", "memory", "1Gi").obj(),
				makePod("from-x-1", "a").source("x").container("cpu", "200m").obj(),
				makePod("from-x-2", "b").source("x").init("cpu", "2").container("cpu", "100m", "memory", "256Mi").obj(),
				makePod("from-y", "b").source("y").container().obj(),
				makePod("from-x-done", "b").source("x").phase(corev1.PodSucceeded).container("cpu", "4").obj(),
				makePod("other-label", "b").label(v1alpha1.LabelParentUID, "uid").container("cpu", "1").obj(),
			},
			want: v1alpha1.ClusterSummaryStatus{
				NodeCount:   2,
				Capacity:    resources("cpu", "16", "memory", "64Gi", "pods", "220"),
				Allocatable: resources("cpu", "15", "memory", "60Gi", "pods", "220"),
				Requested:   resources("cpu", "4200m", "memory", "1280Mi", "pods", "5"),
				// cpu and pods on a (6300m, 108), memory on b (30Gi − 256Mi).
				LargestFree: resources("cpu", "6300m", "memory", "30464Mi", "pods", "108"),
				RequestedBySource: map[string]corev1.ResourceList{
					"x": resources("cpu", "2200m", "memory", "256Mi", "pods", "2"),
					"y": resources("cpu", "0", "memory", "0", "pods", "1"),
				},
				Labels: map[string]string{"region": "r1"},
			},
		},
		{
			name:  "a node listed twice counts once",
			nodes: []*corev1.Node{big("a").obj(), big("a").obj()},
			want: v1alpha1.ClusterSummaryStatus{
				NodeCount:   1,
				Capacity:    resources("cpu", "8", "memory", "32Gi", "pods", "110"),
				Allocatable: resources("cpu", "7500m", "memory", "30Gi", "pods", "110"),
				Requested:   zero,
				LargestFree: resources("cpu", "7500m", "memory", "30Gi", "pods", "110"),
				Labels:      map[string]string{corev1.LabelHostname: "a", "region": "r1"},
			},
		},
		{
			name: "a full node frees nothing, below zero included",
			nodes: []*corev1.Node{
				big("full").obj(),
				makeNode("small").capacity("cpu", "1", "memory", "4Gi", "pods", "10").label("region", "r1").obj(),
			},
			pods: []*corev1.Pod{
				makePod("hog", "full").container("cpu", "8", "memory", "1Gi").obj(),
			},
			want: v1alpha1.ClusterSummaryStatus{
				NodeCount:   2,
				Capacity:    resources("cpu", "9", "memory", "36Gi", "pods", "120"),
				Allocatable: resources("cpu", "8500m", "memory", "34Gi", "pods", "120"),
				Requested:   resources("cpu", "8", "memory", "1Gi", "pods", "1"),
				// full is overcommitted (8 of its 7500m): its cpu counts as
				// 0 free, not −500m, and small's 1 is the most.
				LargestFree: resources("cpu", "1", "memory", "29Gi", "pods", "109"),
				Labels:      map[string]string{"region": "r1"},
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := Summarize(tc.nodes, tc.pods)
			assert.Empty(t, cmp.Diff(tc.want, got, quantityEqual), "Summarize() (-want,+got)")
		})
	}
}

// Summing must not write through to the nodes' own resource lists, which
// come from the informer cache uncopied.
func TestSummarizeLeavesInputsAlone(t *testing.T) {
	a := makeNode("a").capacity("cpu", "1").obj()
	b := makeNode("b").capacity("cpu", "2").obj()
	p := makePod("p", "a").container("cpu", "1").obj()
	Summarize([]*corev1.Node{a, b}, []*corev1.Pod{p, p.DeepCopy()})
	for _, tc := range []struct {
		name      string
		got, want *corev1.Node
	}{
		{"a", a, makeNode("a").capacity("cpu", "1").obj()},
		{"b", b, makeNode("b").capacity("cpu", "2").obj()},
	} {
		assert.Emptyf(t, cmp.Diff(tc.want.Status, tc.got.Status, quantityEqual), "node %s changed (-want,+got)", tc.name)
	}
	assert.Empty(t, cmp.Diff(makePod("p", "a").container("cpu", "1").obj(), p, quantityEqual), "pod changed (-want,+got)")
}

func TestNodeChanged(t *testing.T) {
	base := func() *nodeWrapper {
		return makeNode("n").capacity("cpu", "4", "pods", "110").label("zone", "z1")
	}
	heartbeat := base().obj()
	heartbeat.Status.Conditions[0].LastHeartbeatTime.Time = heartbeat.Status.Conditions[0].LastHeartbeatTime.Add(10)
	heartbeat.Status.Images = []corev1.ContainerImage{{Names: []string{"pause"}}}
	cases := []struct {
		name     string
		old, new *corev1.Node
		want     bool
	}{
		{name: "heartbeat and images", old: base().obj(), new: heartbeat},
		{name: "cordoned", old: base().obj(), new: base().cordoned().obj(), want: true},
		{name: "uncordoned", old: base().cordoned().obj(), new: base().obj(), want: true},
		{name: "not ready", old: base().obj(), new: base().ready(corev1.ConditionFalse).obj(), want: true},
		{name: "label", old: base().obj(), new: base().label("zone", "z2").obj(), want: true},
		{name: "capacity", old: base().obj(), new: base().capacity("cpu", "8", "pods", "110").obj(), want: true},
		{name: "allocatable", old: base().obj(), new: base().allocatable("cpu", "3", "pods", "110").obj(), want: true},
		{name: "same capacity written differently", old: base().obj(), new: base().capacity("cpu", "4000m", "pods", "110").obj()},
		{name: "label of a virtual node", old: base().virtual().obj(), new: base().virtual().label("zone", "z2").obj()},
		{name: "capacity of a cordoned node", old: base().cordoned().obj(), new: base().cordoned().capacity("cpu", "1").obj()},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, nodeChanged(tc.old, tc.new), "nodeChanged()")
		})
	}
}

// Only the pod changes that can change the summary change the totals, and
// ask for a recompute: binding, finishing, a resize, its source.
func TestTotalsChangeWithWhatCounts(t *testing.T) {
	base := func() *podWrapper { return makePod("p", "n").container("cpu", "1") }
	ready := base().obj()
	ready.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
	ready.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "c0", Ready: true}}
	resized := base().obj()
	resized.Spec.Containers[0].Resources.Requests = resources("cpu", "2")
	cases := []struct {
		name     string
		old, new *corev1.Pod
		want     bool
	}{
		{name: "readiness and container statuses", old: base().obj(), new: ready},
		{name: "bound", old: makePod("p", "").container("cpu", "1").obj(), new: base().obj(), want: true},
		{name: "succeeded", old: base().obj(), new: base().phase(corev1.PodSucceeded).obj(), want: true},
		{name: "failed", old: base().obj(), new: base().phase(corev1.PodFailed).obj(), want: true},
		{name: "pending to running", old: base().phase(corev1.PodPending).obj(), new: base().obj()},
		{name: "resized", old: base().obj(), new: resized, want: true},
		{name: "source label", old: base().obj(), new: base().source("x").obj(), want: true},
		{name: "another label", old: base().obj(), new: base().label("app", "web").obj()},
		{name: "unbound pod changes", old: makePod("p", "").obj(), new: makePod("p", "").container("cpu", "1").obj()},
		{name: "finished pod changes", old: base().phase(corev1.PodSucceeded).obj(), new: base().phase(corev1.PodSucceeded).source("x").obj()},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			changes := 0
			events := &testenv.PodEvents{}
			require.NoError(t, podsums.New[nodeSource]().Watch(events, countActive, func() { changes++ }))
			events.OnAdd(tc.old, false)
			changes = 0
			events.OnUpdate(tc.old, tc.new)
			assert.Equal(t, tc.want, changes > 0, "the totals changed")
		})
	}
}
