package vnode

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
	"github.com/fleetlet/fleetlet/pkg/proxy"
)

var testParams = nodeParams{address: "10.0.0.7", kubeletPort: 10250, kubeletVersion: "fleetlet"}

func TestBuildNode(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	key := proxy.TargetKey{Name: "cluster-2"}
	s := TargetState{
		Key:        key,
		Ready:      true,
		SourceName: "source-1",
		Summary: newSummary().
			capacity(rl("cpu", "8", "memory", "16Gi", "pods", "110")).
			allocatable(rl("cpu", "7", "memory", "14Gi", "pods", "110")).
			requested(rl("cpu", "3", "memory", "4Gi", "pods", "5")).
			bySource("source-1", rl("cpu", "1", "memory", "1Gi", "pods", "1")).obj(),
	}
	s.Summary.Labels = map[string]string{"kubernetes.io/arch": "arm64", "topology.kubernetes.io/region": "eu"}

	n, err := buildNode("fleetlet-cluster-2", s, rl("cpu", "500m", "pods", "1"), testParams, nil, now)
	require.NoError(t, err)
	assert.Empty(t, cmp.Diff([]corev1.Taint{{Key: "virtual-kubelet.io/provider", Value: "fleetlet", Effect: corev1.TaintEffectNoSchedule}}, n.Spec.Taints), "taints (-want,+got)")
	assert.Equal(t, "eu", n.Labels["target.multicluster.fleetlet.io/topology.kubernetes.io.region"], "region label")
	// 7 - 3 + 0.5 = 4.5 cpu; 14Gi - 4Gi = 10Gi; 110 - 5 + 1 = 106 pods.
	assert.Empty(t, cmp.Diff(rl("cpu", "4500m", "memory", "10Gi", "pods", "106"), n.Status.Allocatable, quantityEqual), "allocatable (-want,+got)")
	assert.Empty(t, cmp.Diff(rl("cpu", "8", "memory", "16Gi", "pods", "110"), n.Status.Capacity, quantityEqual), "capacity (-want,+got)")
	wantAddrs := []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.0.0.7"}}
	assert.Empty(t, cmp.Diff(wantAddrs, n.Status.Addresses), "addresses (-want,+got)")
	assert.Equal(t, int32(10250), n.Status.DaemonEndpoints.KubeletEndpoint.Port, "kubelet port")
	wantInfo := corev1.NodeSystemInfo{KubeletVersion: "fleetlet", OperatingSystem: "linux", Architecture: "arm64"}
	assert.Empty(t, cmp.Diff(wantInfo, n.Status.NodeInfo), "nodeInfo (-want,+got)")

	s.Summary = nil
	n, _ = buildNode("fleetlet-cluster-2", s, nil, testParams, nil, now)
	assert.Equal(t, DefaultArchitecture, n.Status.NodeInfo.Architecture, "architecture without a summary")
	assert.Empty(t, cmp.Diff(rl("cpu", "0", "memory", "0", "pods", "0"), n.Status.Allocatable, quantityEqual), "allocatable without a summary (-want,+got)")
}

func TestBuildNodeInvalidExclusion(t *testing.T) {
	s := TargetState{Key: proxy.TargetKey{Name: "c"}, Ready: true, ExcludedLabelsRegexp: "(", Summary: &v1alpha1.ClusterSummaryStatus{Labels: map[string]string{"tier": "gold"}}}
	n, err := buildNode("fleetlet-c", s, nil, testParams, nil, time.Now())
	require.Error(t, err, "no error for an excludedLabelsRegexp that does not compile")
	assert.NotContains(t, n.Labels, "target.multicluster.fleetlet.io/tier", "target label kept although the exclusions cannot be applied")
	assert.Equal(t, "virtual-kubelet", n.Labels["type"], "conventions missing")
}

