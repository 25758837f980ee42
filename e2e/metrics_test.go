package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/json"
	metricsclient "k8s.io/metrics/pkg/client/clientset/versioned"
	"k8s.io/utils/ptr"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
	"github.com/fleetlet/fleetlet/pkg/sandbox"
)

// usage sets the CPU and memory kwok emulates for a Deployment's pods, and
// spreads them over the clusters (maxSkew 1).
func usage(cpu, memory string) func(*appsv1.Deployment) {
	return func(d *appsv1.Deployment) {
		d.Spec.Template.Annotations = map[string]string{sandbox.AnnotationUsageCPU: cpu, sandbox.AnnotationUsageMemory: memory}
		d.Spec.Template.Spec.TopologySpreadConstraints = []corev1.TopologySpreadConstraint{{
			MaxSkew: 1, TopologyKey: v1alpha1.LabelCluster, WhenUnsatisfiable: corev1.DoNotSchedule,
			LabelSelector: &metav1.LabelSelector{MatchLabels: d.Spec.Selector.MatchLabels},
		}}
	}
}

// topUsage is one line of kubectl top.
type topUsage struct{ cpu, memory resource.Quantity }

// kubectlTop runs `kubectl top pod -n ns` or `kubectl top node` in the
// source and returns the usage by name.
func kubectlTop(t *testing.T, args ...string) (map[string]topUsage, string) {
	t.Helper()
	out, err := kubectl(t, append(append([]string{"--context", sandbox.SourceCluster, "top"}, args...), "--no-headers")...)
	if err != nil {
		return nil, out
	}
	got := map[string]topUsage{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Fields(line)
		if len(f) < 3 || f[1] == "<unknown>" {
			continue
		}
		mem := f[2]
		if len(f) == 5 { // top node: NAME CPU CPU% MEMORY MEMORY%
			mem = f[3]
		}
		cpu, err1 := resource.ParseQuantity(f[1])
		m, err2 := resource.ParseQuantity(mem)
		require.Falsef(t, err1 != nil || err2 != nil, "kubectl top line %q: %v %v", line, err1, err2)
		got[f[0]] = topUsage{cpu, m}
	}
	return got, out
}

// near tells whether got is within 10 % of want, with slack for rounding
// (kubectl top shows whole millicores and mebibytes).
func near(got, want resource.Quantity, slack int64) bool {
	d := got.MilliValue() - want.MilliValue()
	if d < 0 {
		d = -d
	}
	return d <= want.MilliValue()/10+slack
}

// targetUsage is the usage the targets' metrics-servers report for the
// delegates of the proxies bound to each virtual node, summed by node.
func targetUsage(t *testing.T, ctx context.Context) (map[string]topUsage, error) {
	t.Helper()
	proxies, err := kube(t, sandbox.SourceCluster).CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	byUID := map[types.UID]string{}
	for _, p := range proxies.Items {
		if strings.HasPrefix(p.Spec.NodeName, "fleetlet-") && p.Status.Phase == corev1.PodRunning {
			byUID[p.UID] = p.Spec.NodeName
		}
	}
	sums := map[string]topUsage{}
	for _, c := range sb.ClusterNames() {
		cfg, err := sb.RESTConfig(c)
		if err != nil {
			return nil, err
		}
		mc, err := metricsclient.NewForConfig(cfg)
		if err != nil {
			return nil, err
		}
		ms, err := mc.MetricsV1beta1().PodMetricses("").List(ctx, metav1.ListOptions{LabelSelector: v1alpha1.LabelParentCluster + "=" + sandbox.SourceCluster})
		if err != nil {
			return nil, err
		}
		for _, m := range ms.Items {
			pod, err := kube(t, c).CoreV1().Pods(m.Namespace).Get(ctx, m.Name, metav1.GetOptions{})
			if err != nil {
				continue // gone since
			}
			node, ok := byUID[types.UID(pod.Labels[v1alpha1.LabelParentUID])]
			if !ok || node != "fleetlet-"+c {
				continue // a candidate, or its proxy is not running there
			}
			s := sums[node]
			for _, ctr := range m.Containers {
				s.cpu.Add(ctr.Usage[corev1.ResourceCPU])
				s.memory.Add(ctr.Usage[corev1.ResourceMemory])
			}
			sums[node] = s
		}
	}
	return sums, nil
}

