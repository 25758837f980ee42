package elector_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
	"github.com/fleetlet/fleetlet/pkg/proxy"
	"github.com/fleetlet/fleetlet/pkg/source/elector"
	"github.com/fleetlet/fleetlet/pkg/testenv"
)

// spreadProxy is a proxy of app "even" spread over clusters, maxSkew 1,
// DoNotSchedule, as a Deployment's replicas are.
func spreadProxy(t *testing.T, h *harness, name string) *corev1.Pod {
	t.Helper()
	return h.proxyWith(t, name, func(p *corev1.Pod) {
		p.Labels = map[string]string{"app": "even"}
		p.Spec.TopologySpreadConstraints = []corev1.TopologySpreadConstraint{{
			MaxSkew: 1, TopologyKey: v1alpha1.LabelCluster, WhenUnsatisfiable: corev1.DoNotSchedule,
			LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "even"}},
		}}
	})
}

// A target that cannot take a candidate yet (here an admission policy
// refuses it; in the sandbox, a namespace whose RoleBinding for this source
// the target had not made yet) is still a domain of the spread: the second
// replica does not go where the first is while that target has none.
// Before: the domains were the targets that had a candidate, and a Deployment
// created just after its namespace went 4/5/0 over three clusters.
func TestSpreadCountsATargetThatCannotTakeItsCandidateYet(t *testing.T) {
	h, remote, local := start(t, elector.Options{})
	lift := denyChaperons(t, h.clientOf(remote), h.ns, admissionregistrationv1.Create)

	first := spreadProxy(t, h, "even-1")
	h.reserve(t, local, first)
	h.waitProxy(t, first, "elected in "+local.Name, electedIn(local.Name))

	second := spreadProxy(t, h, "even-2")
	h.reserve(t, local, second)
	assert.Never(t, func() bool { _, ok := proxy.Elected(h.get(t, second)); return ok }, 3*time.Second, 100*time.Millisecond,
		"the second replica elected beside the first while %s, a domain with none, could not take its candidate", remote.Name)

	lift()
	h.reserve(t, remote, second)
	h.waitProxy(t, second, "elected in "+remote.Name, electedIn(remote.Name))
}

// With CandidateTargets 1, a replica's first candidate goes to the best
// target its spread lets it go to, not to the best one: the second replica's
// goes to the emptier cluster although the other has more room. Before: it
// went to the best-ranked target, the only one then counted as a domain, and
// the spread was never kept.
func TestFirstCandidatesGoWhereTheSpreadAllows(t *testing.T) {
	h, remote, local := start(t, elector.Options{CandidateTargets: 1})
	cpu := func(q string) corev1.ResourceList {
		return corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(q)}
	}
	// remote ranks first: 100 CPUs free, against 5 in local.
	setSummary(t, h.target, v1alpha1.ClusterSummaryStatus{Allocatable: cpu("100"), Requested: cpu("0")})
	setSummary(t, h.source, v1alpha1.ClusterSummaryStatus{Allocatable: cpu("10"), Requested: cpu("5")})
	time.Sleep(3 * time.Second) // several of the registry's 500 ms probes

	first := spreadProxy(t, h, "even-1")
	h.reserve(t, remote, first)
	h.waitProxy(t, first, "elected in "+remote.Name, electedIn(remote.Name))

	second := spreadProxy(t, h, "even-2")
	testenv.EventuallyTrue(t, waitTimeout, "the second replica's candidate in "+local.Name, func(context.Context) bool {
		_, ok := h.chaperon(t, local, second)
		return ok
	})
	_, inRemote := h.chaperon(t, remote, second)
	assert.False(t, inRemote, "the second replica got a candidate in %s, where its spread does not let it go", remote.Name)
	h.reserve(t, local, second)
	h.waitProxy(t, second, "elected in "+local.Name, electedIn(local.Name))
}
