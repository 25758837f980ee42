package placement_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"

	"github.com/fleetlet/fleetlet/pkg/source/placement"
)

const (
	clusterKey = "multicluster.fleetlet.io/cluster"
	regionKey  = "topology.kubernetes.io/region"
	// regionOnNode is regionKey as a virtual node carries it when every
	// node of its target shares it.
	regionOnNode = "target.multicluster.fleetlet.io/topology.kubernetes.io.region"
	zoneKey      = "topology.kubernetes.io/zone"
)

// Two virtual nodes: cluster-2 in region eu (its nodes share it), cluster-3
// whose nodes do not share a region.
var (
	eu    = map[string]string{clusterKey: "cluster-2", regionOnNode: "eu", "type": "virtual-kubelet"}
	mixed = map[string]string{clusterKey: "cluster-3", "type": "virtual-kubelet"}
)

func req(key string, op corev1.NodeSelectorOperator, values ...string) corev1.NodeSelectorRequirement {
	return corev1.NodeSelectorRequirement{Key: key, Operator: op, Values: values}
}

func term(reqs ...corev1.NodeSelectorRequirement) corev1.NodeSelectorTerm {
	return corev1.NodeSelectorTerm{MatchExpressions: reqs}
}

func withRequired(terms ...corev1.NodeSelectorTerm) *corev1.PodSpec {
	return &corev1.PodSpec{Affinity: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
		RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: terms}}}}
}

func withPreferred(terms ...corev1.PreferredSchedulingTerm) *corev1.PodSpec {
	return &corev1.PodSpec{Affinity: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{PreferredDuringSchedulingIgnoredDuringExecution: terms}}}
}

func TestIsClusterRequirement(t *testing.T) {
	for _, tc := range []struct {
		r    corev1.NodeSelectorRequirement
		want bool
	}{
		{req(clusterKey, corev1.NodeSelectorOpIn, "cluster-2"), true},
		{req(clusterKey, corev1.NodeSelectorOpDoesNotExist), true},
		{req(regionOnNode, corev1.NodeSelectorOpIn, "eu"), true},
		{req("type", corev1.NodeSelectorOpIn, "virtual-kubelet"), true},
		{req("type", corev1.NodeSelectorOpIn, "kwok"), false},
		{req("type", corev1.NodeSelectorOpIn, "virtual-kubelet", "kwok"), false},
		{req("type", corev1.NodeSelectorOpNotIn, "virtual-kubelet"), false},
		{req(regionKey, corev1.NodeSelectorOpIn, "eu"), false},
		{req("multicluster.fleetlet.io/other", corev1.NodeSelectorOpExists), false},
	} {
		assert.Equal(t, tc.want, placement.IsClusterRequirement(tc.r), "IsClusterRequirement(%v)", tc.r)
	}
}

