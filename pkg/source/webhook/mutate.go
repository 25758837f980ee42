package webhook

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
	"github.com/fleetlet/fleetlet/pkg/proxy"
)

// Options configure Mutate.
type Options struct {
	// Keys are fleetlet's seal keys: Keys.Seal (at least MinKeyLength
	// bytes) seals the source spec; all of them open an earlier pass's.
	// Without a sealing key, a pod that would become a proxy is an error
	// wrapping ErrNoSealKey.
	Keys Keys
	// IsVirtualNode reports whether a node is one of fleetlet's virtual
	// nodes. Nil means no node is.
	IsVirtualNode func(nodeName string) (bool, error)
}

// Action says what Mutate did.
type Action string

const (
	// Skipped: the pod is left alone (Result.Reason says why).
	Skipped Action = "Skipped"
	// Mutated: the pod became a proxy pod (first pass).
	Mutated Action = "Mutated"
	// Folded: a second pass found fields a later webhook set, folded them
	// into the source spec and stripped them again.
	Folded Action = "Folded"
	// Unchanged: a second pass found nothing new.
	Unchanged Action = "Unchanged"
)

// Result is what Mutate decided.
type Result struct {
	Action Action
	// Reason says why a pod was skipped.
	Reason string
	// Pod is the pod as admission should store it: a copy, equal to the
	// input when Skipped or Unchanged.
	Pod *corev1.Pod
}

// RefusedError is returned for a pod that names one of fleetlet's virtual
// nodes in spec.nodeName: nothing would ever run it there.
type RefusedError struct {
	NodeName string
}

func (e *RefusedError) Error() string {
	return fmt.Sprintf("spec.nodeName %q is a fleetlet virtual node: fleetlet only runs proxy pods there, which the scheduler binds after an election; "+
		"remove spec.nodeName (to choose a cluster, use the %s annotation or a nodeSelector)", e.NodeName, v1alpha1.AnnotationClusterSelector)
}

// userAnnotations are the fleetlet annotations a user may set on a pod.
var userAnnotations = map[string]bool{
	v1alpha1.AnnotationElect:           true,
	v1alpha1.AnnotationClusterSelector: true,
	v1alpha1.AnnotationFollow:          true,
	v1alpha1.AnnotationGroupMinMembers: true,
}

// userLabels are the fleetlet labels a user may set on a pod.
var userLabels = map[string]bool{
	v1alpha1.LabelGroup: true,
}

// Mutate turns a pod being created into a proxy pod, as docs/design.md's step 1
// says. It never modifies pod.
//
// Left alone (Skipped): pods labelled multicluster.fleetlet.io/parent-uid
// (candidates and delegates), mirror pods, DaemonSet pods, pods annotated
// multicluster.fleetlet.io/elect: "false", and pods with spec.nodeName —
// except that a spec.nodeName naming a fleetlet virtual node is refused with
// a *RefusedError.
//
// Otherwise the pod gets the multicluster.fleetlet.io/delegate finalizer and
// multicluster.fleetlet.io/election scheduling gate (appended once, others
// kept in order), its scheduling constraints, hostPorts, claim-backed
// volumes and resource claims are stripped and recorded, sealed, in the
// multicluster.fleetlet.io/source-spec annotation (see SourceSpec), and
// other multicluster.fleetlet.io/ labels and annotations a user is not to
// set are removed.
//
// A pod that already carries the gate and a source spec whose seal verifies
// for its namespace is a second pass (reinvocation): what later webhooks
// added to the stripped fields is folded into the source spec and stripped
// again; with nothing new, the pod is Unchanged.
func Mutate(pod *corev1.Pod, opts Options) (Result, error) {
	if reason, skip := excluded(pod); skip {
		return Result{Action: Skipped, Reason: reason, Pod: pod.DeepCopy()}, nil
	}
	if pod.Spec.NodeName != "" {
		if opts.IsVirtualNode != nil {
			virtual, err := opts.IsVirtualNode(pod.Spec.NodeName)
			if err != nil {
				return Result{}, fmt.Errorf("looking up node %q: %w", pod.Spec.NodeName, err)
			}
			if virtual {
				return Result{}, &RefusedError{NodeName: pod.Spec.NodeName}
			}
		}
		return Result{Action: Skipped, Reason: "spec.nodeName is set", Pod: pod.DeepCopy()}, nil
	}
	if pod.Namespace == "" {
		return Result{}, errors.New("the pod has no namespace")
	}
	if len(opts.Keys.Seal) < MinKeyLength {
		return Result{}, fmt.Errorf("%w: the sealing key has %d bytes, want at least %d", ErrNoSealKey, len(opts.Keys.Seal), MinKeyLength)
	}

	out := pod.DeepCopy()
	action := Mutated
	var rec *SourceSpec
	prev, ok, err := previousPass(out, opts.Keys)
	if err != nil {
		return Result{}, err
	}
	if ok {
		// Second pass: what the proxy has now, with the user's values put
		// back and merged with later webhooks' additions, is the user's
		// pod; strip it again.
		prev.foldInto(&out.Spec)
		rec = strip(&out.Spec)
		action = Folded
	} else {
		rec = strip(&out.Spec)
	}
	removeMarks(out)
	value, err := seal(rec, out.Namespace, opts.Keys.Seal)
	if err != nil {
		return Result{}, err
	}
	if out.Annotations == nil {
		out.Annotations = map[string]string{}
	}
	out.Annotations[v1alpha1.AnnotationSourceSpec] = value
	out.Spec.SchedulingGates = ensureGate(out.Spec.SchedulingGates, v1alpha1.SchedulingGateElection)
	out.Finalizers = ensureOnce(out.Finalizers, v1alpha1.FinalizerDelegate)

	if action == Folded {
		same, err := sameJSON(pod, out)
		if err != nil {
			return Result{}, err
		}
		if same {
			return Result{Action: Unchanged, Pod: pod.DeepCopy()}, nil
		}
	}
	return Result{Action: action, Pod: out}, nil
}

