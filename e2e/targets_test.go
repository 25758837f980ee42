package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
	"github.com/fleetlet/fleetlet/pkg/sandbox"
)

// Disconnecting a target (`kubectl fleetlet disconnect`: its ClusterTarget
// deleted) drains it first: the proxies on its virtual node are evicted, a
// PodDisruptionBudget respected, their Deployment recreates them in the
// other target, and only once nothing of the source is left there do the
// ClusterTarget and its virtual node go. Before: the ClusterTarget went at
// once, its proxies were finalized without their delegates, and the
// delegates ran on in the target for good. The cluster is connected again
// at the end.
func TestDisconnectDrainsTheTarget(t *testing.T) {
	need(t)
	ns := enabledNamespace(t, "disconnect", sb.ClusterNames()[1:]...)
	ctx := context.Background()
	src := kube(t, sandbox.SourceCluster)
	const replicas = 6
	sel := deployment(t, ns, "leaver", replicas, notSource("leaver"))
	waitDeploymentRunning(t, ns, "leaver", replicas, 3*time.Minute)
	oneAtATime(t, ns, "leaver", replicas)
	node := busiest(t, ctx, ns, sel)
	gone := clusterOfNode(node)
	on := 0
	for _, p := range waitDeploymentRunning(t, ns, "leaver", replicas, time.Minute) {
		if p.Spec.NodeName == node {
			on++
		}
	}
	t.Cleanup(func() {
		assert.NoErrorf(t, sb.Connect(context.Background(), gone), "connecting %s again", gone)
	})

	start := time.Now()
	require.NoError(t, sb.Disconnect(ctx, gone, 3*time.Minute))
	t.Logf("disconnecting %s drained %d of %d replicas in %s", gone, on, replicas, time.Since(start).Round(100*time.Millisecond))

	err := ctrlClient(t, sandbox.SourceCluster).Get(ctx, client.ObjectKey{Name: gone}, &v1alpha1.ClusterTarget{})
	assert.Truef(t, apierrors.IsNotFound(err), "ClusterTarget %s after disconnect: %v, want NotFound", gone, err)
	_, err = src.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	assert.Truef(t, apierrors.IsNotFound(err), "virtual node %s after disconnect: %v, want NotFound", node, err)
	for _, p := range waitDeploymentRunning(t, ns, "leaver", replicas, 2*time.Minute) {
		assert.NotEqualf(t, node, p.Spec.NodeName, "proxy %s is still on %s", p.Name, node)
	}
	var left v1alpha1.PodChaperonList
	require.NoError(t, ctrlClient(t, gone).List(ctx, &left, client.InNamespace(ns)))
	if len(left.Items) > 0 || len(delegatesIn(t, ctx, gone, ns)) > 0 {
		assert.Failf(t, "objects left after disconnect", "left in %s after disconnect: %d PodChaperons, delegates %v", gone, len(left.Items), delegatesIn(t, ctx, gone, ns))
	}
}