// Which targets a pod's required constraints admit, and what its
// candidate keeps in each.
func TestAdmitsAndNodeSpec(t *testing.T) {
	tests := []struct {
		name       string
		spec       *corev1.PodSpec
		admitsEU   bool
		admitsMix  bool
		wantReason string
		// nodeSpecEU is the candidate's spec in cluster-2 (nil: the
		// user's spec unchanged).
		nodeSpecEU *corev1.PodSpec
	}{
		{
			name:     "no constraint: every target, spec unchanged",
			spec:     &corev1.PodSpec{NodeSelector: map[string]string{"disk": "ssd"}},
			admitsEU: true, admitsMix: true,
		},
		{
			name:       "a nodeSelector on the cluster: that one, left out of the candidate",
			spec:       &corev1.PodSpec{NodeSelector: map[string]string{clusterKey: "cluster-2", "disk": "ssd"}},
			admitsEU:   true,
			wantReason: "nodeSelector " + clusterKey + "=cluster-2",
			nodeSpecEU: &corev1.PodSpec{NodeSelector: map[string]string{"disk": "ssd"}},
		},
		{
			name:       "a nodeSelector on a shared label under its virtual-node key",
			spec:       &corev1.PodSpec{NodeSelector: map[string]string{regionOnNode: "eu"}},
			admitsEU:   true,
			wantReason: "nodeSelector",
			nodeSpecEU: &corev1.PodSpec{},
		},
		{
			name:     "a bare region in the nodeSelector stays node-level",
			spec:     &corev1.PodSpec{NodeSelector: map[string]string{regionKey: "eu"}},
			admitsEU: true, admitsMix: true,
		},
		{
			name: "required terms ORed: each target keeps the node part of the terms its cluster part admits",
			spec: withRequired(
				term(req(clusterKey, corev1.NodeSelectorOpIn, "cluster-2"), req(zoneKey, corev1.NodeSelectorOpIn, "a")),
				term(req(clusterKey, corev1.NodeSelectorOpIn, "cluster-3"), req(zoneKey, corev1.NodeSelectorOpIn, "b")),
			),
			admitsEU: true, admitsMix: true,
			nodeSpecEU: withRequired(term(req(zoneKey, corev1.NodeSelectorOpIn, "a"))),
		},
		{
			name:       "a required term met by the cluster alone drops the required affinity",
			spec:       withRequired(term(req(clusterKey, corev1.NodeSelectorOpNotIn, "cluster-3"))),
			admitsEU:   true,
			wantReason: "no required node affinity term matches the cluster (" + clusterKey + " notin (cluster-3))",
			nodeSpecEU: &corev1.PodSpec{},
		},
		{
			name: "a term without a cluster part admits every target and stays",
			spec: withRequired(
				term(req(clusterKey, corev1.NodeSelectorOpIn, "cluster-9")),
				term(req(zoneKey, corev1.NodeSelectorOpIn, "a")),
			),
			admitsEU: true, admitsMix: true,
			nodeSpecEU: withRequired(term(req(zoneKey, corev1.NodeSelectorOpIn, "a"))),
		},
		{
			name:       "type In (virtual-kubelet) is cluster-level and met by every target",
			spec:       withRequired(term(req("type", corev1.NodeSelectorOpIn, "virtual-kubelet"), req(regionOnNode, corev1.NodeSelectorOpIn, "eu"))),
			admitsEU:   true,
			wantReason: "no required node affinity term",
			nodeSpecEU: &corev1.PodSpec{},
		},
		{
			name: "a cluster-level preference leaves the candidate; a node-level one stays",
			spec: withPreferred(
				corev1.PreferredSchedulingTerm{Weight: 50, Preference: term(req(clusterKey, corev1.NodeSelectorOpIn, "cluster-2"))},
				corev1.PreferredSchedulingTerm{Weight: 10, Preference: term(req(zoneKey, corev1.NodeSelectorOpIn, "a"))},
			),
			admitsEU: true, admitsMix: true,
			nodeSpecEU: withPreferred(corev1.PreferredSchedulingTerm{Weight: 10, Preference: term(req(zoneKey, corev1.NodeSelectorOpIn, "a"))}),
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := tc.spec.DeepCopy()
			p := placement.Split(tc.spec, nil)
			okEU, whyEU := p.Admits(eu)
			assert.Equal(t, tc.admitsEU, okEU, "admits cluster-2 (%s)", whyEU)
			ok, why := p.Admits(mixed)
			assert.Equal(t, tc.admitsMix, ok, "admits cluster-3 (%s)", why)
			assert.Falsef(t, !ok && (tc.wantReason == "" || !strings.Contains(why, tc.wantReason)),
				"refusal of cluster-3 %q, want one with %q", why, tc.wantReason)
			want := tc.nodeSpecEU
			if want == nil {
				want = tc.spec
			}
			got := p.NodeSpec(tc.spec, eu)
			assert.Truef(t, equality.Semantic.DeepEqual(got, want), "candidate spec in cluster-2:\n got %+v\nwant %+v", got, want)
			assert.True(t, equality.Semantic.DeepEqual(tc.spec, before), "NodeSpec changed the user's spec")
		})
	}
}

// Preferred terms rank targets by weight: cluster-level terms over the
// virtual node, terms on a bare key where the target's nodes share it
// (Admiralty #201: a bare region preference must rank the eu cluster
// first), never a term on a key the target's nodes do not share.
func TestScore(t *testing.T) {
	spec := withPreferred(
		corev1.PreferredSchedulingTerm{Weight: 80, Preference: term(req(regionKey, corev1.NodeSelectorOpIn, "eu"))},
		corev1.PreferredSchedulingTerm{Weight: 15, Preference: term(req(clusterKey, corev1.NodeSelectorOpIn, "cluster-3"))},
		corev1.PreferredSchedulingTerm{Weight: 5, Preference: term(req("type", corev1.NodeSelectorOpIn, "virtual-kubelet"))},
		corev1.PreferredSchedulingTerm{Weight: 3, Preference: corev1.NodeSelectorTerm{MatchFields: []corev1.NodeSelectorRequirement{req("metadata.name", corev1.NodeSelectorOpIn, "n1")}}},
	)
	p := placement.Split(spec, nil)
	assert.Equal(t, int64(85), p.Score(eu), "score of cluster-2 (region eu shared)")
	assert.Equal(t, int64(20), p.Score(mixed), "score of cluster-3 (no shared region)")
	// The bare region preference still applies inside the target.
	got := p.NodeSpec(spec, eu)
	terms := got.Affinity.NodeAffinity.PreferredDuringSchedulingIgnoredDuringExecution
	assert.Falsef(t, len(terms) != 2 || terms[0].Weight != 80 || terms[0].Preference.MatchExpressions[0].Key != regionKey || terms[1].Weight != 3,
		"candidate's preferred terms %+v, want the region's (80) and the field's (3)", terms)
	assert.Equal(t, int64(0), placement.Split(&corev1.PodSpec{}, nil).Score(eu), "score without preferences")
}
