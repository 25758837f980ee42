package placement_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/utils/ptr"

	"github.com/fleetlet/fleetlet/pkg/source/placement"
)

var web = &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}

// peersOf counts fixed numbers of matching pods per cluster.
func peersOf(counts map[string]int) placement.Peers {
	return func(key string, sel labels.Selector) map[string]int {
		if key != clusterKey || !sel.Matches(labels.Set{"app": "web", "pod-template-hash": "abc"}) {
			return map[string]int{}
		}
		return counts
	}
}

func spread(skew int32, when corev1.UnsatisfiableConstraintAction, minDomains *int32) corev1.TopologySpreadConstraint {
	return corev1.TopologySpreadConstraint{MaxSkew: skew, TopologyKey: clusterKey, WhenUnsatisfiable: when, LabelSelector: web,
		MinDomains: minDomains, MatchLabelKeys: []string{"pod-template-hash"}}
}

func TestFits(t *testing.T) {
	c2 := map[string]string{clusterKey: "cluster-2"}
	c3 := map[string]string{clusterKey: "cluster-3"}
	domains := map[string][]string{clusterKey: {"cluster-2", "cluster-3"}}
	podLabels := map[string]string{"app": "web", "pod-template-hash": "abc"}
	tests := []struct {
		name           string
		spec           corev1.PodSpec
		counts         map[string]int
		fits2, fits3   bool
		reason         string
		crowd2, crowd3 int64
	}{
		{
			name:   "maxSkew 1: the cluster with one more is refused, the other taken",
			spec:   corev1.PodSpec{TopologySpreadConstraints: []corev1.TopologySpreadConstraint{spread(1, corev1.DoNotSchedule, nil)}},
			counts: map[string]int{"cluster-2": 1}, fits2: false, fits3: true,
			reason: "topology spread over " + clusterKey + ": cluster-2 would have 2 pod(s) matching app=web,pod-template-hash=abc, 2 more than the least (cluster-3 has 0; maxSkew 1)",
		},
		{
			name:   "even counts: both fit",
			spec:   corev1.PodSpec{TopologySpreadConstraints: []corev1.TopologySpreadConstraint{spread(1, corev1.DoNotSchedule, nil)}},
			counts: map[string]int{"cluster-2": 3, "cluster-3": 3}, fits2: true, fits3: true,
		},
		{
			name:   "minDomains above the domains there are: the least counts as zero",
			spec:   corev1.PodSpec{TopologySpreadConstraints: []corev1.TopologySpreadConstraint{spread(1, corev1.DoNotSchedule, ptr.To[int32](3))}},
			counts: map[string]int{"cluster-2": 1, "cluster-3": 1}, fits2: false, fits3: false,
			reason: "2 more than the least (fewer domains than minDomains 3 count the least as 0; maxSkew 1)",
		},
		{
			name:   "ScheduleAnyway never refuses; it ranks by crowding",
			spec:   corev1.PodSpec{TopologySpreadConstraints: []corev1.TopologySpreadConstraint{spread(1, corev1.ScheduleAnyway, nil)}},
			counts: map[string]int{"cluster-2": 4, "cluster-3": 1}, fits2: true, fits3: true, crowd2: 4, crowd3: 1,
		},
		{
			name: "required anti-affinity over clusters: one per cluster",
			spec: corev1.PodSpec{Affinity: &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{
				RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{LabelSelector: web, TopologyKey: clusterKey}}}}},
			counts: map[string]int{"cluster-2": 1}, fits2: false, fits3: true,
			reason: "pod anti-affinity over " + clusterKey,
		},
		{
			name: "required affinity over clusters: only where a selected pod is",
			spec: corev1.PodSpec{Affinity: &corev1.Affinity{PodAffinity: &corev1.PodAffinity{
				RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{LabelSelector: web, TopologyKey: clusterKey}}}}},
			counts: map[string]int{"cluster-3": 2}, fits2: false, fits3: true,
			reason: "pod affinity over " + clusterKey + ": no pod matching app=web in cluster-2 (2 elsewhere)",
		},
		{
			name: "required affinity over clusters, none anywhere, the pod selects itself: it starts the group",
			spec: corev1.PodSpec{Affinity: &corev1.Affinity{PodAffinity: &corev1.PodAffinity{
				RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{LabelSelector: web, TopologyKey: clusterKey}}}}},
			counts: map[string]int{}, fits2: true, fits3: true,
		},
		{
			name: "required affinity over clusters, none anywhere, the pod does not select itself: nowhere",
			spec: corev1.PodSpec{Affinity: &corev1.Affinity{PodAffinity: &corev1.PodAffinity{
				RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
					LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}}, TopologyKey: clusterKey}}}}},
			counts: map[string]int{}, fits2: false, fits3: false,
			reason: "pod affinity over " + clusterKey + ": no pod matching app=db in cluster-2 (0 elsewhere)",
		},
		{
			name: "an anti-affinity term on a node key stays in the target",
			spec: corev1.PodSpec{Affinity: &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{
				RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{LabelSelector: web, TopologyKey: "kubernetes.io/hostname"}}}}},
			counts: map[string]int{"cluster-2": 1}, fits2: true, fits3: true,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := placement.Split(&tc.spec, podLabels)
			peers := peersOf(tc.counts)
			ok2, why2 := p.Fits(c2, domains, peers)
			ok3, why3 := p.Fits(c3, domains, peers)
			assert.Falsef(t, ok2 != tc.fits2 || ok3 != tc.fits3,
				"fits cluster-2 %t (%s), cluster-3 %t (%s); want %t, %t", ok2, why2, ok3, why3, tc.fits2, tc.fits3)
			if !ok2 {
				assert.Contains(t, why2, tc.reason, "refusal")
			}
			assert.Equal(t, tc.crowd2, p.Crowding(c2, peers), "crowding of cluster-2")
			assert.Equal(t, tc.crowd3, p.Crowding(c3, peers), "crowding of cluster-3")
		})
	}
}