// excluded says why fleetlet leaves a pod alone, whatever its spec.
func excluded(pod *corev1.Pod) (string, bool) {
	if _, ok := pod.Labels[v1alpha1.LabelParentUID]; ok {
		return "it is a candidate or delegate (labelled " + v1alpha1.LabelParentUID + ")", true
	}
	if _, ok := pod.Annotations[corev1.MirrorPodAnnotationKey]; ok {
		return "it is a mirror pod", true
	}
	for _, ref := range pod.OwnerReferences {
		if gv, err := schema.ParseGroupVersion(ref.APIVersion); err == nil && gv.Group == appsv1.GroupName && ref.Kind == "DaemonSet" {
			return "it belongs to a DaemonSet", true
		}
	}
	if pod.Annotations[v1alpha1.AnnotationElect] == v1alpha1.AnnotationElectDisabled {
		return "it is annotated " + v1alpha1.AnnotationElect + ": \"" + v1alpha1.AnnotationElectDisabled + "\"", true
	}
	return "", false
}

// previousPass returns the source spec of an earlier pass: the pod carries
// our gate and a source spec sealed for its namespace. A pod with our gate
// and a source spec that does not open is refused (ErrUnverifiedPass),
// never stripped again: its spec may already be a proxy's, whose user
// values only the annotation holds.
func previousPass(pod *corev1.Pod, keys Keys) (*SourceSpec, bool, error) {
	if !proxy.Gated(pod) {
		return nil, false, nil
	}
	if _, sealed := pod.Annotations[v1alpha1.AnnotationSourceSpec]; !sealed {
		return nil, false, nil
	}
	s, err := Open(pod, keys)
	if err != nil {
		return nil, false, fmt.Errorf("%w: %w", ErrUnverifiedPass, err)
	}
	return s, true, nil
}