// kubectl top and a HorizontalPodAutoscaler work on proxies as on
// ordinary pods: their figures are their delegates', which every target's
// metrics-server measures from kwok's emulated usage (pod annotations); a
// virtual node's are the sum of its delegates'; the HPA scales a
// Deployment out over the clusters when its delegates get busy, and back
// in; a stopped target's proxies leave kubectl top instead of keeping
// their last figures.
func TestTopAndAutoscaleAcrossClusters(t *testing.T) {
	need(t)
	needMetricsServer(t)
	needWholeFleet(t) // the scaled-out replicas are looked for in every cluster
	ns := enabledNamespace(t, "metrics", sb.ClusterNames()[1:]...)
	ctx := context.Background()

	sel := deployment(t, ns, "steady", 3, usage("150m", "80Mi"))
	busy := startAutoscaled(t, ctx, ns)
	proxies := waitDeploymentRunning(t, ns, "steady", 3, 2*time.Minute)
	got := byCluster(t, ctx, ns, sel)
	assert.Lenf(t, got, 3, "steady's replicas by cluster %v, want one in each", got)
	want := topUsage{resource.MustParse("150m"), resource.MustParse("80Mi")}
	took := eventually(t, 2*time.Minute, "kubectl top pod to show every proxy with its delegate's usage", func(context.Context) (bool, string) {
		got, out := kubectlTop(t, "pod", "-n", ns)
		for _, p := range proxies {
			u, ok := got[p.Name]
			if !ok || !near(u.cpu, want.cpu, 2) || !near(u.memory, want.memory, 1<<20*1000) {
				return false, out
			}
		}
		return true, out
	})
	t.Logf("kubectl top pod showed the delegates' usage %s after the proxies ran", took.Round(time.Second))

	eventually(t, time.Minute, "kubectl top node to show each virtual node with the sum of its delegates", func(ctx context.Context) (bool, string) {
		sums, err := targetUsage(t, ctx)
		if err != nil {
			return false, err.Error()
		}
		got, out := kubectlTop(t, "node")
		for _, c := range sb.ClusterNames() {
			node := "fleetlet-" + c
			u, ok := got[node]
			if !ok || !near(u.cpu, sums[node].cpu, 2) || !near(u.memory, sums[node].memory, 1<<20*1000) {
				return false, fmt.Sprintf("%s: top %v, delegates' sum %v\n%s", node, u, sums[node], out)
			}
		}
		return true, out
	})

	autoscale(t, ctx, ns, busy)
	stoppedTargetLeavesTop(t, ctx, ns, proxies)
}

// startAutoscaled creates a Deployment of 2 replicas using 20 % of their
// 100m CPU request, and an HPA (min 2, max 8, 50 %) on it, and returns the
// Deployment's selector.
func startAutoscaled(t *testing.T, ctx context.Context, ns string) string {
	t.Helper()
	sel := deployment(t, ns, "busy", 2, usage("20m", "32Mi"))
	hpa := &autoscalingv2.HorizontalPodAutoscaler{
		ObjectMeta: metav1.ObjectMeta{Name: "busy", Namespace: ns},
		Spec: autoscalingv2.HorizontalPodAutoscalerSpec{
			ScaleTargetRef: autoscalingv2.CrossVersionObjectReference{APIVersion: "apps/v1", Kind: "Deployment", Name: "busy"},
			MinReplicas:    ptr.To[int32](2),
			MaxReplicas:    8,
			Metrics: []autoscalingv2.MetricSpec{{Type: autoscalingv2.ResourceMetricSourceType, Resource: &autoscalingv2.ResourceMetricSource{
				Name: corev1.ResourceCPU, Target: autoscalingv2.MetricTarget{Type: autoscalingv2.UtilizationMetricType, AverageUtilization: ptr.To[int32](50)},
			}}},
			// Scale-down stabilisation shortened from 5 minutes.
			Behavior: &autoscalingv2.HorizontalPodAutoscalerBehavior{ScaleDown: &autoscalingv2.HPAScalingRules{
				StabilizationWindowSeconds: ptr.To[int32](5),
				Policies:                   []autoscalingv2.HPAScalingPolicy{{Type: autoscalingv2.PercentScalingPolicy, Value: 100, PeriodSeconds: 5}},
			}},
		},
	}
	_, err := kube(t, sandbox.SourceCluster).AutoscalingV2().HorizontalPodAutoscalers(ns).Create(ctx, hpa, metav1.CreateOptions{})
	require.NoError(t, err)
	return sel
}

