package e2e

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
	"github.com/fleetlet/fleetlet/pkg/cleanup"
	"github.com/fleetlet/fleetlet/pkg/proxy"
	"github.com/fleetlet/fleetlet/pkg/sandbox"
)

// TestUninstall: a user uninstalls fleetlet (helm uninstall, in every
// cluster, source first) while a Deployment runs across the clusters and a
// pod too big for any cluster waits for its election. Nothing of fleetlet is
// left on the workload: no pod keeps the delegate finalizer or the
// election gate (the gated pod is deleted, never let loose), no
// PodChaperon, no virtual node, no ClusterRole or webhook of the chart; the
// CRDs are kept (crds.keep) and can then be deleted without anything
// holding them, which takes every remaining instance and what it owns with
// it. The Deployment keeps running in the source cluster by itself.
//
// It uninstalls, so it has its own sandbox of two clusters rather than the
// suite's.
func TestUninstall(t *testing.T) {
	need(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	dir := t.TempDir()
	u, err := sandbox.Up(ctx, sandbox.Options{Dir: dir, BinDir: sb.BinDir(), Clusters: 2, Nodes: 2, DieWithParent: true, Out: os.Stderr})
	require.NoError(t, err)
	t.Cleanup(func() {
		if t.Failed() {
			for _, c := range u.ClusterNames() {
				t.Logf("%s: fleetlet logs in %s/logs/%s", c, dir, c)
			}
			// Keep them past t.TempDir's removal.
			_ = os.Rename(dir+"/logs", fmt.Sprintf("%s/fleetlet-e2e-uninstall-logs-%d", os.TempDir(), time.Now().Unix()))
		}
		assert.NoError(t, u.Down(context.Background()), "sandbox down")
	})
	clients := map[string]kubernetes.Interface{}
	ctrlClients := map[string]client.Client{}
	for _, c := range u.ClusterNames() {
		cfg, err := u.RESTConfig(c)
		require.NoError(t, err)
		clients[c], err = kubernetes.NewForConfig(cfg)
		require.NoError(t, err)
		ctrlClients[c], err = client.New(cfg, client.Options{Scheme: scheme})
		require.NoError(t, err)
	}
	src := clients[sandbox.SourceCluster]

	// A namespace enabled in the source and admitted in every target.
	const ns = "uninstall"
	for c, cs := range clients {
		labels := map[string]string{"source.multicluster.fleetlet.io/" + sandbox.SourceCluster: "true"}
		if c == sandbox.SourceCluster {
			labels[v1alpha1.LabelEnabled] = v1alpha1.LabelEnabledValue
		}
		_, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: labels}}, metav1.CreateOptions{})
		require.NoError(t, err)
	}

	// A Deployment spread over the clusters, every replica Running on a
	// virtual node.
	const replicas = 4
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](replicas),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web"}}, Spec: podSpec("100m")},
		},
	}
	_, err = src.AppsV1().Deployments(ns).Create(ctx, d, metav1.CreateOptions{})
	require.NoError(t, err)
	virtual := map[string]bool{}
	for _, c := range u.ClusterNames() {
		virtual[proxy.NodeName(proxy.TargetKey{Name: c})] = true
	}
	eventually(t, 2*time.Minute, "the Deployment's replicas Running on virtual nodes", func(ctx context.Context) (bool, string) {
		pods, err := src.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=web"})
		if err != nil {
			return false, err.Error()
		}
		running := 0
		for _, p := range pods.Items {
			if virtual[p.Spec.NodeName] && p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil {
				running++
			}
		}
		return running == replicas, fmt.Sprintf("%d of %d Running on virtual nodes", running, replicas)
	})

	// A pod no cluster can run: it waits, gated, for an election.
	big := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "too-big", Namespace: ns}, Spec: podSpec("1000")}
	_, err = src.CoreV1().Pods(ns).Create(ctx, big, metav1.CreateOptions{})
	require.NoError(t, err)
	eventually(t, 30*time.Second, "the big pod to have chaperons and stay gated", func(ctx context.Context) (bool, string) {
		p, err := src.CoreV1().Pods(ns).Get(ctx, big.Name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		var chaperons v1alpha1.PodChaperonList
		if err := ctrlClients[sandbox.SourceCluster].List(ctx, &chaperons, client.InNamespace(ns)); err != nil {
			return false, err.Error()
		}
		return hasGate(p) && hasDelegateFinalizer(p) && len(chaperons.Items) > 0,
			fmt.Sprintf("gates %v, finalizers %v, %d chaperons in %s", p.Spec.SchedulingGates, p.Finalizers, len(chaperons.Items), sandbox.SourceCluster)
	})

	require.NoError(t, u.Uninstall(ctx), "uninstall")

	for c, cs := range clients {
		cl := ctrlClients[c]
		// No pod keeps fleetlet's finalizer or gate; the gated one is gone.
		pods, err := cs.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
		require.NoError(t, err)
		for _, p := range pods.Items {
			assert.Falsef(t, hasGate(&p) || hasDelegateFinalizer(&p), "%s: pod %s/%s keeps gates %v, finalizers %v", c, p.Namespace, p.Name, p.Spec.SchedulingGates, p.Finalizers)
			assert.Falsef(t, c == sandbox.SourceCluster && p.Namespace == ns && p.Name == big.Name && p.DeletionTimestamp == nil, "%s: the gated pod was not deleted (phase %s, node %q)", c, p.Status.Phase, p.Spec.NodeName)
		}
		// No chaperon, and soon no candidate or delegate they owned.
		var chaperons v1alpha1.PodChaperonList
		require.NoError(t, cl.List(ctx, &chaperons))
		for _, pc := range chaperons.Items {
			assert.Failf(t, "PodChaperon left", "%s: PodChaperon %s/%s left (finalizers %v)", c, pc.Namespace, pc.Name, pc.Finalizers)
		}
		eventually(t, time.Minute, c+": its delegates and candidates gone with their chaperons", func(ctx context.Context) (bool, string) {
			left, err := cs.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{LabelSelector: v1alpha1.LabelParentUID})
			if err != nil {
				return false, err.Error()
			}
			return len(left.Items) == 0, fmt.Sprintf("%d left", len(left.Items))
		})
		// No virtual node.
		nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: cleanup.VirtualNodeSelector().String()})
		require.NoError(t, err)
		for _, n := range nodes.Items {
			assert.Failf(t, "virtual node left", "%s: virtual node %s left", c, n.Name)
		}
		// Nothing cluster-wide of the chart: no ClusterRole (the chart's,
		// the source ClusterRoles, the cleanup hook's), no webhook, no
		// admission policy, no PriorityClass, and nothing the Source
		// controllers made for sources, though the ClusterSources stay
		// with their kept CRD (before: their ClusterRoleBindings and
		// ServiceAccounts stayed with them, granting access).
		roles, err := cs.RbacV1().ClusterRoles().List(ctx, metav1.ListOptions{})
		require.NoError(t, err)
		for _, r := range roles.Items {
			assert.Falsef(t, strings.Contains(r.Name, "fleetlet") || r.Labels["app.kubernetes.io/part-of"] == "fleetlet", "%s: ClusterRole %s left (labels %v)", c, r.Name, r.Labels)
		}
		bindings, err := cs.RbacV1().ClusterRoleBindings().List(ctx, metav1.ListOptions{})
		require.NoError(t, err)
		for _, b := range bindings.Items {
			assert.Falsef(t, strings.Contains(b.Name, "fleetlet") || b.Labels["app.kubernetes.io/part-of"] == "fleetlet", "%s: ClusterRoleBinding %s left (labels %v, owners %v)", c, b.Name, b.Labels, b.OwnerReferences)
		}
		_, err = cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, "fleetlet-proxy-pods", metav1.GetOptions{})
		assert.Truef(t, apierrors.IsNotFound(err), "%s: the webhook configuration is left (err %v)", c, err)
		vaps, err := cs.AdmissionregistrationV1().ValidatingAdmissionPolicies().List(ctx, metav1.ListOptions{})
		require.NoError(t, err)
		for _, v := range vaps.Items {
			assert.NotContainsf(t, v.Name, "fleetlet", "%s: ValidatingAdmissionPolicy %s left", c, v.Name)
		}
		_, err = cs.SchedulingV1().PriorityClasses().Get(ctx, v1alpha1.PriorityClassCandidate, metav1.GetOptions{})
		assert.Truef(t, apierrors.IsNotFound(err), "%s: PriorityClass %s left (err %v)", c, v1alpha1.PriorityClassCandidate, err)
		// The chart's ServiceAccounts, the hook's included, are gone.
		sas, err := cs.CoreV1().ServiceAccounts(sandbox.FleetletNamespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/instance=" + sandbox.ReleaseName})
		require.NoError(t, err)
		for _, sa := range sas.Items {
			assert.Failf(t, "ServiceAccount left", "%s: ServiceAccount %s left", c, sa.Name)
		}
		// The sources' ServiceAccounts too (the CRDs, hence the
		// ClusterSources, are still there).
		all, err := cs.CoreV1().ServiceAccounts(sandbox.FleetletNamespace).List(ctx, metav1.ListOptions{})
		require.NoError(t, err)
		for _, sa := range all.Items {
			assert.Falsef(t, strings.HasPrefix(sa.Name, v1alpha1.SourceServiceAccountPrefix), "%s: source ServiceAccount %s left", c, sa.Name)
		}
	}

	// The CRDs are kept (helm.sh/resource-policy: keep) with what they
	// hold; nothing holds them back from deletion: no instance keeps a
	// finalizer no one would remove now.
	for c := range clients {
		cfg, err := u.RESTConfig(c)
		require.NoError(t, err)
		ext, err := apiextensionsclient.NewForConfig(cfg)
		require.NoError(t, err)
		crds, err := ext.ApiextensionsV1().CustomResourceDefinitions().List(ctx, metav1.ListOptions{})
		require.NoError(t, err)
		var ours []string
		for _, crd := range crds.Items {
			if crd.Spec.Group != v1alpha1.GroupName {
				continue
			}
			ours = append(ours, crd.Name)
			assert.Equalf(t, "keep", crd.Annotations["helm.sh/resource-policy"], "%s: CRD %s is not marked keep", c, crd.Name)
			require.NoError(t, ext.ApiextensionsV1().CustomResourceDefinitions().Delete(ctx, crd.Name, metav1.DeleteOptions{}))
		}
		assert.Lenf(t, ours, 6, "%s: %d fleetlet CRDs kept, want 6: %v", c, len(ours), ours)
		eventually(t, time.Minute, c+": the CRDs deleted, instances and all", func(ctx context.Context) (bool, string) {
			crds, err := ext.ApiextensionsV1().CustomResourceDefinitions().List(ctx, metav1.ListOptions{})
			if err != nil {
				return false, err.Error()
			}
			var left []string
			for _, crd := range crds.Items {
				if crd.Spec.Group == v1alpha1.GroupName {
					left = append(left, crd.Name)
				}
			}
			return len(left) == 0, fmt.Sprintf("left: %v", left)
		})
		cs := clients[c]
		eventually(t, time.Minute, c+": what the ClusterSource owned collected", func(ctx context.Context) (bool, string) {
			bindings, err := cs.RbacV1().ClusterRoleBindings().List(ctx, metav1.ListOptions{})
			if err != nil {
				return false, err.Error()
			}
			var left []string
			for _, b := range bindings.Items {
				if strings.Contains(b.Name, "fleetlet") {
					left = append(left, b.Name)
				}
			}
			sas, err := cs.CoreV1().ServiceAccounts(sandbox.FleetletNamespace).List(ctx, metav1.ListOptions{})
			if err != nil {
				return false, err.Error()
			}
			for _, sa := range sas.Items {
				if strings.HasPrefix(sa.Name, v1alpha1.SourceServiceAccountPrefix) {
					left = append(left, "ServiceAccount "+sa.Name)
				}
			}
			return len(left) == 0, fmt.Sprintf("left: %v", left)
		})
	}

	// The workload outlives fleetlet: its replicas end up Running on the
	// source cluster's own nodes (those bound to deleted virtual nodes are
	// collected by the pod garbage collector and replaced).
	eventually(t, 3*time.Minute, "the Deployment's replicas Running on the source's own nodes", func(ctx context.Context) (bool, string) {
		pods, err := src.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=web"})
		if err != nil {
			return false, err.Error()
		}
		running, elsewhere := 0, 0
		for _, p := range pods.Items {
			switch {
			case virtual[p.Spec.NodeName]:
				elsewhere++
			case p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil:
				running++
			}
		}
		return running == replicas && elsewhere == 0, fmt.Sprintf("%d of %d Running locally, %d still on virtual nodes", running, replicas, elsewhere)
	})
}

func hasGate(p *corev1.Pod) bool {
	for _, g := range p.Spec.SchedulingGates {
		if g.Name == v1alpha1.SchedulingGateElection {
			return true
		}
	}
	return false
}

func hasDelegateFinalizer(p *corev1.Pod) bool {
	for _, f := range p.Finalizers {
		if f == v1alpha1.FinalizerDelegate {
			return true
		}
	}
	return false
}