func TestNodeConditions(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	t1 := t0.Add(time.Minute)
	key := proxy.TargetKey{Namespace: "team", Name: "c"}
	ready := TargetState{Key: key, Ready: true}
	down := TargetState{Key: key, Ready: false, Partitioned: true, Reason: "Unreachable", Message: "dial tcp 10.0.0.1:6443: connection refused"}

	byType := func(conds []corev1.NodeCondition) map[corev1.NodeConditionType]corev1.NodeCondition {
		m := map[corev1.NodeConditionType]corev1.NodeCondition{}
		for _, c := range conds {
			m[c.Type] = c
		}
		return m
	}

	first := nodeConditions(ready, nil, t0)
	got := byType(first)
	require.Lenf(t, got, 5, "conditions = %v, want Ready and four others", first)
	c := got[corev1.NodeReady]
	assert.Falsef(t, c.Status != corev1.ConditionTrue || c.Reason != ReasonTargetReady || !c.LastTransitionTime.Time.Equal(t0), "Ready = %+v, want True, %s, transition at t0", c, ReasonTargetReady)
	for _, typ := range []corev1.NodeConditionType{corev1.NodeMemoryPressure, corev1.NodeDiskPressure, corev1.NodePIDPressure, corev1.NodeNetworkUnavailable} {
		c := got[typ]
		assert.Falsef(t, c.Status != corev1.ConditionFalse || c.Reason == "", "%s = %+v, want False with a reason", typ, c)
	}

	second := byType(nodeConditions(down, first, t1))
	c = second[corev1.NodeReady]
	assert.Falsef(t, c.Status != corev1.ConditionFalse || c.Reason != "Unreachable" || c.Message != down.Message || !c.LastTransitionTime.Time.Equal(t1), "Ready after the target went down = %+v, want False, Unreachable, its message, transition at t1", c)
	c = second[corev1.NodeMemoryPressure]
	assert.Falsef(t, !c.LastTransitionTime.Time.Equal(t0) || !c.LastHeartbeatTime.Time.Equal(t1), "MemoryPressure = %+v, want transition kept at t0, heartbeat t1", c)

	// Credentials gone or refused are fleetlet's side: the node stays
	// Ready, so that nothing running is evicted, and says why no new pod
	// goes there. Before: NotReady, and every proxy on it evicted after
	// its toleration while its delegate ran on.
	for _, reason := range []string{v1alpha1.ReasonKubeconfigSecretNotFound, v1alpha1.ReasonForbidden, v1alpha1.ReasonTLS, v1alpha1.ReasonFleetletMissing} {
		lost := TargetState{Key: key, Reason: reason, Message: "the reason's message"}
		c := byType(nodeConditions(lost, first, t1))[corev1.NodeReady]
		assert.Falsef(t, c.Status != corev1.ConditionTrue || c.Reason != reason || !strings.Contains(c.Message, "the reason's message") || !strings.Contains(c.Message, "no new pod") || !c.LastTransitionTime.Time.Equal(t0), "Ready for a target not usable (%s) = %+v, want True since t0, the reason, its message and what it means", reason, c)
	}

	noReason := byType(nodeConditions(TargetState{Key: key, Partitioned: true}, nil, t1))
	c = noReason[corev1.NodeReady]
	assert.Falsef(t, c.Reason != ReasonTargetNotReady || c.Message == "", "Ready without the target's reason = %+v, want %s and a message", c, ReasonTargetNotReady)
}

func TestSameNode(t *testing.T) {
	s := TargetState{Key: proxy.TargetKey{Name: "c"}, Ready: true}
	a, _ := buildNode("fleetlet-c", s, nil, testParams, nil, time.Unix(100, 0))
	b, _ := buildNode("fleetlet-c", s, nil, testParams, a.Status.Conditions, time.Unix(200, 0))
	assert.True(t, sameNode(a, b), "nodes that differ in heartbeat times only differ")
	b.Labels["tier"] = "gold"
	assert.False(t, sameNode(a, b), "nodes with different labels are the same")
	c, _ := buildNode("fleetlet-c", s, rl("cpu", "1"), testParams, a.Status.Conditions, time.Unix(200, 0))
	assert.False(t, sameNode(a, c), "nodes with different allocatable are the same")
	d, _ := buildNode("fleetlet-c", TargetState{Key: s.Key, Partitioned: true}, nil, testParams, a.Status.Conditions, time.Unix(200, 0))
	assert.False(t, sameNode(a, d), "a Ready node and a NotReady one are the same")

	// Neither node is changed by the comparison (it copies neither).
	before := a.DeepCopy()
	sameNode(a, b)
	assert.True(t, apiequality.Semantic.DeepEqual(before, a), "sameNode changed its first node")
	assert.False(t, a.Status.Conditions[0].LastHeartbeatTime.IsZero(), "sameNode cleared a heartbeat time")
}