// A target's kubeconfig Secret lost for a while (deleted, then restored)
// evicts and doubles nothing: lost credentials are fleetlet's side, not a
// partition, so the Target says KubeconfigSecretNotFound while its
// virtual node stays Ready (saying why no new pod goes there) and the
// StatefulSet's db-0 there keeps running, the same pod, with one delegate,
// before and after the Secret is back. Before: the node went NotReady, db-0
// was evicted after its toleration and kept Terminating while its delegate
// ran on (a Deployment's replicas were made again elsewhere: 15 delegates
// for 9 replicas).
func TestKubeconfigSecretLossDoublesNothing(t *testing.T) {
	need(t)
	ns := enabledNamespace(t, "secret-loss", sb.ClusterNames()[1:]...)
	ctx := context.Background()
	src := kube(t, sandbox.SourceCluster)
	lost := sb.ClusterNames()[2]
	watchOneCopy(t, ns)
	singleDB(t, ctx, ns, lost)
	var db0 *corev1.Pod
	eventually(t, 2*time.Minute, "db-0 Running in "+lost, func(ctx context.Context) (bool, string) {
		p, err := src.CoreV1().Pods(ns).Get(ctx, "db-0", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		db0 = p
		return p.Status.Phase == corev1.PodRunning && p.Spec.NodeName == "fleetlet-"+lost, string(p.Status.Phase) + " on " + p.Spec.NodeName
	})
	// Every delegate of a db-0 in any cluster, whichever proxy it stands for.
	dbDelegates := func(ctx context.Context) []string {
		var out []string
		for _, c := range sb.ClusterNames() {
			pods, err := kube(t, c).CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: v1alpha1.LabelParentCluster})
			require.NoError(t, err)
			for _, p := range pods.Items {
				if p.Annotations[v1alpha1.AnnotationParentName] == "db-0" && p.DeletionTimestamp == nil {
					out = append(out, c+"/"+p.Name)
				}
			}
		}
		return out
	}

	var ct v1alpha1.ClusterTarget
	cc := ctrlClient(t, sandbox.SourceCluster)
	require.NoError(t, cc.Get(ctx, client.ObjectKey{Name: lost}, &ct))
	ref := ct.Spec.KubeconfigSecret
	secret, err := src.CoreV1().Secrets(ref.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
	require.NoError(t, err)
	restore := func() {
		kept := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: secret.Namespace, Name: secret.Name, Labels: secret.Labels}, Type: secret.Type, Data: secret.Data}
		_, err := src.CoreV1().Secrets(ref.Namespace).Create(context.Background(), kept, metav1.CreateOptions{})
		assert.Falsef(t, err != nil && !apierrors.IsAlreadyExists(err), "restoring Secret %s/%s: %v", ref.Namespace, ref.Name, err)
	}
	restored := false
	t.Cleanup(func() {
		if !restored {
			restore()
		}
	})
	require.NoError(t, src.CoreV1().Secrets(ref.Namespace).Delete(ctx, ref.Name, metav1.DeleteOptions{}))
	lostAt := time.Now()
	eventually(t, time.Minute, lost+" NotReady, KubeconfigSecretNotFound", func(ctx context.Context) (bool, string) {
		if err := cc.Get(ctx, client.ObjectKey{Name: lost}, &ct); err != nil {
			return false, err.Error()
		}
		c := meta.FindStatusCondition(ct.Status.Conditions, v1alpha1.ConditionReady)
		return c != nil && c.Status == metav1.ConditionFalse && c.Reason == v1alpha1.ReasonKubeconfigSecretNotFound, fmt.Sprintf("%+v", c)
	})
	// The credentials are fleetlet's side: for longer than it takes the
	// node lifecycle controller to taint a NotReady node, the virtual node
	// stays Ready and untainted, saying why, and db-0 keeps running.
	node := "fleetlet-" + lost
	for time.Since(lostAt) < 30*time.Second {
		d := dbDelegates(ctx)
		require.Lenf(t, d, 1, "db-0 should run once, in %s: %v", lost, d)
		p, err := src.CoreV1().Pods(ns).Get(ctx, "db-0", metav1.GetOptions{})
		require.Falsef(t, err != nil || p.UID != db0.UID || p.DeletionTimestamp != nil, "db-0 evicted or replaced while only fleetlet's credentials were lost: %v %v", err, p)
		n, err := src.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		require.NoError(t, err)
		for _, c := range n.Status.Conditions {
			require.Falsef(t, c.Type == corev1.NodeReady && c.Status != corev1.ConditionTrue, "virtual node %s turned Ready=%s (%s: %s) for lost credentials", node, c.Status, c.Reason, c.Message)
		}
		for _, taint := range n.Spec.Taints {
			require.NotEqualf(t, corev1.TaintEffectNoExecute, taint.Effect, "virtual node %s got the NoExecute taint %s for lost credentials", node, taint.Key)
		}
		time.Sleep(2 * time.Second)
	}
	n, err := src.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	require.NoError(t, err)
	for _, c := range n.Status.Conditions {
		assert.Falsef(t, c.Type == corev1.NodeReady && (c.Reason != v1alpha1.ReasonKubeconfigSecretNotFound || !strings.Contains(c.Message, "no new pod")), "virtual node %s's Ready condition does not say why no new pod goes there: %s: %s", node, c.Reason, c.Message)
	}

	restore()
	restored = true
	eventually(t, time.Minute, lost+" Ready again", func(ctx context.Context) (bool, string) {
		if err := cc.Get(ctx, client.ObjectKey{Name: lost}, &ct); err != nil {
			return false, err.Error()
		}
		c := meta.FindStatusCondition(ct.Status.Conditions, v1alpha1.ConditionReady)
		return c != nil && c.Status == metav1.ConditionTrue, fmt.Sprintf("%+v", c)
	})
	p, err := src.CoreV1().Pods(ns).Get(ctx, "db-0", metav1.GetOptions{})
	require.Falsef(t, err != nil || p.UID != db0.UID || p.Status.Phase != corev1.PodRunning, "db-0 after the Secret is back: %v %v, want the first one still Running", err, p)
	d := dbDelegates(ctx)
	require.Lenf(t, d, 1, "db-0's delegates after the Secret is back: %v, want one", d)
}

