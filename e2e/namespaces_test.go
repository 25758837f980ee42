package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
	"github.com/fleetlet/fleetlet/pkg/sandbox"
)

// onDemandPrefix is the namespace prefix the targets' ClusterSources let
// the source create in this scenario.
const onDemandPrefix = "ondemand-"

// Namespaces on demand: with spec.namespaces on its ClusterSource in a
// target, the source creates there the namespaces its pods need, labelled as
// its own and with the source's Pod Security labels and the keys it lists;
// without it (or for a name the policy does not allow), the target is
// filtered with the target's refusal as the reason. Once the source's
// namespace is deleted, the namespaces it created go, and only they: not one
// made by hand, not one that holds someone else's objects.
func TestNamespacesOnDemand(t *testing.T) {
	need(t)
	ctx := context.Background()
	remotes := sb.ClusterNames()[1:]
	for _, c := range remotes {
		setNamespacePolicy(t, c, &v1alpha1.NamespacePolicy{Prefixes: []string{onDemandPrefix}, Labels: []string{"team"}, Annotations: []string{"owner"}})
	}

	// A namespace made in the source only: a pod pinned to each target
	// runs, the remote namespaces created for it.
	a := sourceNamespace(t, onDemandPrefix+"a")
	for _, c := range sb.ClusterNames() {
		pinnedPod(t, a, "p-"+c, c)
	}
	waitBound(t, a, "app=ondemand", len(sb.ClusterNames()), 3*time.Minute)
	for _, c := range remotes {
		ns, err := kube(t, c).CoreV1().Namespaces().Get(ctx, a, metav1.GetOptions{})
		require.NoErrorf(t, err, "%s", c)
		want := map[string]string{v1alpha1.LabelCreatedBySource: sandbox.SourceCluster, podSecurityEnforce: "baseline", "team": "a"}
		for k, v := range want {
			assert.Equalf(t, v, ns.Labels[k], "%s: namespace %s label %s (labels %v)", c, a, k, ns.Labels)
		}
		assert.Falsef(t, ns.Labels[v1alpha1.LabelEnabled] != "" || ns.Annotations["owner"] != "team-a@example.com" || ns.Annotations["not-listed"] != "",
			"%s: namespace %s carries labels %v, annotations %v", c, a, ns.Labels, ns.Annotations)
	}

	// A name the policy does not allow: the target says so, per cluster.
	refused := sourceNamespace(t, "elsewhere-b")
	pinnedPod(t, refused, "p", remotes[0])
	waitElectedReason(t, refused, "p", "does not let its source create namespace "+refused)

	// The policy off in one target: refused by RBAC, said per cluster.
	setNamespacePolicy(t, remotes[1], nil)
	off := sourceNamespace(t, onDemandPrefix+"c")
	// `kubectl fleetlet status` says it before any pod: per namespace,
	// which targets take its pods and why the others do not.
	status := namespaceStatus(t)
	for ns, want := range map[string][]string{
		a:       {remotes[0], remotes[1], sandbox.SourceCluster + " (self)"},
		refused: {sandbox.SourceCluster + " (self)", remotes[0] + ": the namespace does not exist there, and this source may not create it", "does not let its source create namespace " + refused},
		off:     {sandbox.SourceCluster + " (self)", remotes[0] + " (namespace created for the first pod)", remotes[1] + ": the namespace does not exist there, and this source may not create it"},
	} {
		for _, w := range want {
			assert.Containsf(t, status[ns], w, "kubectl fleetlet status, namespace %s: %q lacks %q", ns, status[ns], w)
		}
	}
	pinnedPod(t, off, "p", remotes[1])
	waitElectedReason(t, off, "p", "this source may not create it")
	_, err := kube(t, remotes[1]).CoreV1().Namespaces().Get(ctx, off, metav1.GetOptions{})
	assert.Truef(t, apierrors.IsNotFound(err), "%s: namespace %s exists without a policy (%v)", remotes[1], off, err)
	setNamespacePolicy(t, remotes[1], &v1alpha1.NamespacePolicy{Prefixes: []string{onDemandPrefix}, Labels: []string{"team"}, Annotations: []string{"owner"}})

	// Deleting the source namespace: the created namespaces go, except
	// one that holds an object of the target's own; a namespace made by
	// hand stays.
	hand := sourceNamespace(t, onDemandPrefix+"d")
	mustCreateNamespace(t, remotes[0], hand, map[string]string{v1alpha1.SourceLabelPrefix + sandbox.SourceCluster: "true"})
	pinnedPod(t, hand, "p", remotes[0])
	pinnedPod(t, hand, "q", remotes[1])
	waitBound(t, hand, "app=ondemand", 2, 3*time.Minute)
	held := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: a, Name: "the-targets-own"}}
	_, err = kube(t, remotes[1]).CoreV1().ConfigMaps(a).Create(ctx, held, metav1.CreateOptions{})
	require.NoError(t, err)
	src := kube(t, sandbox.SourceCluster)
	for _, ns := range []string{a, hand} {
		require.NoError(t, src.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{}))
	}
	took := eventually(t, 5*time.Minute, "the namespaces fleetlet created to be gone", func(ctx context.Context) (bool, string) {
		var left []string
		for _, c := range []struct{ cluster, ns string }{{remotes[0], a}, {remotes[1], hand}} {
			if _, err := kube(t, c.cluster).CoreV1().Namespaces().Get(ctx, c.ns, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				left = append(left, fmt.Sprintf("%s/%s (%v)", c.cluster, c.ns, err))
			}
		}
		return len(left) == 0, "left: " + strings.Join(left, ", ")
	})
	t.Logf("created namespaces deleted %s after their source namespaces", took.Round(time.Second))
	for _, c := range []struct{ cluster, ns, why string }{{remotes[0], hand, "made by hand"}, {remotes[1], a, "holds the target's own ConfigMap"}} {
		ns, err := kube(t, c.cluster).CoreV1().Namespaces().Get(ctx, c.ns, metav1.GetOptions{})
		assert.Falsef(t, err != nil || ns.DeletionTimestamp != nil, "%s: namespace %s (%s) was deleted: %v", c.cluster, c.ns, c.why, err)
	}
}

