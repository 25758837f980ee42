package main

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
	"github.com/fleetlet/fleetlet/pkg/proxy"
	"github.com/fleetlet/fleetlet/pkg/sandbox"
)

// placementCase is one kind of cluster-level constraint put on every pod
// of a case; the pod carries its case's bench-run label, which the
// constraints that count peers select.
type placementCase struct {
	name  string
	shape func(*corev1.Pod)
}

func placementCases(names []string) []placementCase {
	own := func(p *corev1.Pod) *metav1.LabelSelector { return &metav1.LabelSelector{MatchLabels: p.Labels} }
	return []placementCase{
		{name: "no constraint"},
		{name: "spread over clusters (maxSkew 1, DoNotSchedule)", shape: func(p *corev1.Pod) {
			p.Spec.TopologySpreadConstraints = []corev1.TopologySpreadConstraint{{MaxSkew: 1, TopologyKey: v1alpha1.LabelCluster,
				WhenUnsatisfiable: corev1.DoNotSchedule, LabelSelector: own(p)}}
		}},
		{name: "preferred cluster (weight 100 on " + names[len(names)-1] + ")", shape: func(p *corev1.Pod) {
			p.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{PreferredDuringSchedulingIgnoredDuringExecution: []corev1.PreferredSchedulingTerm{{
				Weight: 100, Preference: corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{{
					Key: v1alpha1.LabelCluster, Operator: corev1.NodeSelectorOpIn, Values: []string{names[len(names)-1]}}}}}}}}
		}},
		{name: "pod affinity over clusters (to its own kind)", shape: func(p *corev1.Pod) {
			p.Spec.Affinity = &corev1.Affinity{PodAffinity: &corev1.PodAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
				TopologyKey: v1alpha1.LabelCluster, LabelSelector: own(p)}}}}
		}},
		// The control: what changed while the cases ran shows here.
		{name: "again no constraint"},
	}
}

func elected(p *corev1.Pod) bool {
	_, ok := proxy.Elected(p)
	return ok
}

// measurePlacement times, for each placement case, the election of
// o.placementPods proxies created at o.placementRate a second in namespace
// ns of the source: from just before the create call to the watch event
// showing Elected=True. It prints the medians beside the case without
// constraints, and deletes each case's pods before the next.
func measurePlacement(ctx context.Context, w io.Writer, clients map[string]kubernetes.Interface, names []string, ns string, o options) error {
	src := clients[sandbox.SourceCluster]
	where := func(int) (kubernetes.Interface, string) { return src, ns }
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "election latency, %d proxies at %g/s\tp50\tp99\tp50 / no constraint\t\n", o.placementPods, o.placementRate)
	var base time.Duration
	for _, c := range placementCases(names) {
		r, err := measure(ctx, c.name, o.placementPods, o.workers, o.placementRate, o.timeout, where, c.shape, elected)
		if err != nil {
			return err
		}
		if r.incomplete != "" {
			return fmt.Errorf("%s: %s", c.name, r.incomplete)
		}
		p50 := r.percentile(0.5)
		if base == 0 {
			base = p50
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%.2fx\t\n", c.name, p50.Round(time.Millisecond), r.percentile(0.99).Round(time.Millisecond), ratio(p50, base))
		if err := clean(ctx, clients, []string{ns}); err != nil {
			return err
		}
	}
	return tw.Flush()
}
