package vnode

import (
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
)

// Reasons of the virtual nodes' conditions.
const (
	// ReasonTargetReady: the Ready condition is True, the target answers,
	// accepts fleetlet's credentials and runs fleetlet.
	ReasonTargetReady = "TargetReady"
	// ReasonTargetNotReady is the reason of Ready=False when the target's
	// own condition gave none.
	ReasonTargetNotReady = "TargetNotReady"
	// ReasonSufficientMemory, ReasonNoDiskPressure, ReasonSufficientPID and
	// ReasonNetworkReady are the reasons of the conditions that are always
	// False on a virtual node: pressure in a target shows as less
	// allocatable, not as a node condition.
	ReasonSufficientMemory = "FleetletHasSufficientMemory"
	ReasonNoDiskPressure   = "FleetletHasNoDiskPressure"
	ReasonSufficientPID    = "FleetletHasSufficientPID"
	ReasonNetworkReady     = "FleetletNetworkReady"
)

// DefaultArchitecture is nodeInfo's architecture when the target's nodes do
// not share a kubernetes.io/arch label.
const DefaultArchitecture = "amd64"

// nodeParams are the settings all virtual nodes share.
type nodeParams struct {
	address        string
	kubeletPort    int32
	kubeletVersion string
}

// buildNode returns the virtual node of target state s: the object to
// create, and the labels and status to report afterwards. proxies is what
// the proxies bound or pinned to the node request (ProxyRequests). prev are
// the conditions last reported, whose transition times are kept when their
// status does not change. The error is NodeLabels' (an excludedLabelsRegexp
// that does not compile); the node is still complete.
func buildNode(name string, s TargetState, proxies corev1.ResourceList, p nodeParams, prev []corev1.NodeCondition, now time.Time) (*corev1.Node, error) {
	var shared map[string]string
	if s.Summary != nil {
		shared = s.Summary.Labels
	}
	labels, err := NodeLabels(name, s.Key, shared, s.ExcludedLabelsRegexp)

	allocatable := Allocatable(s.Summary, proxies)
	arch := DefaultArchitecture
	if a := shared[corev1.LabelArchStable]; a != "" {
		arch = a
	}
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels, Annotations: map[string]string{v1alpha1.AnnotationTarget: s.Key.String()}},
		Spec:       corev1.NodeSpec{Taints: []corev1.Taint{v1alpha1.VirtualNodeTaint()}},
		Status: corev1.NodeStatus{
			Capacity:    Capacity(s.Summary, allocatable),
			Allocatable: allocatable,
			Conditions:  nodeConditions(s, prev, now),
			// Only the address the API server dials: no Hostname,
			// which no DNS would resolve.
			Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: p.address}},
			DaemonEndpoints: corev1.NodeDaemonEndpoints{
				KubeletEndpoint: corev1.DaemonEndpoint{Port: p.kubeletPort},
			},
			NodeInfo: corev1.NodeSystemInfo{
				KubeletVersion:  p.kubeletVersion,
				OperatingSystem: OSLinux,
				Architecture:    arch,
			},
		},
	}
	return node, err
}

// nodeConditions returns Ready (False only while the target does not
// answer: see TargetState.Partitioned) and the pressure and network
// conditions, always False.
func nodeConditions(s TargetState, prev []corev1.NodeCondition, now time.Time) []corev1.NodeCondition {
	ready := corev1.NodeCondition{
		Type:    corev1.NodeReady,
		Status:  corev1.ConditionTrue,
		Reason:  ReasonTargetReady,
		Message: s.Message,
	}
	if ready.Message == "" {
		ready.Message = fmt.Sprintf("target %s answers and runs fleetlet", s.Key)
	}
	if !s.Ready && !s.Partitioned {
		ready.Reason = s.Reason
		if ready.Reason == "" {
			ready.Reason = ReasonTargetNotReady
		}
		ready.Message = fmt.Sprintf("fleetlet cannot use target %s (%s), so no new pod goes there; what runs there keeps running, since the target itself may be fine (only a target that does not answer makes this node NotReady)", s.Key, s.Message)
	}
	if !s.Ready && s.Partitioned {
		ready.Status = corev1.ConditionFalse
		ready.Reason = s.Reason
		if ready.Reason == "" {
			ready.Reason = ReasonTargetNotReady
		}
		ready.Message = s.Message
		if ready.Message == "" {
			ready.Message = fmt.Sprintf("target %s is not ready", s.Key)
		}
	}
	const noPressure = "pressure in the target shows as less allocatable, not as a node condition"
	conds := []corev1.NodeCondition{
		ready,
		{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionFalse, Reason: ReasonSufficientMemory, Message: noPressure},
		{Type: corev1.NodeDiskPressure, Status: corev1.ConditionFalse, Reason: ReasonNoDiskPressure, Message: noPressure},
		{Type: corev1.NodePIDPressure, Status: corev1.ConditionFalse, Reason: ReasonSufficientPID, Message: noPressure},
		{Type: corev1.NodeNetworkUnavailable, Status: corev1.ConditionFalse, Reason: ReasonNetworkReady, Message: "the target's network serves the pods of this node"},
	}
	t := metav1.NewTime(now)
	for i := range conds {
		c := &conds[i]
		c.LastHeartbeatTime, c.LastTransitionTime = t, t
		for _, p := range prev {
			if p.Type == c.Type && p.Status == c.Status {
				c.LastTransitionTime = p.LastTransitionTime
			}
		}
	}
	return conds
}