// strip turns spec into the proxy's and returns what it took off or
// replaced: the user's values.
func strip(spec *corev1.PodSpec) *SourceSpec {
	rec := &SourceSpec{
		Affinity:      spec.Affinity,
		SchedulerName: spec.SchedulerName,
	}
	if len(spec.NodeSelector) > 0 {
		rec.NodeSelector = spec.NodeSelector
	}
	if len(spec.TopologySpreadConstraints) > 0 {
		rec.TopologySpreadConstraints = spec.TopologySpreadConstraints
	}
	if len(spec.Tolerations) > 0 {
		rec.Tolerations = spec.Tolerations
	}

	// A map the election can add kubernetes.io/hostname to, to pin the
	// proxy to its virtual node.
	spec.NodeSelector = map[string]string{v1alpha1.LabelNodeType: v1alpha1.NodeTypeVirtualKubelet}
	spec.Affinity = nil
	spec.TopologySpreadConstraints = nil
	spec.SchedulerName = corev1.DefaultSchedulerName
	spec.Tolerations = tolerationsForProxy(rec.Tolerations)

	strippedVolumes := map[string]bool{}
	var volumes []corev1.Volume
	for i, v := range spec.Volumes {
		// A claim stays: a StatefulSet matches its pods' claims, and the
		// source's scheduler binds the proxy where the claim's mirror
		// volume is (package claims). An ephemeral volume would make a
		// claim in the source: it goes.
		if v.Ephemeral != nil {
			rec.Volumes = append(rec.Volumes, Indexed[corev1.Volume]{Index: i, Item: v})
			strippedVolumes[v.Name] = true
			continue
		}
		volumes = append(volumes, v)
	}
	spec.Volumes = volumes
	for i, c := range spec.ResourceClaims {
		rec.ResourceClaims = append(rec.ResourceClaims, Indexed[corev1.PodResourceClaim]{Index: i, Item: c})
	}
	spec.ResourceClaims = nil

	for _, c := range eachContainer(spec) {
		cs := ContainerSourceSpec{Name: c.name}
		*c.mounts, cs.VolumeMounts = partition(*c.mounts, func(m corev1.VolumeMount) bool { return strippedVolumes[m.Name] })
		*c.devices, cs.VolumeDevices = partition(*c.devices, func(d corev1.VolumeDevice) bool { return strippedVolumes[d.Name] })
		// Every pod resource claim is stripped, so every reference to one.
		*c.claims, cs.ResourceClaims = partition(*c.claims, func(corev1.ResourceClaim) bool { return true })
		// In a hostNetwork pod the API server wants a container's
		// hostPorts equal to its containerPorts: those stay.
		if !c.regular || !spec.HostNetwork {
			ports := *c.ports
			for i := range ports {
				if ports[i].HostPort == 0 {
					continue
				}
				cs.Ports = append(cs.Ports, Indexed[corev1.ContainerPort]{Index: i, Item: ports[i]})
				ports[i].HostPort, ports[i].HostIP = 0, ""
			}
		}
		if len(cs.Ports)+len(cs.VolumeMounts)+len(cs.VolumeDevices)+len(cs.ResourceClaims) > 0 {
			rec.Containers = append(rec.Containers, cs)
		}
	}
	return rec
}

// partition splits list into the items kept and the items taken (with
// their index).
func partition[T any](list []T, take func(T) bool) ([]T, []Indexed[T]) {
	var kept []T
	var taken []Indexed[T]
	for i, x := range list {
		if take(x) {
			taken = append(taken, Indexed[T]{Index: i, Item: x})
		} else {
			kept = append(kept, x)
		}
	}
	return kept, taken
}

// foldInto makes spec, a proxy's spec after later webhooks, the user's
// spec again: the recorded values merged with what later webhooks set on
// the fields the webhook strips or replaces.
func (s *SourceSpec) foldInto(spec *corev1.PodSpec) {
	spec.NodeSelector = mergeNodeSelector(s.NodeSelector, spec.NodeSelector, func(k, v string) bool {
		return k == v1alpha1.LabelNodeType && v == v1alpha1.NodeTypeVirtualKubelet // ours
	})
	spec.Affinity = mergeAffinity(s.Affinity, spec.Affinity)
	spec.TopologySpreadConstraints = append(deepCopyTopologySpread(s.TopologySpreadConstraints), spec.TopologySpreadConstraints...)
	if spec.SchedulerName == "" || spec.SchedulerName == corev1.DefaultSchedulerName {
		spec.SchedulerName = s.SchedulerName
	}
	spec.Tolerations = mergeTolerations(s.Tolerations, spec.Tolerations)
	if g := spec.TerminationGracePeriodSeconds; s.TerminationGracePeriodSeconds != nil && (g == nil || *g == 0) {
		// An earlier release's seal, which set the proxy's to 0.
		spec.TerminationGracePeriodSeconds = copyInt64(s.TerminationGracePeriodSeconds)
	}
	s.restoreLists(spec)
}

