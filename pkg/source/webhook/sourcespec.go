package webhook

import (
	"maps"
	"slices"
	"sort"

	corev1 "k8s.io/api/core/v1"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
	"github.com/fleetlet/fleetlet/pkg/proxy"
)

// SourceSpec is what the webhook took off a proxy pod, or replaced, so that
// the source scheduler can always bind it: the user's own values, which the
// candidate in each target must get back. The webhook records it, sealed,
// in the multicluster.fleetlet.io/source-spec annotation; Open reads it and
// Restore puts it back onto a copy of the proxy's spec.
//
// Items taken out of a list (volumes, resource claims, volume mounts and
// devices, ports) are recorded with their index in the user's list, so that
// Restore puts them back in the order the user wrote.
type SourceSpec struct {
	// NodeSelector is the user's nodeSelector; the proxy's is
	// type=virtual-kubelet.
	NodeSelector map[string]string `json:"nodeSelector,omitempty"`
	// Affinity is the user's affinity; the proxy has none.
	Affinity *corev1.Affinity `json:"affinity,omitempty"`
	// TopologySpreadConstraints are the user's; the proxy has none.
	TopologySpreadConstraints []corev1.TopologySpreadConstraint `json:"topologySpreadConstraints,omitempty"`
	// SchedulerName is the user's scheduler name; the proxy's is the
	// default scheduler.
	SchedulerName string `json:"schedulerName,omitempty"`
	// Tolerations are the user's tolerations; the proxy's add those of the
	// virtual nodes and tolerate an unreachable node without limit.
	Tolerations []corev1.Toleration `json:"tolerations,omitempty"`
	// TerminationGracePeriodSeconds is the user's as releases before
	// this one recorded it, when they set the proxy's to 0. The proxy now
	// keeps its own (a delete's grace period means for a proxy what it
	// means for any pod, and the elector makes the last delete as a
	// kubelet does), so a new seal records none; an older one still
	// restores it.
	TerminationGracePeriodSeconds *int64 `json:"terminationGracePeriodSeconds,omitempty"`
	// Volumes are the ephemeral volumes, which would make claims in the
	// source cluster. An older seal also holds the PersistentVolumeClaim
	// volumes, which the proxy now keeps (package claims).
	Volumes []Indexed[corev1.Volume] `json:"volumes,omitempty"`
	// ResourceClaims are the pod's resource claims (dynamic resource
	// allocation), which only the target can allocate.
	ResourceClaims []Indexed[corev1.PodResourceClaim] `json:"resourceClaims,omitempty"`
	// Containers records, per container (init, regular and ephemeral, by
	// name), what was taken off it.
	Containers []ContainerSourceSpec `json:"containers,omitempty"`
}

// ContainerSourceSpec is what the webhook took off one container.
type ContainerSourceSpec struct {
	// Name is the container's name (unique among all of a pod's containers).
	Name string `json:"name"`
	// Ports are the user's ports that had a hostPort; the proxy keeps each
	// of them with hostPort and hostIP cleared.
	Ports []Indexed[corev1.ContainerPort] `json:"ports,omitempty"`
	// VolumeMounts are the mounts of the volumes in SourceSpec.Volumes.
	VolumeMounts []Indexed[corev1.VolumeMount] `json:"volumeMounts,omitempty"`
	// VolumeDevices are the devices of the volumes in SourceSpec.Volumes.
	VolumeDevices []Indexed[corev1.VolumeDevice] `json:"volumeDevices,omitempty"`
	// ResourceClaims are the container's resources.claims, which name the
	// pod's resource claims.
	ResourceClaims []Indexed[corev1.ResourceClaim] `json:"resourceClaims,omitempty"`
}

// Indexed is an item of a list with its index in the user's list.
type Indexed[T any] struct {
	Index int `json:"index"`
	Item  T   `json:"item"`
}

