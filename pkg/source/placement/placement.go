// Package placement splits a pod's node constraints into the cluster-level
// ones, which the source's election evaluates over the virtual nodes, and
// the node-level ones, which stay in the candidate and apply inside the
// target (docs/design.md, "Cluster-level placement"). One rule, no new API: a
// requirement whose key is a label only virtual nodes carry
// (multicluster.fleetlet.io/cluster, the target.multicluster.fleetlet.io/
// labels, type=virtual-kubelet) is cluster-level; every other one is
// node-level. A preferred term on a bare key that a target's nodes all
// share (its virtual node carries it under target.multicluster.fleetlet.io/)
// is evaluated at both levels: it ranks the targets and still applies
// inside the target.
//
// Topology spread constraints and required pod affinity and anti-affinity
// terms whose topologyKey is a cluster key count this source's proxies per
// cluster (Fits, Crowding: peers.go). Preferred pod (anti-)affinity and
// terms that name other namespaces stay node-level.
package placement

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
	"github.com/fleetlet/fleetlet/pkg/source/vnode"
)

// IsClusterKey tells whether a label key is one only virtual nodes carry:
// the target's name (multicluster.fleetlet.io/cluster) or a shared label of
// its nodes (target.multicluster.fleetlet.io/...). type=virtual-kubelet is
// cluster-level too, as a requirement (IsClusterRequirement): "type" alone
// is a common label of real nodes.
func IsClusterKey(key string) bool {
	return key == v1alpha1.LabelCluster || strings.HasPrefix(key, v1alpha1.TargetLabelPrefix)
}

// IsClusterRequirement tells whether a node selector requirement is
// cluster-level: its key is a cluster key, or it asks for type In
// (virtual-kubelet), which every virtual node and no real node satisfies.
func IsClusterRequirement(r corev1.NodeSelectorRequirement) bool {
	if IsClusterKey(r.Key) {
		return true
	}
	return r.Key == v1alpha1.LabelNodeType && r.Operator == corev1.NodeSelectorOpIn &&
		len(r.Values) > 0 && allEqual(r.Values, v1alpha1.NodeTypeVirtualKubelet)
}

func allEqual(values []string, want string) bool {
	for _, v := range values {
		if v != want {
			return false
		}
	}
	return true
}

// Placement is a pod's node constraints split in two.
type Placement struct {
	// selector is the cluster-level part of spec.nodeSelector.
	selector map[string]string
	// required are the required node affinity terms, each split; nil when
	// the pod has none (every target is admitted).
	required []splitTerm
	// preferred are the preferred node affinity terms, each split.
	preferred []splitPreferred
	// spread, apart and together are the topology spread constraints and
	// the required pod anti-affinity and affinity terms over clusters
	// (peers.go).
	spread   []Spread
	apart    []Apart
	together []Together
}

// splitTerm is one node selector term: its cluster-level requirements and
// the rest (node-level requirements and every field requirement).
type splitTerm struct {
	cluster []corev1.NodeSelectorRequirement
	node    corev1.NodeSelectorTerm
}

// splitPreferred is one preferred term with its weight. Its node-level
// requirements rank a target too where the target's nodes share their
// keys (Score), and still apply inside it (NodeSpec).
type splitPreferred struct {
	weight int32
	splitTerm
}

// Split reads the placement constraints of the user's spec (the proxy's
// with the sealed source-spec restored); podLabels are the pod's, for
// matchLabelKeys.
func Split(spec *corev1.PodSpec, podLabels map[string]string) Placement {
	var p Placement
	p.splitPeers(spec, podLabels)
	for k, v := range spec.NodeSelector {
		if IsClusterRequirement(corev1.NodeSelectorRequirement{Key: k, Operator: corev1.NodeSelectorOpIn, Values: []string{v}}) {
			if p.selector == nil {
				p.selector = map[string]string{}
			}
			p.selector[k] = v
		}
	}
	na := nodeAffinity(spec)
	if na == nil {
		return p
	}
	if req := na.RequiredDuringSchedulingIgnoredDuringExecution; req != nil {
		p.required = make([]splitTerm, 0, len(req.NodeSelectorTerms))
		for _, t := range req.NodeSelectorTerms {
			p.required = append(p.required, split(t))
		}
	}
	for _, t := range na.PreferredDuringSchedulingIgnoredDuringExecution {
		p.preferred = append(p.preferred, splitPreferred{weight: t.Weight, splitTerm: split(t.Preference)})
	}
	return p
}

func nodeAffinity(spec *corev1.PodSpec) *corev1.NodeAffinity {
	if spec.Affinity == nil {
		return nil
	}
	return spec.Affinity.NodeAffinity
}

func split(t corev1.NodeSelectorTerm) splitTerm {
	var s splitTerm
	for _, r := range t.MatchExpressions {
		if IsClusterRequirement(r) {
			s.cluster = append(s.cluster, r)
		} else {
			s.node.MatchExpressions = append(s.node.MatchExpressions, r)
		}
	}
	s.node.MatchFields = t.MatchFields
	return s
}

// Admits tells whether a target, by its virtual node's labels, meets the
// pod's cluster-level requirements, and if not, which.
func (p Placement) Admits(node map[string]string) (bool, string) {
	for k, v := range p.selector {
		if node[k] != v {
			return false, fmt.Sprintf("nodeSelector %s=%s does not match the cluster", k, v)
		}
	}
	if p.required == nil {
		return true, ""
	}
	for _, t := range p.required {
		if matches(t.cluster, node) {
			return true, ""
		}
	}
	return false, "no required node affinity term matches the cluster (" + describe(p.required) + ")"
}