// mergeAffinity returns the affinity that requires both user's and
// later's: required node selectors are ANDed (their terms crossed),
// everything else appended.
func mergeAffinity(user, later *corev1.Affinity) *corev1.Affinity {
	if later == nil {
		return user.DeepCopy()
	}
	if user == nil {
		return later
	}
	out := user.DeepCopy()
	if na := later.NodeAffinity; na != nil {
		if out.NodeAffinity == nil {
			out.NodeAffinity = &corev1.NodeAffinity{}
		}
		out.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution = andNodeSelectors(
			out.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution, na.RequiredDuringSchedulingIgnoredDuringExecution)
		out.NodeAffinity.PreferredDuringSchedulingIgnoredDuringExecution = append(
			out.NodeAffinity.PreferredDuringSchedulingIgnoredDuringExecution, na.PreferredDuringSchedulingIgnoredDuringExecution...)
	}
	if pa := later.PodAffinity; pa != nil {
		if out.PodAffinity == nil {
			out.PodAffinity = &corev1.PodAffinity{}
		}
		out.PodAffinity.RequiredDuringSchedulingIgnoredDuringExecution = append(
			out.PodAffinity.RequiredDuringSchedulingIgnoredDuringExecution, pa.RequiredDuringSchedulingIgnoredDuringExecution...)
		out.PodAffinity.PreferredDuringSchedulingIgnoredDuringExecution = append(
			out.PodAffinity.PreferredDuringSchedulingIgnoredDuringExecution, pa.PreferredDuringSchedulingIgnoredDuringExecution...)
	}
	if paa := later.PodAntiAffinity; paa != nil {
		if out.PodAntiAffinity == nil {
			out.PodAntiAffinity = &corev1.PodAntiAffinity{}
		}
		out.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution = append(
			out.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution, paa.RequiredDuringSchedulingIgnoredDuringExecution...)
		out.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution = append(
			out.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution, paa.PreferredDuringSchedulingIgnoredDuringExecution...)
	}
	return out
}

// andNodeSelectors returns a node selector that matches the nodes both
// match: (a1 ∨ a2) ∧ (b1 ∨ b2) = ∨ (ai ∧ bj), a term pair ANDed by joining
// its requirements. An empty term matches nothing, so neither does a pair
// with one.
func andNodeSelectors(a, b *corev1.NodeSelector) *corev1.NodeSelector {
	if a == nil {
		return b
	}
	if b == nil {
		return a
	}
	empty := func(t corev1.NodeSelectorTerm) bool { return len(t.MatchExpressions) == 0 && len(t.MatchFields) == 0 }
	out := &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{}}
	for _, ta := range a.NodeSelectorTerms {
		for _, tb := range b.NodeSelectorTerms {
			if empty(ta) || empty(tb) {
				continue
			}
			t := ta.DeepCopy()
			t.MatchExpressions = append(t.MatchExpressions, tb.MatchExpressions...)
			t.MatchFields = append(t.MatchFields, tb.MatchFields...)
			out.NodeSelectorTerms = append(out.NodeSelectorTerms, *t)
		}
	}
	return out
}

// removeMarks removes the multicluster.fleetlet.io/ labels and annotations
// a user is not to set (the source spec is written afterwards).
func removeMarks(pod *corev1.Pod) {
	for k := range pod.Annotations {
		if strings.HasPrefix(k, v1alpha1.Prefix) && !userAnnotations[k] {
			delete(pod.Annotations, k)
		}
	}
	for k := range pod.Labels {
		if strings.HasPrefix(k, v1alpha1.Prefix) && !userLabels[k] {
			delete(pod.Labels, k)
		}
	}
}

// ensureGate keeps the first scheduling gate named name where it is, drops
// later duplicates of it, or appends it; other gates stay in order.
func ensureGate(gates []corev1.PodSchedulingGate, name string) []corev1.PodSchedulingGate {
	var out []corev1.PodSchedulingGate
	found := false
	for _, g := range gates {
		if g.Name == name {
			if found {
				continue
			}
			found = true
		}
		out = append(out, g)
	}
	if !found {
		out = append(out, corev1.PodSchedulingGate{Name: name})
	}
	return out
}

// ensureOnce is ensureGate for a list of names (finalizers).
func ensureOnce(list []string, name string) []string {
	var out []string
	found := false
	for _, x := range list {
		if x == name {
			if found {
				continue
			}
			found = true
		}
		out = append(out, x)
	}
	if !found {
		out = append(out, name)
	}
	return out
}

// sameJSON reports whether two pods serialize the same: what the API server
// would store is the same.
func sameJSON(a, b *corev1.Pod) (bool, error) {
	ja, err := json.Marshal(a)
	if err != nil {
		return false, err
	}
	jb, err := json.Marshal(b)
	if err != nil {
		return false, err
	}
	return bytes.Equal(ja, jb), nil
}