// setNamespacePolicy sets (nil: removes) spec.namespaces of the source's
// ClusterSource in cluster, and restores the ClusterSource's spec at the
// end of the test.
func setNamespacePolicy(t *testing.T, cluster string, policy *v1alpha1.NamespacePolicy) {
	t.Helper()
	ctx := context.Background()
	c := ctrlClient(t, cluster)
	var cs v1alpha1.ClusterSource
	require.NoError(t, c.Get(ctx, client.ObjectKey{Name: sandbox.SourceCluster}, &cs))
	orig := cs.DeepCopy()
	cs.Spec.Namespaces = policy
	require.NoError(t, c.Patch(ctx, &cs, client.MergeFrom(orig)))
	t.Cleanup(func() {
		var now v1alpha1.ClusterSource
		if err := c.Get(context.Background(), client.ObjectKey{Name: sandbox.SourceCluster}, &now); err == nil && now.Spec.Namespaces != nil {
			before := now.DeepCopy()
			now.Spec.Namespaces = nil
			_ = c.Patch(context.Background(), &now, client.MergeFrom(before))
		}
	})
	// The ClusterSource controller binds or unbinds the source: wait for
	// its status to say it saw this generation.
	eventually(t, time.Minute, "ClusterSource "+sandbox.SourceCluster+" reconciled in "+cluster, func(ctx context.Context) (bool, string) {
		var got v1alpha1.ClusterSource
		if err := c.Get(ctx, client.ObjectKey{Name: sandbox.SourceCluster}, &got); err != nil {
			return false, err.Error()
		}
		return got.Status.ObservedGeneration == got.Generation, fmt.Sprintf("generation %d, observed %d", got.Generation, got.Status.ObservedGeneration)
	})
}

// sourceNamespace creates an enabled namespace in the source only, with a
// label and an annotation it asks to carry to the targets, and one it does
// not; it is deleted at the end of the test, in every cluster.
func sourceNamespace(t *testing.T, prefix string) string {
	t.Helper()
	name := fmt.Sprintf("%s-%d", prefix, time.Now().UnixNano()%1_000_000)
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
		Name: name,
		Labels: map[string]string{
			v1alpha1.LabelEnabled: "true", v1alpha1.SourceLabelPrefix + sandbox.SourceCluster: "true",
			podSecurityEnforce: "baseline", "team": "a",
		},
		Annotations: map[string]string{
			v1alpha1.AnnotationTargetLabels: "team", v1alpha1.AnnotationTargetAnnotations: "owner",
			"owner": "team-a@example.com", "not-listed": "x",
		},
	}}
	_, err := kube(t, sandbox.SourceCluster).CoreV1().Namespaces().Create(context.Background(), ns, metav1.CreateOptions{})
	require.NoError(t, err)
	t.Cleanup(func() {
		for _, c := range sb.ClusterNames() {
			_ = kube(t, c).CoreV1().Namespaces().Delete(context.Background(), name, metav1.DeleteOptions{})
		}
	})
	return name
}

func mustCreateNamespace(t *testing.T, cluster, name string, labels map[string]string) {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
	_, err := kube(t, cluster).CoreV1().Namespaces().Create(context.Background(), ns, metav1.CreateOptions{})
	require.NoError(t, err)
}

// pinnedPod creates a pod that only cluster can run.
func pinnedPod(t *testing.T, ns, name, cluster string) {
	t.Helper()
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{"app": "ondemand"}},
		Spec:       podSpec("10m"),
	}
	p.Spec.NodeSelector = map[string]string{v1alpha1.LabelCluster: cluster}
	_, err := kube(t, sandbox.SourceCluster).CoreV1().Pods(ns).Create(context.Background(), p, metav1.CreateOptions{})
	require.NoError(t, err)
}

// waitElectedReason waits until the proxy's Elected condition is False and
// its message says want.
func waitElectedReason(t *testing.T, ns, name, want string) {
	t.Helper()
	eventually(t, 2*time.Minute, fmt.Sprintf("proxy %s/%s not elected, saying %q", ns, name, want), func(ctx context.Context) (bool, string) {
		p, err := kube(t, sandbox.SourceCluster).CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		c := electedCondition(p)
		if c == nil {
			return false, "no Elected condition"
		}
		return c.Status == corev1.ConditionFalse && strings.Contains(c.Message, want), fmt.Sprintf("Elected=%s: %s", c.Status, c.Message)
	})
}

// namespaceStatus runs `kubectl fleetlet status` on the source and returns
// its namespace table's line for each namespace.
func namespaceStatus(t *testing.T) map[string]string {
	t.Helper()
	plugin := filepath.Join(sb.BinDir(), "kubectl-fleetlet")
	kubeconfig := filepath.Join(sb.Dir(), sandbox.MergedKubeconfig)
	out, err := runCmd(plugin, "status", "--kubeconfig", kubeconfig, "--context", sandbox.SourceCluster)
	require.NoErrorf(t, err, "kubectl fleetlet status\n%s", out)
	t.Logf("kubectl fleetlet status:\n%s", out)
	lines := map[string]string{}
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) > 0 {
			lines[f[0]] = l
		}
	}
	return lines
}