// The candidate loses the spread, affinity and anti-affinity over clusters
// and keeps those inside the target.
func TestNodeSpecDropsPeerConstraintsOverClusters(t *testing.T) {
	zone := corev1.TopologySpreadConstraint{MaxSkew: 1, TopologyKey: zoneKey, WhenUnsatisfiable: corev1.DoNotSchedule, LabelSelector: web}
	host := corev1.PodAffinityTerm{LabelSelector: web, TopologyKey: "kubernetes.io/hostname"}
	spec := &corev1.PodSpec{
		TopologySpreadConstraints: []corev1.TopologySpreadConstraint{spread(1, corev1.DoNotSchedule, nil), zone},
		Affinity: &corev1.Affinity{
			PodAntiAffinity: &corev1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{
				{LabelSelector: web, TopologyKey: clusterKey}, host}},
			PodAffinity: &corev1.PodAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{
				{LabelSelector: web, TopologyKey: clusterKey}}},
		},
	}
	p := placement.Split(spec, nil)
	require.True(t, p.CountsPeers(), "CountsPeers = false")
	got := p.NodeSpec(spec, eu)
	assert.Falsef(t, len(got.TopologySpreadConstraints) != 1 || got.TopologySpreadConstraints[0].TopologyKey != zoneKey,
		"candidate's spread %+v, want the zone's only", got.TopologySpreadConstraints)
	terms := got.Affinity.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution
	assert.Falsef(t, len(terms) != 1 || terms[0].TopologyKey != host.TopologyKey,
		"candidate's anti-affinity %+v, want the host's only", terms)
	assert.Nil(t, got.Affinity.PodAffinity, "candidate's pod affinity, want none (it was over clusters only)")
	assert.NotNil(t, spec.Affinity.PodAffinity, "the user's pod affinity was removed from its spec")
	assert.Len(t, spec.TopologySpreadConstraints, 2, "the user's spec was changed")
	onlyAffinity := &corev1.PodSpec{Affinity: &corev1.Affinity{PodAffinity: &corev1.PodAffinity{
		RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{LabelSelector: web, TopologyKey: clusterKey}}}}}
	assert.True(t, placement.Split(onlyAffinity, nil).CountsPeers(), "a pod affinity over clusters does not count peers")
	assert.False(t, placement.Split(&corev1.PodSpec{TopologySpreadConstraints: []corev1.TopologySpreadConstraint{zone}}, nil).CountsPeers(),
		"a zone spread counts peers over clusters")
}
