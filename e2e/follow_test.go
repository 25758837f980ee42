package e2e

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
	"github.com/fleetlet/fleetlet/pkg/sandbox"
)

// copiesIn lists the copies this source holds in a cluster's namespace, as
// "Kind/name".
func copiesIn(t *testing.T, ctx context.Context, cluster, ns string) []string {
	t.Helper()
	cs := kube(t, cluster)
	sel := metav1.ListOptions{LabelSelector: v1alpha1.LabelParentCluster + "=" + sandbox.SourceCluster}
	var out []string
	cms, err := cs.CoreV1().ConfigMaps(ns).List(ctx, sel)
	require.NoError(t, err)
	for _, o := range cms.Items {
		out = append(out, "ConfigMap/"+o.Name)
	}
	secrets, err := cs.CoreV1().Secrets(ns).List(ctx, sel)
	require.NoError(t, err)
	for _, o := range secrets.Items {
		out = append(out, "Secret/"+o.Name)
	}
	sas, err := cs.CoreV1().ServiceAccounts(ns).List(ctx, sel)
	require.NoError(t, err)
	for _, o := range sas.Items {
		out = append(out, "ServiceAccount/"+o.Name)
	}
	sort.Strings(out)
	return out
}

// A Deployment mounting a ConfigMap and a Secret and running as its own
// ServiceAccount runs in every target it spreads to, with the copies there;
// a ConfigMap change reaches every copy; scaling to 0 removes the copies.
func TestFollowConfigMapSecretServiceAccount(t *testing.T) {
	need(t)
	ns := enabledNamespace(t, "follow", sb.ClusterNames()[1:]...)
	ctx := context.Background()
	src := kube(t, sandbox.SourceCluster)
	_, err := src.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "app-config"}, Data: map[string]string{"mode": "blue"}}, metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = src.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "app-secret"}, StringData: map[string]string{"password": "s3cret"}}, metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = src.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "app-sa"}}, metav1.CreateOptions{})
	require.NoError(t, err)
	deployment(t, ns, "app", 6, notSource("app"), func(d *appsv1.Deployment) {
		s := &d.Spec.Template.Spec
		s.ServiceAccountName = "app-sa"
		s.Volumes = []corev1.Volume{{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "app-config"}}}}}
		s.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "config", MountPath: "/etc/app"}}
		s.Containers[0].Env = []corev1.EnvVar{{Name: "PASSWORD", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: "app-secret"}, Key: "password"}}}}
	})
	proxies := waitDeploymentRunning(t, ns, "app", 6, 3*time.Minute)
	used := map[string]bool{}
	for _, p := range proxies {
		used[clusterOfNode(p.Spec.NodeName)] = true
	}
	want := []string{"ConfigMap/app-config", "Secret/app-secret", "ServiceAccount/app-sa"}
	for c := range used {
		got := copiesIn(t, ctx, c, ns)
		assert.Equalf(t, strings.Join(want, ","), strings.Join(got, ","), "copies in %s", c)
		// Each delegate runs as the copied ServiceAccount, in its target.
		for _, p := range proxies {
			if clusterOfNode(p.Spec.NodeName) != c {
				continue
			}
			d := delegatesOf(t, ctx, &p)[c]
			assert.Falsef(t, len(d) != 1 || d[0].Spec.ServiceAccountName != "app-sa", "delegate of %s in %s: %v", p.Name, c, names(map[string][]corev1.Pod{c: d}))
		}
	}
	t.Logf("replicas in %v", used)

	// A change in the source reaches every copy.
	changed := time.Now()
	_, err = src.CoreV1().ConfigMaps(ns).Patch(ctx, "app-config", types.MergePatchType, []byte(`{"data":{"mode":"green"}}`), metav1.PatchOptions{})
	require.NoError(t, err)
	took := eventually(t, time.Minute, "the ConfigMap change in every copy", func(ctx context.Context) (bool, string) {
		for c := range used {
			cm, err := kube(t, c).CoreV1().ConfigMaps(ns).Get(ctx, "app-config", metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			if cm.Data["mode"] != "green" {
				return false, c + " still has " + cm.Data["mode"]
			}
		}
		return true, ""
	})
	t.Logf("a ConfigMap change reached every copy in %s (measured from the patch: %s)", took.Round(time.Millisecond), time.Since(changed).Round(time.Millisecond))

	// Scaling to 0 removes every copy.
	_, err = src.AppsV1().Deployments(ns).Patch(ctx, "app", types.MergePatchType, []byte(`{"spec":{"replicas":0}}`), metav1.PatchOptions{})
	require.NoError(t, err)
	eventually(t, 2*time.Minute, "no copy left in any target", func(ctx context.Context) (bool, string) {
		var left []string
		for _, c := range sb.ClusterNames()[1:] {
			for _, o := range copiesIn(t, ctx, c, ns) {
				left = append(left, c+": "+o)
			}
		}
		return len(left) == 0, fmt.Sprint(left)
	})
	// The source's own objects are untouched.
	_, err = src.CoreV1().ConfigMaps(ns).Get(ctx, "app-config", metav1.GetOptions{})
	assert.NoError(t, err, "the source's ConfigMap")
}

