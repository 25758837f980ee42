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
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
	"github.com/fleetlet/fleetlet/pkg/sandbox"
)

const podSecurityEnforce = "pod-security.kubernetes.io/enforce"

// restricted makes a Deployment's pods meet Pod Security restricted.
func restricted(d *appsv1.Deployment) {
	spec := &d.Spec.Template.Spec
	spec.SecurityContext = &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To[int64](65532),
		SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}}
	for i := range spec.Containers {
		spec.Containers[i].SecurityContext = &corev1.SecurityContext{AllowPrivilegeEscalation: ptr.To(false),
			Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}}
	}
}

// noRequests leaves a Deployment's requests to the namespace's LimitRange.
func noRequests(d *appsv1.Deployment) {
	for i := range d.Spec.Template.Spec.Containers {
		d.Spec.Template.Spec.Containers[i].Resources = corev1.ResourceRequirements{}
	}
}

// A namespace as production clusters have them: in the source a
// LimitRange that gives pods their requests and a ResourceQuota of 4 pods;
// in cluster-2 a ResourceQuota of 2 pods; in cluster-3 Pod Security
// restricted. A restricted Deployment pinned to cluster-3 runs there. Of a
// plain Deployment of 5, the source's quota admits 3 more proxies (the
// ReplicaSet says why not the others, as on one cluster); cluster-3 refuses
// their candidates (Pod Security), cluster-2's quota takes two delegates,
// and the third proxy stays gated with Elected=False naming both refusals
// (one target's pending candidate trimmed keeps saying what it answered).
// Nothing is stuck, nothing runs twice. Before: the trimmed one said only
// that candidates were kept elsewhere.
func TestQuotaLimitRangeAndPodSecurity(t *testing.T) {
	need(t)
	ctx := context.Background()
	ns := enabledNamespace(t, "quota", "cluster-2", "cluster-3")
	src := kube(t, sandbox.SourceCluster)
	lr := &corev1.LimitRange{ObjectMeta: metav1.ObjectMeta{Name: "defaults"}, Spec: corev1.LimitRangeSpec{Limits: []corev1.LimitRangeItem{{
		Type:           corev1.LimitTypeContainer,
		DefaultRequest: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("50m"), corev1.ResourceMemory: resource.MustParse("32Mi")},
		Default:        corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("64Mi")},
	}}}}
	_, err := src.CoreV1().LimitRanges(ns).Create(ctx, lr, metav1.CreateOptions{})
	require.NoError(t, err)
	quota := func(cluster string, pods string) {
		q := &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: "pods"}, Spec: corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{
			corev1.ResourcePods: resource.MustParse(pods), corev1.ResourceRequestsCPU: resource.MustParse("2")}}}
		_, err := kube(t, cluster).CoreV1().ResourceQuotas(ns).Create(ctx, q, metav1.CreateOptions{})
		require.NoError(t, err)
		eventually(t, 30*time.Second, "the quota in "+cluster+" counted", func(ctx context.Context) (bool, string) {
			got, err := kube(t, cluster).CoreV1().ResourceQuotas(ns).Get(ctx, "pods", metav1.GetOptions{})
			return err == nil && got.Status.Hard != nil, "not yet"
		})
	}
	quota(sandbox.SourceCluster, "4")
	quota("cluster-2", "2")
	// A LimitRange in cluster-2 as well, so that candidates there get the
	// target's own defaults, as any pod there would.
	_, err = kube(t, "cluster-2").CoreV1().LimitRanges(ns).Create(ctx, lr.DeepCopy(), metav1.CreateOptions{})
	require.NoError(t, err)
	patch := fmt.Appendf(nil, `{"metadata":{"labels":{%q:"restricted"}}}`, podSecurityEnforce)
	_, err = kube(t, "cluster-3").CoreV1().Namespaces().Patch(ctx, ns, types.MergePatchType, patch, metav1.PatchOptions{})
	require.NoError(t, err)

	deployment(t, ns, "strict", 1, restricted, noRequests, inCluster("cluster-3", nil))
	for _, p := range waitDeploymentRunning(t, ns, "strict", 1, 2*time.Minute) {
		assert.Equal(t, "fleetlet-cluster-3", p.Spec.NodeName, "the restricted pod's node")
		got := p.Spec.Containers[0].Resources.Requests.Cpu().String()
		assert.Equalf(t, "50m", got, "the proxy's cpu request %s: the LimitRange's 50m", got)
	}

	deployment(t, ns, "plain", 5, noRequests, notSource("plain"))
	eventually(t, 2*time.Minute, "two plain proxies Running in cluster-2, the third gated with Elected=False per cluster, naming the quota and Pod Security", func(ctx context.Context) (bool, string) {
		list, err := src.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=plain"})
		if err != nil {
			return false, err.Error()
		}
		running, explained := 0, 0
		var states []string
		for _, p := range list.Items {
			if p.Status.Phase == corev1.PodRunning && p.Spec.NodeName == "fleetlet-cluster-2" {
				running++
				continue
			}
			c := electedCondition(&p)
			if c != nil && c.Status == corev1.ConditionFalse && strings.Contains(c.Message, "cluster-2: ") && strings.Contains(c.Message, "cluster-3: ") &&
				strings.Contains(c.Message, "violates PodSecurity") && strings.Contains(c.Message, "exceeded quota") {
				explained++
				continue
			}
			states = append(states, fmt.Sprintf("%s %s on %q: %v", p.Name, p.Status.Phase, p.Spec.NodeName, c))
		}
		return len(list.Items) == 3 && running == 2 && explained == 1, fmt.Sprintf("%d proxies, %d running, %d explained; %s", len(list.Items), running, explained, strings.Join(states, "; "))
	})
	eventually(t, time.Minute, "the ReplicaSet saying the source's quota stopped the others", func(ctx context.Context) (bool, string) {
		rss, err := src.AppsV1().ReplicaSets(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=plain"})
		if err != nil || len(rss.Items) != 1 {
			return false, fmt.Sprintf("%v %v", err, rss)
		}
		for _, c := range rss.Items[0].Status.Conditions {
			if c.Type == appsv1.ReplicaSetReplicaFailure && strings.Contains(c.Message, "exceeded quota") {
				return true, ""
			}
		}
		return false, fmt.Sprintf("conditions %+v", rss.Items[0].Status.Conditions)
	})
	for _, c := range []string{"cluster-2", "cluster-3"} {
		pods, err := kube(t, c).CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: v1alpha1.LabelParentCluster})
		require.NoError(t, err)
		byProxy := map[string]int{}
		for _, p := range pods.Items {
			if p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning {
				byProxy[p.Labels[v1alpha1.LabelParentUID]]++
			}
		}
		for uid, n := range byProxy {
			assert.LessOrEqualf(t, n, 1, "%s: %d delegates of proxy %s", c, n, uid)
		}
	}
}