// Score is the sum of the weights of the preferred terms the target meets
// at the cluster level: every cluster-level requirement of the term
// matches its virtual node, and every bare key of the term is a label its
// nodes share (carried by the virtual node under
// target.multicluster.fleetlet.io/) with a matching value. A term with a
// bare key the target's nodes do not share does not rank it.
func (p Placement) Score(node map[string]string) int64 {
	var score int64
	for _, t := range p.preferred {
		if !matches(t.cluster, node) {
			continue
		}
		if len(t.node.MatchFields) > 0 {
			// metadata.name is a node's: never a cluster's.
			continue
		}
		ok := true
		for _, r := range t.node.MatchExpressions {
			key, valid := vnode.TargetLabelKey(r.Key)
			if !valid {
				ok = false
				break
			}
			if _, shared := node[key]; !shared {
				ok = false
				break
			}
			r.Key = key
			if !matches([]corev1.NodeSelectorRequirement{r}, node) {
				ok = false
				break
			}
		}
		if ok && (len(t.cluster) > 0 || len(t.node.MatchExpressions) > 0) {
			score += int64(t.weight)
		}
	}
	return score
}

// NodeSpec is the user's spec as the candidate in a target carries it: the
// cluster-level requirements left out (they were evaluated over the
// virtual nodes), and of the required terms only those the target's
// cluster-level part admits. spec is not changed.
func (p Placement) NodeSpec(spec *corev1.PodSpec, node map[string]string) *corev1.PodSpec {
	if len(p.selector) == 0 && !p.hasClusterTerms() && !p.CountsPeers() {
		return spec
	}
	out := spec.DeepCopy()
	dropPeers(out)
	if out.Affinity != nil && *out.Affinity == (corev1.Affinity{}) {
		out.Affinity = nil
	}
	for k := range p.selector {
		delete(out.NodeSelector, k)
	}
	if len(out.NodeSelector) == 0 {
		out.NodeSelector = nil
	}
	na := nodeAffinity(out)
	if na == nil {
		return out
	}
	if na.RequiredDuringSchedulingIgnoredDuringExecution != nil {
		var terms []corev1.NodeSelectorTerm
		unconstrained := false
		for _, t := range p.required {
			if !matches(t.cluster, node) {
				continue
			}
			if len(t.node.MatchExpressions) == 0 && len(t.node.MatchFields) == 0 {
				// Met by the cluster alone: every node of it will do
				// (an empty term would match none).
				unconstrained = true
				break
			}
			terms = append(terms, *t.node.DeepCopy())
		}
		if unconstrained || len(terms) == 0 {
			na.RequiredDuringSchedulingIgnoredDuringExecution = nil
		} else {
			na.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms = terms
		}
	}
	var preferred []corev1.PreferredSchedulingTerm
	for _, t := range p.preferred {
		if len(t.node.MatchExpressions) == 0 && len(t.node.MatchFields) == 0 {
			continue // cluster-level only: it ranked the targets
		}
		if !matches(t.cluster, node) {
			continue // its cluster part rules this target out
		}
		preferred = append(preferred, corev1.PreferredSchedulingTerm{Weight: t.weight, Preference: *t.node.DeepCopy()})
	}
	na.PreferredDuringSchedulingIgnoredDuringExecution = preferred
	if na.RequiredDuringSchedulingIgnoredDuringExecution == nil && len(preferred) == 0 {
		out.Affinity.NodeAffinity = nil
		if *out.Affinity == (corev1.Affinity{}) {
			out.Affinity = nil
		}
	}
	return out
}

func (p Placement) hasClusterTerms() bool {
	for _, t := range p.required {
		if len(t.cluster) > 0 {
			return true
		}
	}
	for _, t := range p.preferred {
		if len(t.cluster) > 0 {
			return true
		}
	}
	return false
}

// matches tells whether node labels meet every requirement (none: true).
func matches(reqs []corev1.NodeSelectorRequirement, node map[string]string) bool {
	if len(reqs) == 0 {
		return true
	}
	sel, err := selectorOf(reqs)
	if err != nil {
		return false
	}
	return sel.Matches(labels.Set(node))
}

// selectorOf is the label selector of node selector requirements (Gt and
// Lt included).
func selectorOf(reqs []corev1.NodeSelectorRequirement) (labels.Selector, error) {
	sel := labels.NewSelector()
	for _, r := range reqs {
		var op selection.Operator
		switch r.Operator {
		case corev1.NodeSelectorOpIn:
			op = selection.In
		case corev1.NodeSelectorOpNotIn:
			op = selection.NotIn
		case corev1.NodeSelectorOpExists:
			op = selection.Exists
		case corev1.NodeSelectorOpDoesNotExist:
			op = selection.DoesNotExist
		case corev1.NodeSelectorOpGt:
			op = selection.GreaterThan
		case corev1.NodeSelectorOpLt:
			op = selection.LessThan
		default:
			return nil, fmt.Errorf("operator %q", r.Operator)
		}
		req, err := labels.NewRequirement(r.Key, op, r.Values)
		if err != nil {
			return nil, err
		}
		sel = sel.Add(*req)
	}
	return sel, nil
}

// describe renders the cluster-level parts of required terms for a
// message: "a, b; c" (terms ORed, requirements ANDed).
func describe(terms []splitTerm) string {
	var parts []string
	for _, t := range terms {
		if len(t.cluster) == 0 {
			continue
		}
		sel, err := selectorOf(t.cluster)
		if err != nil {
			parts = append(parts, err.Error())
			continue
		}
		parts = append(parts, sel.String())
	}
	return strings.Join(parts, "; ")
}