// A pod that asks to take along a cluster-scoped kind, or a kind outside the
// allow-list, is refused with an Event and the Elected condition, and
// nothing is created for it anywhere.
func TestFollowRefusals(t *testing.T) {
	need(t)
	ns := enabledNamespace(t, "follow-refused", sb.ClusterNames()[1:]...)
	ctx := context.Background()
	src := kube(t, sandbox.SourceCluster)
	for name, follow := range map[string]string{"clusterrole": "clusterrole/admin", "pvc": "persistentvolumeclaim/data"} {
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Annotations: map[string]string{v1alpha1.AnnotationFollow: follow}},
			Spec:       podSpec("100m"),
		}
		_, err := src.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
		require.NoError(t, err)
		eventually(t, time.Minute, name+" refused with the reason", func(ctx context.Context) (bool, string) {
			p, err := src.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			c := electedCondition(p)
			if c == nil || c.Status != corev1.ConditionFalse {
				return false, fmt.Sprintf("%+v", c)
			}
			kind := strings.Split(follow, "/")[0]
			return strings.Contains(strings.ToLower(c.Message), kind), c.Message
		})
		eventually(t, 30*time.Second, name+": a FollowRefused Event", func(ctx context.Context) (bool, string) {
			evs, err := src.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + name})
			if err != nil {
				return false, err.Error()
			}
			for _, e := range evs.Items {
				if e.Reason == "FollowRefused" {
					return true, ""
				}
			}
			return false, fmt.Sprintf("%d events", len(evs.Items))
		})
		p, err := src.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		require.NoError(t, err)
		assert.Falsef(t, len(p.Spec.SchedulingGates) == 0 || p.Spec.NodeName != "", "%s was let through: gates %v, node %q", name, p.Spec.SchedulingGates, p.Spec.NodeName)
	}
	assert.Empty(t, remoteLeftovers(t, ctx, ns), "refused pods left objects in targets")
	for _, c := range sb.ClusterNames()[1:] {
		assert.Emptyf(t, copiesIn(t, ctx, c, ns), "copies in %s for refused pods", c)
	}
}

// A ConfigMap of the same name that fleetlet did not create in a target is
// left untouched, and that target is skipped for the pod.
func TestFollowNameClashSkipsTheTarget(t *testing.T) {
	need(t)
	ns := enabledNamespace(t, "follow-clash", sb.ClusterNames()[1:]...)
	ctx := context.Background()
	src := kube(t, sandbox.SourceCluster)
	_, err := src.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "settings"}, Data: map[string]string{"k": "source"}}, metav1.CreateOptions{})
	require.NoError(t, err)
	theirs, err := kube(t, "cluster-2").CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "settings"}, Data: map[string]string{"k": "theirs"}}, metav1.CreateOptions{})
	require.NoError(t, err)
	deployment(t, ns, "app", 4, notSource("app"), func(d *appsv1.Deployment) {
		s := &d.Spec.Template.Spec
		s.Containers[0].EnvFrom = []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "settings"}}}}
	})
	proxies := waitDeploymentRunning(t, ns, "app", 4, 3*time.Minute)
	for _, p := range proxies {
		assert.Equalf(t, "fleetlet-cluster-3", p.Spec.NodeName, "proxy %s's node: the clashing target was not skipped", p.Name)
	}
	got, err := kube(t, "cluster-2").CoreV1().ConfigMaps(ns).Get(ctx, "settings", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Falsef(t, got.ResourceVersion != theirs.ResourceVersion || got.Data["k"] != "theirs", "the target's own ConfigMap was changed: %+v", got)
	cm, err := kube(t, "cluster-3").CoreV1().ConfigMaps(ns).Get(ctx, "settings", metav1.GetOptions{})
	assert.Falsef(t, err != nil || cm.Data["k"] != "source", "copy in cluster-3: %v %+v", err, cm)
}