// autoscale makes the delegates of startAutoscaled's Deployment use 150 %
// of their request, then 10 %, and follows the HPA.
func autoscale(t *testing.T, ctx context.Context, ns, sel string) {
	t.Helper()
	waitDeploymentRunning(t, ns, "busy", 2, 2*time.Minute)
	hpas := kube(t, sandbox.SourceCluster).AutoscalingV2().HorizontalPodAutoscalers(ns)
	eventually(t, 2*time.Minute, "the HPA to measure busy's proxies", func(ctx context.Context) (bool, string) {
		h, err := hpas.Get(ctx, "busy", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		for _, m := range h.Status.CurrentMetrics {
			if m.Resource != nil && m.Resource.Current.AverageUtilization != nil {
				return true, ""
			}
		}
		return false, fmt.Sprintf("%+v", h.Status)
	})

	raised := time.Now()
	setDelegatesUsage(t, ctx, ns, sel, "150m")
	var decided time.Duration
	eventually(t, 2*time.Minute, "the HPA to scale busy out to 6 or more", func(ctx context.Context) (bool, string) {
		d, err := kube(t, sandbox.SourceCluster).AppsV1().Deployments(ns).Get(ctx, "busy", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		decided = time.Since(raised)
		return *d.Spec.Replicas >= 6, fmt.Sprintf("replicas %d", *d.Spec.Replicas)
	})
	d, err := kube(t, sandbox.SourceCluster).AppsV1().Deployments(ns).Get(ctx, "busy", metav1.GetOptions{})
	require.NoError(t, err)
	n := int(*d.Spec.Replicas)
	waitDeploymentRunning(t, ns, "busy", n, 3*time.Minute)
	running := time.Since(raised)
	spread := byCluster(t, ctx, ns, sel)
	t.Logf("usage raised to 150%%: the HPA chose %d replicas after %s; all Running in targets after %s, by cluster %v",
		n, decided.Round(time.Second), running.Round(time.Second), spread)
	assert.Lenf(t, spread, len(sb.ClusterNames()), "busy's %d replicas by cluster %v, want some in every cluster", n, spread)

	lowered := time.Now()
	setDelegatesUsage(t, ctx, ns, sel, "10m")
	eventually(t, 2*time.Minute, "the HPA to scale busy back in to 2", func(ctx context.Context) (bool, string) {
		d, err := kube(t, sandbox.SourceCluster).AppsV1().Deployments(ns).Get(ctx, "busy", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return *d.Spec.Replicas == 2, fmt.Sprintf("replicas %d", *d.Spec.Replicas)
	})
	waitDeploymentRunning(t, ns, "busy", 2, 2*time.Minute)
	t.Logf("usage lowered to 10%%: busy back to 2 replicas after %s", time.Since(lowered).Round(time.Second))
}

// setDelegatesUsage changes, in the targets, the CPU kwok emulates for the
// delegates of the proxies sel selects: the workload gets busier there.
func setDelegatesUsage(t *testing.T, ctx context.Context, ns, sel, cpu string) {
	t.Helper()
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{sandbox.AnnotationUsageCPU: cpu}}})
	require.NoError(t, err)
	for node, ps := range proxiesOn(t, ctx, ns, sel) {
		for i := range ps {
			for c, ds := range delegatesOf(t, ctx, &ps[i]) {
				if "fleetlet-"+c != node {
					continue
				}
				for _, d := range ds {
					_, err := kube(t, c).CoreV1().Pods(ns).Patch(ctx, d.Name, types.MergePatchType, patch, metav1.PatchOptions{})
					require.NoErrorf(t, err, "%s: %s", c, d.Name)
				}
			}
		}
	}
}

// stoppedTargetLeavesTop stops a target: its proxies drop out of kubectl
// top, the others stay.
func stoppedTargetLeavesTop(t *testing.T, ctx context.Context, ns string, proxies []corev1.Pod) {
	t.Helper()
	stopped := sb.ClusterNames()[2]
	eventually(t, time.Minute, "kubectl top pod to show every proxy of steady", func(context.Context) (bool, string) {
		got, out := kubectlTop(t, "pod", "-n", ns)
		for _, p := range proxies {
			if _, ok := got[p.Name]; !ok {
				return false, out
			}
		}
		return true, out
	})
	stoppedAt := time.Now()
	require.NoError(t, sb.Stop(ctx, stopped))
	eventually(t, time.Minute, "the proxies in "+stopped+" to leave kubectl top", func(context.Context) (bool, string) {
		got, out := kubectlTop(t, "pod", "-n", ns)
		for _, p := range proxies {
			_, shown := got[p.Name]
			if shown != (clusterOfNode(p.Spec.NodeName) != stopped) {
				return false, out
			}
		}
		return true, out
	})
	t.Logf("%s stopped: its proxies left kubectl top %s after the stop began", stopped, time.Since(stoppedAt).Round(time.Second))
	require.NoError(t, sb.Start(ctx, stopped))
	waitVirtualNodeReady(t, stopped, "again", 2*time.Minute)
}
