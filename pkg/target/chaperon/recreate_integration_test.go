package chaperon

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
	"github.com/fleetlet/fleetlet/pkg/testenv"
)

// While a source's heartbeat Lease is expired, its elected Always-delegate
// that is deleted comes back, after the delay, as the same pod name held by
// the same chaperon; a candidate never elected does not, nor does a
// delegate of a source whose heartbeat is fresh; and once the source
// renews its heartbeat there is still exactly one delegate, which is not
// created again when deleted.
func TestDelegateRecreatedWhileSourceUnreachable(t *testing.T) {
	testenv.Need(t, env)
	ctx := t.Context()
	ns := newNamespace(t, nil)

	// cluster-r is unreachable: it last renewed its heartbeat an hour ago.
	// cluster-f is reachable: it renewed it just now, for an hour.
	for _, src := range []string{"cluster-r", "cluster-f"} {
		sa := provisionSource(t, ns, src)
		grantPodCreate(t, ns, types.NamespacedName{Namespace: ns, Name: sa})
	}
	unreachable := heartbeatLease(ns, "cluster-r", time.Now().Add(-time.Hour), 40*time.Second)
	create(t, unreachable)
	create(t, heartbeatLease(ns, "cluster-f", time.Now(), time.Hour))

	delegate := makeChaperon(ns, "web-0a1b2c3d").label(v1alpha1.LabelParentCluster, "cluster-r").
		restartPolicy(corev1.RestartPolicyAlways).obj()
	candidate := makeChaperon(ns, "cand-0a1b2c3d").label(v1alpha1.LabelParentCluster, "cluster-r").
		restartPolicy(corev1.RestartPolicyAlways).obj()
	onFailure := makeChaperon(ns, "job-0a1b2c3d").label(v1alpha1.LabelParentCluster, "cluster-r").
		restartPolicy(corev1.RestartPolicyOnFailure).obj()
	reachable := makeChaperon(ns, "api-0a1b2c3d").label(v1alpha1.LabelParentCluster, "cluster-f").
		restartPolicy(corev1.RestartPolicyAlways).obj()
	all := []*v1alpha1.PodChaperon{delegate, candidate, onFailure, reachable}
	firstUID := map[string]types.UID{}
	for _, ch := range all {
		create(t, ch)
	}
	for _, ch := range all {
		recorded(t, ch)
		if ch != candidate {
			// Elected once its pod exists, as a source marks a candidate.
			patchChaperon(t, ch, func(c *v1alpha1.PodChaperon) { c.Annotations[v1alpha1.AnnotationElected] = "true" })
		}
		firstUID[ch.Name] = deletePod(t, ch)
	}
	deletedBy := time.Now()

	// The delegate of the unreachable source comes back, after the delay.
	got := waitCondition(t, delegate, metav1.ConditionTrue, ReasonDelegateRecreated)
	msg := podCreated(got).Message
	assert.Containsf(t, msg, ns+"/fleetlet-source-cluster-r", "DelegateRecreated message %q does not name the heartbeat Lease", msg)
	var pod corev1.Pod
	require.NoError(t, k8sClient.Get(ctx, client.ObjectKeyFromObject(delegate), &pod))
	require.Falsef(t, pod.UID == firstUID[delegate.Name], "pod %s has the deleted pod's uid %s", pod.Name, pod.UID)
	assert.Truef(t, metav1.IsControlledBy(&pod, got), "recreated pod owners %v, want the chaperon %s", pod.OwnerReferences, got.UID)
	// The deletion was seen no earlier than the second it began, and the
	// pod was created at least the delay after that.
	earliest := deletedBy.Add(-time.Second).Truncate(time.Second).Add(testRecreateDelay)
	assert.Falsef(t, pod.CreationTimestamp.Before(&metav1.Time{Time: earliest}),
		"pod created again at %s, before the delay had passed (deleted by %s, delay %s)",
		pod.CreationTimestamp.UTC(), deletedBy.UTC(), testRecreateDelay)
	waitEvent(t, delegate, ReasonPodDeleted, "fleetlet creates it again at")
	waitEvent(t, delegate, ReasonDelegateRecreated, "was unreachable")

	// The others stay deleted, also once the delay has passed: each is
	// reconciled again after it, and still records the deletion.
	waitCondition(t, reachable, metav1.ConditionFalse, ReasonPodDeleted)
	waitChaperon(t, reachable, "PodDeleted says the source is reachable", func(c *v1alpha1.PodChaperon) error {
		if msg := podCreated(c).Message; !strings.Contains(msg, "is reachable") {
			return fmt.Errorf("PodDeleted message %q", msg)
		}
		return nil
	})
	for _, ch := range []*v1alpha1.PodChaperon{candidate, onFailure} {
		waitCondition(t, ch, metav1.ConditionFalse, ReasonPodDeleted)
	}
	// Each was recorded deleted by now: wait until the delay has passed
	// since then.
	waitPast(time.Now().Add(testRecreateDelay + time.Second))
	for _, ch := range []*v1alpha1.PodChaperon{candidate, onFailure, reachable} {
		assertStaysDeleted(t, ch)
	}

	// The source comes back: its heartbeat is renewed. There is still one
	// delegate, the recreated one, and the controller has looked at it.
	var lease coordinationv1.Lease
	require.NoError(t, k8sClient.Get(ctx, client.ObjectKeyFromObject(unreachable), &lease))
	lease.Spec.RenewTime = &metav1.MicroTime{Time: time.Now()}
	lease.Spec.LeaseDurationSeconds = ptrTo(int32(3600))
	require.NoError(t, k8sClient.Update(ctx, &lease))
	lookAgain(t, delegate)
	var pods corev1.PodList
	require.NoError(t, k8sClient.List(ctx, &pods, client.InNamespace(ns),
		client.MatchingLabels{v1alpha1.LabelParentUID: delegate.Labels[v1alpha1.LabelParentUID]}))
	if len(pods.Items) != 1 || pods.Items[0].UID != pod.UID {
		var uids []types.UID
		for _, p := range pods.Items {
			uids = append(uids, p.UID)
		}
		require.FailNowf(t, "wrong delegates", "delegates of the proxy: %v, want exactly the recreated one %s", uids, pod.UID)
	}
	c := podCreated(waitCondition(t, delegate, metav1.ConditionTrue, ReasonDelegateRecreated))
	assert.Containsf(t, c.Message, string(pod.UID), "DelegateRecreated message %q does not name pod uid %s", c.Message, pod.UID)

	// With the source reachable again, deleting the delegate is the
	// source's to answer: it is not created again.
	deletePod(t, delegate)
	waitCondition(t, delegate, metav1.ConditionFalse, ReasonPodDeleted)
	waitPast(time.Now().Add(testRecreateDelay + time.Second))
	assertStaysDeleted(t, delegate)
}

// waitPast returns once instant has passed: what the controller decides
// after a delay is only observable once the delay is over.
func waitPast(instant time.Time) { time.Sleep(time.Until(instant)) }

// deletePod deletes ch's pod at once and returns its uid.
func deletePod(t *testing.T, ch *v1alpha1.PodChaperon) types.UID {
	t.Helper()
	var pod corev1.Pod
	require.NoError(t, k8sClient.Get(t.Context(), client.ObjectKeyFromObject(ch), &pod))
	require.NoError(t, k8sClient.Delete(t.Context(), &pod, client.GracePeriodSeconds(0)))
	return pod.UID
}

// assertStaysDeleted makes the controller look at ch again (lookAgain),
// then checks that ch still records its pod deleted and that no pod of its
// name exists.
func assertStaysDeleted(t *testing.T, ch *v1alpha1.PodChaperon) {
	t.Helper()
	c := lookAgain(t, ch)
	cond := podCreated(c)
	assert.Falsef(t, cond == nil || cond.Status != metav1.ConditionFalse || cond.Reason != ReasonPodDeleted, "PodChaperon %s: PodCreated %+v, want it to stay False PodDeleted", klogKey(ch), cond)
	assertNoPod(t, ch)
}
