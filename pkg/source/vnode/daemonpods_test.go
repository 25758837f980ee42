package vnode

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
	"github.com/fleetlet/fleetlet/pkg/proxy"
)

// daemonPod is a DaemonSet's pod as the DaemonSet controller makes it for
// node: controlled by the DaemonSet, pinned by a metadata.name affinity.
func (p *pod) daemonFor(node string) *pod {
	p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "DaemonSet", Name: "kube-proxy", UID: "ds-uid", Controller: new(true)}}
	p.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
		NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchFields: []corev1.NodeSelectorRequirement{{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{node}}}}},
	}}}
	return p
}

func TestDaemonNode(t *testing.T) {
	const node = "fleetlet-c"
	daemon := newPod("ds").daemonFor(node).obj()
	require.Equal(t, node, daemonNode(daemon))
	notDaemon := newPod("rs").daemonFor(node).obj()
	notDaemon.OwnerReferences[0].Kind = "ReplicaSet"
	require.Empty(t, daemonNode(notDaemon), "a ReplicaSet's pod with the same affinity")
	require.Empty(t, daemonNode(newPod("plain").obj()))
	// The stripped pod keeps what daemonNode and needsAck read.
	s := stripped(t, daemon)
	require.Equal(t, node, daemonNode(s))
	_, ok := needsAck(s)
	require.True(t, ok)
}

// A DaemonSet's pod headed to a virtual node counts in its allocatable
// before it is bound, as a pinned proxy does, so that the source scheduler
// finds room for it and never preempts a proxy to make some. Before: it
// was not counted, and on a full target the scheduler preempted proxies
// (DaemonSet pods run at system-node-critical priority).
func TestTrackerCountsDaemonPodsHeadedToTheNode(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	tr, _ := newTestTracker(t, clk)
	const node = "fleetlet-c"
	tr.pinnedChanged(nil, stripped(t, newPod("kube-proxy-x").container("c", rl("cpu", "100m", "memory", "50Mi")).daemonFor(node).obj()))
	tr.pinnedChanged(nil, stripped(t, newPod("kube-proxy-y").container("c", rl("cpu", "100m")).daemonFor("node-1").obj()))
	assert.Empty(t, cmp.Diff(rl("cpu", "100m", "memory", "50Mi", "pods", "1"), tr.requests(node), quantityEqual), "requests (-want,+got)")
}

// ackStatus: Running and Ready, so that the DaemonSet is available; the
// containers waiting with the reason, so that kubectl shows it is not run;
// the NotRun condition saying why. Before: the pod stayed Pending for good
// and the DaemonSet never reported all its pods ready.
func TestAckStatus(t *testing.T) {
	p := newPod("kube-proxy-x").container("proxy", nil).daemonFor("fleetlet-c").obj()
	p.Spec.Containers[0].Image = "registry.k8s.io/kube-proxy"
	data, err := ackStatus(p, "fleetlet-c", time.Unix(2000, 0))
	require.NoError(t, err)
	var got struct{ Status corev1.PodStatus }
	require.NoError(t, json.Unmarshal(data, &got))
	require.Equal(t, corev1.PodRunning, got.Status.Phase)
	conds := map[corev1.PodConditionType]corev1.ConditionStatus{}
	for _, c := range got.Status.Conditions {
		conds[c.Type] = c.Status
		require.Equal(t, v1alpha1.ReasonNotRunOnVirtualNode, c.Reason)
		require.Contains(t, c.Message, "fleetlet-c")
	}
	require.Equal(t, map[corev1.PodConditionType]corev1.ConditionStatus{
		v1alpha1.ConditionNotRun: corev1.ConditionTrue, corev1.PodInitialized: corev1.ConditionTrue,
		corev1.ContainersReady: corev1.ConditionFalse, corev1.PodReady: corev1.ConditionTrue,
	}, conds)
	require.Len(t, got.Status.ContainerStatuses, 1)
	cs := got.Status.ContainerStatuses[0]
	require.Equal(t, "proxy", cs.Name)
	require.False(t, cs.Ready)
	require.NotNil(t, cs.State.Waiting)
	require.Equal(t, v1alpha1.ReasonNotRunOnVirtualNode, cs.State.Waiting.Reason)

	p.Status.Conditions = []corev1.PodCondition{{Type: v1alpha1.ConditionNotRun, Status: corev1.ConditionTrue}, {Type: corev1.PodReady, Status: corev1.ConditionTrue}}
	_, ok := needsAck(p)
	require.False(t, ok, "an acknowledged pod is acknowledged again")
	// The node lifecycle controller marked it not ready (its node was
	// NotReady or Unknown for a while): acknowledged again, as a kubelet
	// marks its pods Ready again. Before: it stayed not ready for good, and
	// its DaemonSet unavailable (seen in a full e2e run after the outage
	// scenarios).
	p.Status.Conditions[1].Status = corev1.ConditionFalse
	_, ok = needsAck(stripped(t, p))
	require.True(t, ok, "a pod marked not ready after its acknowledgement is left so")
}

// ack writes the status once, to a DaemonSet's pod on a node this
// controller runs, and leaves every other pod alone.
func TestDaemonAckWritesOnlyItsNodesDaemonPods(t *testing.T) {
	ctx := context.Background()
	ds := newPod("kube-proxy-x").container("proxy", nil).daemonFor("fleetlet-c").boundTo("fleetlet-c").obj()
	other := newPod("kube-proxy-y").container("proxy", nil).daemonFor("node-1").boundTo("node-1").obj()
	plain := newPod("web").container("c", nil).boundTo("fleetlet-c").obj()
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "fleetlet-c"}, Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionFalse}}}}
	client := fake.NewClientset(ds, other, plain, node)
	c := &Controller{cfg: Config{Client: client, Clock: clocktesting.NewFakeClock(time.Unix(2000, 0))}, owners: map[string]proxy.TargetKey{"fleetlet-c": {Name: "c"}}}
	a := newDaemonAcks(c)
	// While its node is not Ready, it waits (and is looked at again).
	again, err := a.ack(ctx, keyOf(ds))
	require.NoError(t, err)
	require.True(t, again, "a pod on a node that is not Ready is acknowledged")
	node.Status.Conditions[0].Status = corev1.ConditionTrue
	_, err = client.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{})
	require.NoError(t, err)
	client.ClearActions()
	for _, p := range []*corev1.Pod{ds, other, plain} {
		again, err := a.ack(ctx, keyOf(p))
		require.NoError(t, err)
		require.False(t, again)
	}
	var patched []string
	for _, action := range client.Actions() {
		if action.GetVerb() == "patch" && action.GetSubresource() == "status" {
			patched = append(patched, action.(interface{ GetName() string }).GetName())
		}
	}
	require.Equal(t, []string{"kube-proxy-x"}, patched)
}

func keyOf(p *corev1.Pod) types.NamespacedName {
	return types.NamespacedName{Namespace: p.Namespace, Name: p.Name}
}
