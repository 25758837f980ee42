package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fleetlet/fleetlet/pkg/sandbox"
	"github.com/fleetlet/fleetlet/pkg/source/webhook"
)

// TestSealKeyLossFailsClosed: with the seal key Secret gone, fleetlet makes
// no new key (replicas would disagree): new pods in an enabled namespace
// are refused with the reason, running ones stay; with the Secret back,
// pods are admitted and elected again.
func TestSealKeyLossFailsClosed(t *testing.T) {
	need(t)
	ctx := context.Background()
	src := kube(t, sandbox.SourceCluster)
	ns := enabledNamespace(t, "sealkey", sb.ClusterNames()[1:]...)
	sel := deployment(t, ns, "before", 2)
	running := waitBound(t, ns, sel, 2, 2*time.Minute)

	secrets := src.CoreV1().Secrets(sandbox.FleetletNamespace)
	saved, err := secrets.Get(ctx, webhook.DefaultSealKeySecretName, metav1.GetOptions{})
	require.NoError(t, err)
	restore := func() {
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: saved.Name, Namespace: saved.Namespace, Labels: saved.Labels, Annotations: saved.Annotations},
			Type: saved.Type, Data: saved.Data}
		_, err := secrets.Create(context.Background(), s, metav1.CreateOptions{})
		assert.Falsef(t, err != nil && !apierrors.IsAlreadyExists(err), "restoring the seal key: %v", err)
	}
	t.Cleanup(restore)
	require.NoError(t, secrets.Delete(ctx, saved.Name, metav1.DeleteOptions{}))

	pod := func(name string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{"app": "after"}}, Spec: podSpec("100m")}
	}
	eventually(t, time.Minute, "a new pod to be refused for the missing seal key", func(ctx context.Context) (bool, string) {
		_, err := src.CoreV1().Pods(ns).Create(ctx, pod("refused"), metav1.CreateOptions{})
		if err == nil {
			_ = src.CoreV1().Pods(ns).Delete(ctx, "refused", metav1.DeleteOptions{})
			return false, "admitted"
		}
		return strings.Contains(err.Error(), "seal key Secret "+sandbox.FleetletNamespace+"/"+webhook.DefaultSealKeySecretName+" is missing"), err.Error()
	})
	_, err = secrets.Get(ctx, saved.Name, metav1.GetOptions{})
	assert.Truef(t, apierrors.IsNotFound(err), "fleetlet made a seal key Secret of its own: %v", err)
	for _, p := range running {
		got, err := src.CoreV1().Pods(ns).Get(ctx, p.Name, metav1.GetOptions{})
		assert.Falsef(t, err != nil || got.DeletionTimestamp != nil || got.Spec.NodeName != p.Spec.NodeName, "running proxy %s harmed by the missing key: %v", p.Name, err)
	}

	restore()
	eventually(t, time.Minute, "a new pod to be admitted with the key back", func(ctx context.Context) (bool, string) {
		_, err := src.CoreV1().Pods(ns).Create(ctx, pod("admitted"), metav1.CreateOptions{})
		return err == nil || apierrors.IsAlreadyExists(err), fmt.Sprint(err)
	})
	waitBound(t, ns, "app=after", 1, 2*time.Minute)
}
