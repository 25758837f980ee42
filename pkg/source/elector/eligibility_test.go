package elector

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
)

// withSelector sets a proxy's own nodeSelector, as another controller
// (Kueue lifting its gate) may after creation.
func withSelector(p *corev1.Pod, sel map[string]string) *corev1.Pod {
	p.Spec.NodeSelector = sel
	return p
}

func TestEligible(t *testing.T) {
	proxyTolerations := []corev1.Toleration{
		{Key: v1alpha1.TaintKeyProvider, Operator: corev1.TolerationOpEqual, Value: v1alpha1.TaintValueProvider, Effect: corev1.TaintEffectNoSchedule},
		{Key: "node.kubernetes.io/unschedulable", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
	}
	proxy := func(annotations map[string]string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "team", Annotations: annotations}, Spec: corev1.PodSpec{Tolerations: proxyTolerations}}
	}
	node := func(mutate func(*corev1.Node)) *corev1.Node {
		n := &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: "fleetlet-cluster-3", Labels: map[string]string{
				"target.multicluster.fleetlet.io/topology.kubernetes.io.region": "cluster-3",
				v1alpha1.LabelCluster:  "cluster-3",
				v1alpha1.LabelNodeType: v1alpha1.NodeTypeVirtualKubelet,
			}},
			Spec: corev1.NodeSpec{Taints: []corev1.Taint{v1alpha1.VirtualNodeTaint()}},
		}
		if mutate != nil {
			mutate(n)
		}
		return n
	}
	tests := []struct {
		name       string
		pod        *corev1.Pod
		view       TargetView
		wantOK     bool
		wantReason string
	}{
		{name: "ready, tolerated, no selector", pod: proxy(nil), view: TargetView{Name: "cluster-3", Ready: true, Node: node(nil)}, wantOK: true},
		{name: "not ready", pod: proxy(nil), view: TargetView{Name: "cluster-3", Reason: "Unreachable", Node: node(nil)}, wantReason: "Unreachable"},
		{name: "being disconnected", pod: proxy(nil), view: TargetView{Name: "cluster-3", Ready: true, Draining: true, Node: node(nil)}, wantReason: "disconnected"},
		{name: "its fleetlet down (summary stale)", pod: proxy(nil), view: TargetView{Name: "cluster-3", Ready: true, SummaryStale: true, Node: node(nil)}, wantReason: "SummaryStale"},
		{name: "its candidate scheduler down", pod: proxy(nil), view: TargetView{Name: "cluster-3", Ready: true, SchedulerDown: true, Node: node(nil)}, wantReason: "candidate scheduler does not run"},
		{name: "no node", pod: proxy(nil), view: TargetView{Name: "cluster-3", Ready: true}, wantReason: "no virtual node"},
		{name: "cordoned", pod: proxy(nil), view: TargetView{Name: "cluster-3", Ready: true, Node: node(func(n *corev1.Node) { n.Spec.Unschedulable = true })}, wantReason: "cordoned"},
		{name: "untolerated NoSchedule taint", pod: proxy(nil), view: TargetView{Name: "cluster-3", Ready: true, Node: node(func(n *corev1.Node) {
			n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: "maintenance", Effect: corev1.TaintEffectNoSchedule})
		})}, wantReason: "maintenance"},
		{name: "PreferNoSchedule taint is no bar", pod: proxy(nil), view: TargetView{Name: "cluster-3", Ready: true, Node: node(func(n *corev1.Node) {
			n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: "soft", Effect: corev1.TaintEffectPreferNoSchedule})
		})}, wantOK: true},
		{name: "selector matches", pod: proxy(map[string]string{v1alpha1.AnnotationClusterSelector: "topology.kubernetes.io/region=cluster-3"}), view: TargetView{Name: "cluster-3", Ready: true, Node: node(nil)}, wantOK: true},
		{name: "selector does not match", pod: proxy(map[string]string{v1alpha1.AnnotationClusterSelector: "topology.kubernetes.io/region in (cluster-2)"}), view: TargetView{Name: "cluster-3", Ready: true, Node: node(nil)}, wantReason: "cluster-selector"},
		{name: "a cluster-level nodeSelector added to the proxy (a Kueue flavor) that the node carries", pod: withSelector(proxy(nil), map[string]string{
			v1alpha1.LabelNodeType: v1alpha1.NodeTypeVirtualKubelet, v1alpha1.LabelCluster: "cluster-3"}), view: TargetView{Name: "cluster-3", Ready: true, Node: node(nil)}, wantOK: true},
		{name: "a cluster-level nodeSelector added to the proxy that names another cluster", pod: withSelector(proxy(nil), map[string]string{
			v1alpha1.LabelCluster: "cluster-2"}), view: TargetView{Name: "cluster-3", Ready: true, Node: node(nil)}, wantReason: "multicluster.fleetlet.io/cluster=cluster-2"},
		{name: "a node-level nodeSelector added to the proxy (a Kueue flavor's instance type)", pod: withSelector(proxy(nil), map[string]string{
			v1alpha1.LabelNodeType: v1alpha1.NodeTypeVirtualKubelet, "instance-type": "spot"}), view: TargetView{Name: "cluster-3", Ready: true, Node: node(nil)}, wantReason: "node-level"},
		{name: "the hostname pin is no bar", pod: withSelector(proxy(nil), map[string]string{corev1.LabelHostname: "fleetlet-cluster-2"}),
			view: TargetView{Name: "cluster-3", Ready: true, Node: node(nil)}, wantOK: true},
		{name: "namespaced Target of another namespace: silently not a target", pod: proxy(nil), view: TargetView{Namespace: "other", Name: "t", Ready: true, Node: node(nil)}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			sel, err := ParseClusterSelector(tc.pod)
			require.NoError(t, err)
			ok, reason := Eligible(tc.pod, tc.view, sel)
			require.Falsef(t, ok != tc.wantOK, "Eligible = %t (%q), want %t", ok, reason, tc.wantOK)
			assert.Falsef(t, !strings.Contains(reason, tc.wantReason) || (tc.wantReason == "" && reason != ""), "reason = %q, want it to contain %q", reason, tc.wantReason)
		})
	}
}

func TestParseClusterSelectorRefusesGarbage(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{v1alpha1.AnnotationClusterSelector: "region in (a"}}}
	_, err := ParseClusterSelector(pod)
	assert.Falsef(t, err == nil || !strings.Contains(err.Error(), "not a label selector"), "ParseClusterSelector = %v, want a clear error", err)
}