// Restore puts the user's values back onto spec, a copy of the proxy's pod
// spec (the caller owns it; Restore writes into it): affinity, topology
// spread constraints, scheduler name and grace period are replaced by the
// user's; nodeSelector and tolerations are the user's merged with what
// another controller added to the proxy since (Kueue writes its flavor's
// node labels and tolerations when it lifts its gate), fleetlet's own
// (type=virtual-kubelet, the hostname pin, the proxy's tolerations) left
// out; volumes, resource claims, volume mounts and
// devices and container resource claims are inserted where the user had
// them; ports get their hostPort and hostIP back. Records of containers spec
// no longer has are left out. Restore expects the proxy's spec: restoring
// twice would insert the volumes twice.
func (s *SourceSpec) Restore(spec *corev1.PodSpec) {
	if s == nil {
		return
	}
	spec.NodeSelector = mergeNodeSelector(s.NodeSelector, spec.NodeSelector, func(k, v string) bool {
		return (k == v1alpha1.LabelNodeType && v == v1alpha1.NodeTypeVirtualKubelet) || k == corev1.LabelHostname
	})
	if s.Affinity != nil {
		spec.Affinity = s.Affinity.DeepCopy()
	} else {
		spec.Affinity = nil
	}
	spec.TopologySpreadConstraints = deepCopyTopologySpread(s.TopologySpreadConstraints)
	spec.SchedulerName = s.SchedulerName
	spec.Tolerations = mergeTolerations(s.Tolerations, spec.Tolerations)
	if s.TerminationGracePeriodSeconds != nil {
		spec.TerminationGracePeriodSeconds = copyInt64(s.TerminationGracePeriodSeconds)
	}
	s.restoreLists(spec)
}

// mergeNodeSelector is the user's nodeSelector with the keys of the
// proxy's that are not ours added (set later, they win).
func mergeNodeSelector(user, proxy map[string]string, ours func(k, v string) bool) map[string]string {
	out := maps.Clone(user)
	for k, v := range proxy {
		if ours(k, v) {
			continue
		}
		if out == nil {
			out = map[string]string{}
		}
		out[k] = v
	}
	return out
}

// mergeTolerations is the user's tolerations with the proxy's that are
// neither fleetlet's nor already the user's.
func mergeTolerations(user, onProxy []corev1.Toleration) []corev1.Toleration {
	out := deepCopyTolerations(user)
	for _, t := range onProxy {
		if !proxy.IsOwnToleration(t) && !proxy.HasToleration(user, t) {
			out = append(out, t)
		}
	}
	return out
}

// restoreLists inserts what was taken out of lists.
func (s *SourceSpec) restoreLists(spec *corev1.PodSpec) {
	spec.Volumes = insertAt(spec.Volumes, s.Volumes, (*corev1.Volume).DeepCopy)
	spec.ResourceClaims = insertAt(spec.ResourceClaims, s.ResourceClaims, (*corev1.PodResourceClaim).DeepCopy)
	containers := eachContainer(spec)
	seen := map[string]int{}
	for _, cs := range s.Containers {
		// The k-th record of a name goes to the k-th container of that
		// name (names are unique in a valid pod).
		c, ok := nthContainer(containers, cs.Name, seen[cs.Name])
		seen[cs.Name]++
		if !ok {
			continue
		}
		*c.mounts = insertAt(*c.mounts, cs.VolumeMounts, (*corev1.VolumeMount).DeepCopy)
		*c.devices = insertAt(*c.devices, cs.VolumeDevices, (*corev1.VolumeDevice).DeepCopy)
		*c.claims = insertAt(*c.claims, cs.ResourceClaims, (*corev1.ResourceClaim).DeepCopy)
		for _, p := range cs.Ports {
			restorePort(*c.ports, p)
		}
	}
}

// nthContainer returns the n-th (from 0) container named name.
func nthContainer(containers []containerFields, name string, n int) (containerFields, bool) {
	for _, c := range containers {
		if c.name != name {
			continue
		}
		if n == 0 {
			return c, true
		}
		n--
	}
	return containerFields{}, false
}

