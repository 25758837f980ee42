package feedback

import (
	"net/netip"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/utils/ptr"
)

// kubeletConditions are the pod conditions a kubelet owns: on a proxy they
// come from its delegate. Every other condition (fleetlet's Elected, the
// scheduler's PodScheduled, DisruptionTarget, readiness gates' conditions)
// belongs to someone in the source and is kept as it is.
var kubeletConditions = map[corev1.PodConditionType]bool{
	corev1.PodReadyToStartContainers: true,
	corev1.PodInitialized:            true,
	corev1.ContainersReady:           true,
	corev1.PodReady:                  true,
	corev1.PodResizePending:          true,
	corev1.PodResizeInProgress:       true,
}

// Reasons of container states fleetlet writes itself.
const (
	// ReasonContainerCreating: the delegate does not report this container
	// yet.
	ReasonContainerCreating = "ContainerCreating"
	// ReasonPodInitializing: an init container of the delegate has not
	// finished, so this container has not started.
	ReasonPodInitializing = "PodInitializing"
)

// Translate returns the status the proxy should have, given the status of
// its delegate and the virtual node's address; it changes nothing in
// proxy. The proxy keeps what is not the delegate's to say: its QoS class,
// nominated node, resize status, observed generations (the proxy's, which
// setObservedGeneration moves) and every condition not owned by a kubelet. A proxy already Succeeded or Failed keeps its
// final status: the API server allows no way back, and Jobs count it.
func Translate(proxy *corev1.Pod, delegate *corev1.PodStatus, hostIP string) corev1.PodStatus {
	out := *proxy.Status.DeepCopy()
	if terminal(proxy.Status.Phase) {
		return out
	}
	out.Phase = delegate.Phase
	if out.Phase == "" {
		out.Phase = corev1.PodPending
	}
	out.Reason, out.Message = delegate.Reason, delegate.Message
	out.PodIP, out.PodIPs = podIPs(delegate)
	if hostIP != "" && (delegate.HostIP != "" || delegate.Phase != corev1.PodPending) {
		out.HostIP = hostIP
		out.HostIPs = []corev1.HostIP{{IP: hostIP}}
	}
	if delegate.StartTime != nil {
		st := *delegate.StartTime
		out.StartTime = &st
	}

	initDone := initialized(delegate)
	out.InitContainerStatuses = containerStatuses(proxy.Spec.InitContainers, delegate.InitContainerStatuses, ReasonPodInitializing)
	waiting := ReasonContainerCreating
	if !initDone {
		waiting = ReasonPodInitializing
	}
	out.ContainerStatuses = containerStatuses(proxy.Spec.Containers, delegate.ContainerStatuses, waiting)
	eph := make([]corev1.Container, 0, len(proxy.Spec.EphemeralContainers))
	for _, e := range proxy.Spec.EphemeralContainers {
		eph = append(eph, corev1.Container{Name: e.Name, Image: e.Image})
	}
	out.EphemeralContainerStatuses = containerStatuses(eph, delegate.EphemeralContainerStatuses, ReasonContainerCreating)

	out.Conditions = mergeConditions(proxy.Status.Conditions, delegate.Conditions)
	return out
}

func terminal(p corev1.PodPhase) bool { return p == corev1.PodSucceeded || p == corev1.PodFailed }

// initialized reports whether the delegate's Initialized condition is True
// (or it has no init containers to wait for).
func initialized(s *corev1.PodStatus) bool {
	for _, c := range s.Conditions {
		if c.Type == corev1.PodInitialized {
			return c.Status == corev1.ConditionTrue
		}
	}
	return len(s.InitContainerStatuses) == 0
}

