package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
	"github.com/fleetlet/fleetlet/pkg/naming"
	"github.com/fleetlet/fleetlet/pkg/sandbox"
)

// secondSource admits a second source, name, in cluster, for the
// namespaces labelled for it (a ClusterSource, as kubectl fleetlet connect
// makes one), and returns a client with that source's identity there, once
// it may act in ns.
func secondSource(t *testing.T, cluster, name, ns string) kubernetes.Interface {
	t.Helper()
	ctx := context.Background()
	cc := ctrlClient(t, cluster)
	cs := &v1alpha1.ClusterSource{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1alpha1.ClusterSourceSpec{ServiceAccountNamespace: sandbox.FleetletNamespace}}
	err := cc.Create(ctx, cs)
	require.Falsef(t, err != nil && !apierrors.IsAlreadyExists(err), "%v", err)
	t.Cleanup(func() { _ = cc.Delete(context.Background(), cs) })
	sa := v1alpha1.SourceServiceAccountPrefix + name
	var token *authenticationv1.TokenRequest
	eventually(t, time.Minute, "a token of source "+name+"'s ServiceAccount in "+cluster, func(ctx context.Context) (bool, string) {
		var err error
		token, err = kube(t, cluster).CoreV1().ServiceAccounts(sandbox.FleetletNamespace).CreateToken(ctx, sa,
			&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}}, metav1.CreateOptions{})
		return err == nil, fmt.Sprint(err)
	})
	admin, err := sb.RESTConfig(cluster)
	require.NoError(t, err)
	cfg := rest.AnonymousClientConfig(admin)
	cfg.BearerToken = token.Status.Token
	c, err := kubernetes.NewForConfig(cfg)
	require.NoError(t, err)
	eventually(t, time.Minute, "source "+name+" admitted in namespace "+ns+" of "+cluster, func(ctx context.Context) (bool, string) {
		_, err := c.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		return err == nil, fmt.Sprint(err)
	})
	return c
}

// Two sources share a namespace of cluster-3: cluster-1 and a second
// source, tenant-b. While cluster-3's fleetlet manager is down (an
// upgrade), cluster-1's proxy gets its chaperon there but no pod; tenant-b,
// with its own credentials, cannot create a pod that claims to be
// cluster-1's (the fleetlet-delegate-pods policy), and the pod it may
// create under the chaperon's name, naming the chaperon as its controller,
// is not adopted once the manager is back: the chaperon says the name is
// taken, the proxy is not bound to cluster-3 and shows nothing of the
// impostor. Once the impostor is gone, the real delegate is made. Before:
// the impostor was adopted, and cluster-1's proxy ran on its virtual node
// with the impostor's image and IP.
func TestAnotherSourceCannotPoseAsADelegate(t *testing.T) {
	need(t)
	ctx := context.Background()
	const other, target = "tenant-b", "cluster-3"
	ns := enabledNamespace(t, "shared", target)
	labelNamespace(t, target, ns, "source.multicluster.fleetlet.io/"+other)
	tenantB := secondSource(t, target, other, ns)

	require.NoError(t, sb.StopComponent(ctx, target, sandbox.ComponentManager))
	restarted := false
	restart := func() {
		if !restarted {
			restarted = true
			assert.NoError(t, sb.StartComponent(context.Background(), target, sandbox.ComponentManager))
		}
	}
	t.Cleanup(restart)

	victim := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "victim", Namespace: ns,
		Annotations: map[string]string{v1alpha1.AnnotationClusterSelector: "topology.kubernetes.io/region=" + target}}, Spec: podSpec("100m")}
	victim, err := kube(t, sandbox.SourceCluster).CoreV1().Pods(ns).Create(ctx, victim, metav1.CreateOptions{})
	require.NoError(t, err)
	name := naming.RemoteName(victim.Name, victim.UID)
	var pc v1alpha1.PodChaperon
	eventually(t, time.Minute, "the victim's chaperon in "+target, func(ctx context.Context) (bool, string) {
		err := ctrlClient(t, target).Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &pc)
		if err == nil {
			return true, ""
		}
		// Why not, as the source says it.
		p, perr := kube(t, sandbox.SourceCluster).CoreV1().Pods(ns).Get(ctx, victim.Name, metav1.GetOptions{})
		if perr != nil {
			return false, fmt.Sprintf("%v; the proxy: %v", err, perr)
		}
		return false, fmt.Sprintf("%v; the proxy's Elected condition: %+v", err, electedCondition(p))
	})
	impostor := func(parent string) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns,
				Labels:          map[string]string{v1alpha1.LabelParentCluster: parent, v1alpha1.LabelParentUID: string(victim.UID)},
				OwnerReferences: []metav1.OwnerReference{{APIVersion: v1alpha1.GroupVersion.String(), Kind: "PodChaperon", Name: pc.Name, UID: pc.UID, Controller: ptr.To(true)}}},
			Spec: corev1.PodSpec{SchedulerName: v1alpha1.SchedulerNameCandidate, Containers: []corev1.Container{{Name: "main", Image: "registry.example/impostor:1"}}},
		}
	}
	_, err = tenantB.CoreV1().Pods(ns).Create(ctx, impostor(sandbox.SourceCluster), metav1.CreateOptions{})
	require.ErrorContainsf(t, err, "must be '"+other+"'", "%s creating a pod that claims to be %s's delegate: %v, want the fleetlet-delegate-pods policy's refusal", other, sandbox.SourceCluster, err)
	_, err = tenantB.CoreV1().Pods(ns).Create(ctx, impostor(other), metav1.CreateOptions{})
	require.NoError(t, err)
	restart()

	eventually(t, 2*time.Minute, "the chaperon refusing the impostor", func(ctx context.Context) (bool, string) {
		if err := ctrlClient(t, target).Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &pc); err != nil {
			return false, err.Error()
		}
		for _, c := range pc.Status.Conditions {
			if c.Type == v1alpha1.ConditionPodCreated {
				return c.Status == metav1.ConditionFalse, c.Reason + ": " + c.Message
			}
		}
		return false, "no PodCreated condition"
	})
	// For a while: the proxy is not bound to cluster-3, and shows
	// nothing of the impostor.
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(time.Second) {
		p, err := kube(t, sandbox.SourceCluster).CoreV1().Pods(ns).Get(ctx, victim.Name, metav1.GetOptions{})
		require.NoError(t, err)
		require.Falsef(t, p.Spec.NodeName != "" || p.Status.Phase == corev1.PodRunning || p.Status.PodIP != "", "the proxy took the impostor for its delegate: node %q phase %s IP %q", p.Spec.NodeName, p.Status.Phase, p.Status.PodIP)
	}
	require.NoError(t, kube(t, target).CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}))
	eventually(t, 2*time.Minute, "the victim Running on its real delegate", func(ctx context.Context) (bool, string) {
		p, err := kube(t, sandbox.SourceCluster).CoreV1().Pods(ns).Get(ctx, victim.Name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		d, err := kube(t, target).CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		real := d.Labels[v1alpha1.LabelParentCluster] == sandbox.SourceCluster && d.Spec.Containers[0].Image == victim.Spec.Containers[0].Image
		return real && p.Status.Phase == corev1.PodRunning && p.Spec.NodeName == "fleetlet-"+target, fmt.Sprintf("proxy %s on %q; delegate of %s, image %s", p.Status.Phase, p.Spec.NodeName, d.Labels[v1alpha1.LabelParentCluster], d.Spec.Containers[0].Image)
	})
}