// restorePort gives a port its hostPort back: the port at the recorded
// index if it is still the same port, else the first port with the same
// container port and protocol that has no hostPort.
func restorePort(ports []corev1.ContainerPort, p Indexed[corev1.ContainerPort]) {
	same := func(q corev1.ContainerPort) bool {
		return q.HostPort == 0 && q.ContainerPort == p.Item.ContainerPort && q.Protocol == p.Item.Protocol
	}
	if p.Index >= 0 && p.Index < len(ports) && same(ports[p.Index]) {
		ports[p.Index] = p.Item
		return
	}
	for i := range ports {
		if same(ports[i]) {
			ports[i] = p.Item
			return
		}
	}
}

// insertAt inserts items, in the order of their index, at their index (or
// at the end of a shorter list): put back into the list they were taken
// from, they make it again exactly.
func insertAt[T any](list []T, items []Indexed[T], deepCopy func(*T) *T) []T {
	if len(items) == 0 {
		return list
	}
	sorted := slices.Clone(items)
	sort.SliceStable(sorted, func(i, j int) bool { return sorted[i].Index < sorted[j].Index })
	for _, it := range sorted {
		pos := min(max(it.Index, 0), len(list))
		list = slices.Insert(list, pos, *deepCopy(&it.Item))
	}
	return list
}

// containerFields points into the fields of one container the webhook
// strips, whatever its kind.
type containerFields struct {
	name    string
	ports   *[]corev1.ContainerPort
	mounts  *[]corev1.VolumeMount
	devices *[]corev1.VolumeDevice
	claims  *[]corev1.ResourceClaim
	// regular is true for spec.containers (whose hostPorts must equal
	// their containerPorts in a hostNetwork pod).
	regular bool
}

// eachContainer lists a pod's containers: init containers, containers,
// ephemeral containers, in that order.
func eachContainer(spec *corev1.PodSpec) []containerFields {
	var out []containerFields
	for i := range spec.InitContainers {
		c := &spec.InitContainers[i]
		out = append(out, containerFields{c.Name, &c.Ports, &c.VolumeMounts, &c.VolumeDevices, &c.Resources.Claims, false})
	}
	for i := range spec.Containers {
		c := &spec.Containers[i]
		out = append(out, containerFields{c.Name, &c.Ports, &c.VolumeMounts, &c.VolumeDevices, &c.Resources.Claims, true})
	}
	for i := range spec.EphemeralContainers {
		c := &spec.EphemeralContainers[i].EphemeralContainerCommon
		out = append(out, containerFields{c.Name, &c.Ports, &c.VolumeMounts, &c.VolumeDevices, &c.Resources.Claims, false})
	}
	return out
}

// boundedUnreachable is a toleration of the unreachable NoExecute taint
// with a limit (the DefaultTolerationSeconds admission plugin adds one of
// 300 s to every pod): any such toleration would bound how long a proxy
// survives fleetlet being down, so the proxy has none.
func boundedUnreachable(t corev1.Toleration) bool {
	return t.Key == corev1.TaintNodeUnreachable && t.Effect == corev1.TaintEffectNoExecute && t.TolerationSeconds != nil
}

// tolerationsForProxy returns the proxy's tolerations: the user's, but for
// bounded unreachable ones, followed by those of proxy.Tolerations the user
// does not already have.
func tolerationsForProxy(user []corev1.Toleration) []corev1.Toleration {
	var out []corev1.Toleration
	for _, t := range user {
		if !boundedUnreachable(t) {
			out = append(out, *t.DeepCopy())
		}
	}
	for _, t := range proxy.Tolerations() {
		if !proxy.HasToleration(out, t) {
			out = append(out, t)
		}
	}
	return out
}

func deepCopyTolerations(in []corev1.Toleration) []corev1.Toleration {
	if len(in) == 0 {
		return nil
	}
	out := make([]corev1.Toleration, len(in))
	for i := range in {
		in[i].DeepCopyInto(&out[i])
	}
	return out
}

func deepCopyTopologySpread(in []corev1.TopologySpreadConstraint) []corev1.TopologySpreadConstraint {
	if len(in) == 0 {
		return nil
	}
	out := make([]corev1.TopologySpreadConstraint, len(in))
	for i := range in {
		in[i].DeepCopyInto(&out[i])
	}
	return out
}

func copyInt64(p *int64) *int64 {
	if p == nil {
		return nil
	}
	v := *p
	return &v
}