// containerStatuses returns one status per container of the proxy, in the
// proxy's order: the delegate's status of the same name, or a waiting one
// when the delegate does not report it. Its resources and allocated
// resources are the delegate's, which the proxy's spec has too (a resize of
// the proxy is passed on; the API server admits a resize only of a pod
// whose running containers report resources). What describes the
// delegate's own node (volume mounts, the user it runs as) is left out: it
// would not be true of the proxy's spec.
func containerStatuses(containers []corev1.Container, got []corev1.ContainerStatus, waitingReason string) []corev1.ContainerStatus {
	if len(containers) == 0 {
		return nil
	}
	byName := make(map[string]*corev1.ContainerStatus, len(got))
	for i := range got {
		byName[got[i].Name] = &got[i]
	}
	out := make([]corev1.ContainerStatus, 0, len(containers))
	for _, c := range containers {
		s, ok := byName[c.Name]
		if !ok {
			out = append(out, corev1.ContainerStatus{
				Name:  c.Name,
				Image: c.Image,
				State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: waitingReason}},
			})
			continue
		}
		cs := corev1.ContainerStatus{
			Name:                 c.Name,
			State:                *s.State.DeepCopy(),
			LastTerminationState: *s.LastTerminationState.DeepCopy(),
			Ready:                s.Ready,
			RestartCount:         s.RestartCount,
			Image:                s.Image,
			ImageID:              s.ImageID,
			ContainerID:          s.ContainerID,
		}
		if cs.Image == "" {
			cs.Image = c.Image
		}
		if s.Started != nil {
			cs.Started = ptr.To(*s.Started)
		}
		if s.Resources != nil {
			cs.Resources = s.Resources.DeepCopy()
		}
		if s.AllocatedResources != nil {
			cs.AllocatedResources = s.AllocatedResources.DeepCopy()
		}
		out = append(out, cs)
	}
	return out
}

// mergeConditions keeps every condition of the proxy that a kubelet does
// not own, in place, and sets the kubelet-owned ones to the delegate's.
// A kubelet condition the delegate no longer reports is dropped.
func mergeConditions(proxy, delegate []corev1.PodCondition) []corev1.PodCondition {
	fromDelegate := map[corev1.PodConditionType]corev1.PodCondition{}
	var order []corev1.PodConditionType
	for _, c := range delegate {
		if kubeletConditions[c.Type] {
			if _, seen := fromDelegate[c.Type]; !seen {
				order = append(order, c.Type)
			}
			c.ObservedGeneration = 0
			fromDelegate[c.Type] = c
		}
	}
	if len(proxy) == 0 && len(fromDelegate) == 0 {
		return nil
	}
	out := make([]corev1.PodCondition, 0, len(proxy)+len(fromDelegate))
	done := map[corev1.PodConditionType]bool{}
	for _, c := range proxy {
		if !kubeletConditions[c.Type] {
			out = append(out, c)
			continue
		}
		if d, ok := fromDelegate[c.Type]; ok && !done[c.Type] {
			out = append(out, keepTransition(c, d))
			done[c.Type] = true
		}
	}
	for _, t := range order {
		if !done[t] {
			out = append(out, fromDelegate[t])
		}
	}
	return out
}

// keepTransition returns the delegate's condition, keeping the proxy's
// transition time when the status did not change (a mirror never moves a
// transition the user already saw) and the proxy's observedGeneration (the
// delegate's counts another object's generations; setObservedGeneration
// moves the proxy's).
func keepTransition(old, c corev1.PodCondition) corev1.PodCondition {
	if old.Status == c.Status && !old.LastTransitionTime.IsZero() {
		c.LastTransitionTime = old.LastTransitionTime
	}
	c.ObservedGeneration = old.ObservedGeneration
	return c
}

// statusEqual reports whether writing want would change nothing.
func statusEqual(have, want *corev1.PodStatus) bool {
	return equality.Semantic.DeepEqual(have, want)
}

// podIPs are the delegate's pod IPs the proxy may publish. A target is
// trusted to run pods, not to say anything: what it reports ends up in the
// source's Endpoints and in global Services' EndpointSlices in the other
// targets, so only unicast addresses a pod can have are kept (no loopback,
// link-local, multicast or unspecified address, nothing that does not
// parse), each once, at most one per family as the API server allows,
// and podIP is always the first of podIPs. Before: copied as reported,
// which the API server refused for a malformed one (the proxy's status
// stopped following), and a loopback or link-local address was published.
func podIPs(delegate *corev1.PodStatus) (string, []corev1.PodIP) {
	reported := delegate.PodIPs
	if len(reported) == 0 && delegate.PodIP != "" {
		reported = []corev1.PodIP{{IP: delegate.PodIP}}
	}
	var out []corev1.PodIP
	families := map[bool]bool{}
	for _, ip := range reported {
		addr, err := netip.ParseAddr(ip.IP)
		addr = addr.Unmap()
		if err != nil || addr.Zone() != "" || !addr.IsValid() || addr.IsUnspecified() || addr.IsLoopback() ||
			addr.IsLinkLocalUnicast() || addr.IsLinkLocalMulticast() || addr.IsMulticast() || addr.IsInterfaceLocalMulticast() {
			continue
		}
		if families[addr.Is4()] {
			continue
		}
		families[addr.Is4()] = true
		out = append(out, corev1.PodIP{IP: addr.String()})
	}
	if len(out) == 0 {
		return "", nil
	}
	return out[0].IP, out
}
