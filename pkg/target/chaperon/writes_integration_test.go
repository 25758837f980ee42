package chaperon

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
	"github.com/fleetlet/fleetlet/pkg/testenv"
)

// A status write computed from a chaperon read before someone else changed
// its metadata (the candidate scheduler's reservation, the source's marks:
// for most candidates both land within milliseconds of the pod's creation)
// is not refused; only a change of the status's records refuses it. Before,
// the write was locked on the chaperon's resourceVersion, and about one
// status write in three conflicted: a 409, a read from the API server, and
// the write again.
func TestStatusWriteIgnoresMetadataChanges(t *testing.T) {
	testenv.Need(t, env)
	ctx := t.Context()
	_, ch := createdChaperon(t, "web-5f6a7b8c")
	r := &PodChaperonReconciler{Client: k8sClient}
	r.defaults()
	probe := func(reason string) *metav1.Condition {
		return &metav1.Condition{Type: "test.fleetlet.io/Probe", Status: metav1.ConditionTrue, Reason: reason, Message: "written by the test"}
	}

	read := getChaperon(t, ch) // what the cache shows
	patchChaperon(t, ch, func(c *v1alpha1.PodChaperon) { c.Annotations[v1alpha1.AnnotationReserved] = "node-1" })
	require.NoError(t, r.writeStatus(ctx, read, outcome{cond: probe("First")}),
		"a status write refused for a change of the chaperon's annotations")
	got := getChaperon(t, ch)
	assert.Equal(t, "node-1", got.Annotations[v1alpha1.AnnotationReserved], "the reservation, after the status write")
	require.NotNil(t, meta.FindStatusCondition(got.Status.Conditions, "test.fleetlet.io/Probe"), "the status written")
	assert.True(t, meta.IsStatusConditionTrue(got.Status.Conditions, v1alpha1.ConditionPodCreated), "the creation record kept")

	// The same stale read again: the status's conditions are no longer
	// those it holds, so the write is refused, and the record stands.
	err := r.writeStatus(ctx, read, outcome{cond: probe("Second")})
	require.ErrorIs(t, err, errStatusMoved, "a write from a status older than the API server's")
	got = getChaperon(t, ch)
	assert.Equal(t, "First", meta.FindStatusCondition(got.Status.Conditions, "test.fleetlet.io/Probe").Reason, "the probe condition after a refused write")

	t.Run("a status never written: tested absent", func(t *testing.T) {
		// The API server drops status on create; a status set to null is
		// the same state.
		require.NoError(t, k8sClient.Status().Patch(ctx, getChaperon(t, ch), client.RawPatch(types.MergePatchType, []byte(`{"status":null}`))))
		empty := getChaperon(t, ch)
		require.Empty(t, empty.Status.Conditions, "status after clearing it")
		require.NoError(t, r.writeStatus(ctx, empty, outcome{cond: probe("Third")}), "the first status write")
		require.ErrorIs(t, r.writeStatus(ctx, empty, outcome{cond: probe("Fourth")}), errStatusMoved, "a second write from the chaperon without status")
		assert.Equal(t, "Third", meta.FindStatusCondition(getChaperon(t, ch).Status.Conditions, "test.fleetlet.io/Probe").Reason, "the probe condition")
	})
}

// An elected chaperon carries fleetlet's delegate-pod finalizer (the
// source's mark adds it) and is deleted without propagation: this
// controller deletes its pod and lets the chaperon go once the pod is gone,
// with no garbage collector (there is none here). Before, the source
// deleted it Foreground, and the target's garbage collector spent about 8.5
// requests on each delegate doing the same.
func TestElectedChaperonGoesAfterItsPod(t *testing.T) {
	testenv.Need(t, env)
	ctx := t.Context()
	_, ch := createdChaperon(t, "db-9e8d7c6b")
	const hold = "test.fleetlet.io/hold"
	var pod corev1.Pod
	require.NoError(t, k8sClient.Get(ctx, client.ObjectKeyFromObject(ch), &pod))
	require.NoError(t, k8sClient.Patch(ctx, &pod, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":["`+hold+`"]}}`))))
	t.Cleanup(func() {
		_ = k8sClient.Patch(context.Background(), &pod, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`)))
		_ = k8sClient.Patch(context.Background(), ch, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`)))
	})
	patchChaperon(t, ch, func(c *v1alpha1.PodChaperon) { c.Finalizers = append(c.Finalizers, v1alpha1.FinalizerDelegatePod) })

	require.NoError(t, k8sClient.Delete(ctx, ch, client.PropagationPolicy(metav1.DeletePropagationBackground)))
	testenv.Eventually(t, waitTimeout, "the pod of the deleted chaperon deleted", func() error {
		if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(&pod), &pod); err != nil {
			return err
		}
		if pod.DeletionTimestamp == nil {
			return errors.New("not deleted")
		}
		return nil
	})
	// The pod's status moves while it is Terminating (a kubelet stopping
	// its containers): a chaperon being deleted is not written for it.
	// Before, every delegate's deletion cost its target a status write.
	before := getChaperon(t, ch)
	pod.Status.Conditions = append(pod.Status.Conditions, corev1.PodCondition{Type: "test.fleetlet.io/Stopping", Status: corev1.ConditionTrue})
	require.NoError(t, k8sClient.Status().Update(ctx, &pod))
	time.Sleep(time.Second) // the passes its deletion and its status bring
	got := getChaperon(t, ch)
	assert.Contains(t, got.Finalizers, v1alpha1.FinalizerDelegatePod, "the chaperon of a pod still Terminating")
	assert.Equal(t, before.Status, got.Status, "the status of a chaperon being deleted, after its pod's status moved")

	require.NoError(t, k8sClient.Patch(ctx, &pod, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`))))
	testenv.Eventually(t, waitTimeout, "the chaperon gone after its pod", func() error {
		err := k8sClient.Get(ctx, client.ObjectKeyFromObject(ch), &v1alpha1.PodChaperon{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err == nil {
			return errors.New("still there")
		}
		return err
	})
}