// --secret-namespaces (chart manager.secretNamespaces): the manager
// watches and reads Secrets only in the listed namespaces and its own.
// The targets stay connected when their kubeconfig Secrets are there; a
// pod using a Secret of a listed namespace runs; one using a Secret of a
// namespace not listed gets Elected=False naming the setting, and nothing
// of it reaches a target.
func TestSecretNamespaces(t *testing.T) {
	need(t)
	ctx := context.Background()
	src := kube(t, sandbox.SourceCluster)
	listed := enabledNamespace(t, "secrets-in", sb.ClusterNames()[1:]...)
	unlisted := enabledNamespace(t, "secrets-out", sb.ClusterNames()[1:]...)
	cc := ctrlClient(t, sandbox.SourceCluster)
	var targets v1alpha1.ClusterTargetList
	require.NoError(t, cc.List(ctx, &targets))
	namespaces := []string{listed}
	for _, ct := range targets.Items {
		if ref := ct.Spec.KubeconfigSecret; ref != nil && !slices.Contains(namespaces, ref.Namespace) {
			namespaces = append(namespaces, ref.Namespace)
		}
	}
	restartManager(t, "--secret-namespaces="+strings.Join(namespaces, ","))
	t.Cleanup(func() { restoreManager(t) })

	usesSecret := func(ns string) *corev1.Pod {
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "creds", Namespace: ns}, StringData: map[string]string{"password": "x"}}
		_, err := src.CoreV1().Secrets(ns).Create(ctx, s, metav1.CreateOptions{})
		require.NoError(t, err)
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: ns,
			Annotations: map[string]string{v1alpha1.AnnotationClusterSelector: "topology.kubernetes.io/region in (cluster-2,cluster-3)"}},
			Spec: podSpec("10m")}
		p.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "PASSWORD", ValueFrom: &corev1.EnvVarSource{
			SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "creds"}, Key: "password"}}}}
		p, err = src.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
		require.NoError(t, err)
		return p
	}
	in, out := usesSecret(listed), usesSecret(unlisted)
	eventually(t, 2*time.Minute, "the pod whose Secret is in a listed namespace Running", func(ctx context.Context) (bool, string) {
		p, err := src.CoreV1().Pods(listed).Get(ctx, in.Name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return p.Status.Phase == corev1.PodRunning, string(p.Status.Phase)
	})
	eventually(t, time.Minute, "Elected=False naming --secret-namespaces on the other", func(ctx context.Context) (bool, string) {
		p, err := src.CoreV1().Pods(unlisted).Get(ctx, out.Name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		c := electedCondition(p)
		return c != nil && c.Status == corev1.ConditionFalse && strings.Contains(c.Message, "--secret-namespaces"), fmt.Sprintf("%+v", c)
	})
	for _, c := range sb.ClusterNames()[1:] {
		_, err := kube(t, c).CoreV1().Secrets(unlisted).Get(ctx, "creds", metav1.GetOptions{})
		assert.Truef(t, apierrors.IsNotFound(err), "the unlisted namespace's Secret in %s: %v, want NotFound", c, err)
	}
	// The manager started leading a moment ago: a target it has not
	// probed yet is Connecting, not refused.
	eventually(t, time.Minute, "every ClusterTarget Ready with its Secret's namespace listed", func(ctx context.Context) (bool, string) {
		if err := cc.List(ctx, &targets); err != nil {
			return false, err.Error()
		}
		for _, ct := range targets.Items {
			if c := meta.FindStatusCondition(ct.Status.Conditions, v1alpha1.ConditionReady); c == nil || c.Status != metav1.ConditionTrue {
				return false, fmt.Sprintf("ClusterTarget %s: %+v", ct.Name, c)
			}
		}
		return true, ""
	})
}
