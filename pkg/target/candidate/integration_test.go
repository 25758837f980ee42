package candidate_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/metadata"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
	"github.com/fleetlet/fleetlet/pkg/target/candidate"
	"github.com/fleetlet/fleetlet/pkg/testenv"
)

// bindDeadline is how soon an elected candidate must bind.
const bindDeadline = 5 * time.Second

// A reserved candidate waits at Permit, unbound, with its reservation on the
// chaperon; the election binds it within seconds, on the reserved node.
func TestIntegrationCandidateWaitsForElection(t *testing.T) {
	ns := newNamespace(t)
	startScheduler(t, candidate.DefaultPermitTimeout)
	ch := newChaperon(t, ns, "web-0")
	pod := newCandidate(t, ch, "100m")

	node := waitReserved(t, ch)
	require.Truef(t, slices.Contains(nodes, node), "reserved node %q is not a node of the cluster", node)
	consistently(t, "a candidate not elected stays unbound", 2*time.Second, notBound(t, pod))

	elected := elect(t, ch)
	bound := waitBound(t, pod)
	took := time.Since(elected)
	t.Logf("bound %s after the election", took)
	assert.Falsef(t, took > bindDeadline, "bound %s after the election, want within %s", took, bindDeadline)
	assert.Equalf(t, node, bound, "bound to %s, reserved %s", bound, node)
	r := getChaperon(t, ch).Annotations[v1alpha1.AnnotationReserved]
	assert.Equal(t, node, r, "reservation after binding")
}

// A candidate whose chaperon is deleted while it waits is rejected: it never
// binds, and the scheduler writes nothing about it (no FailedScheduling
// Event, no PodScheduled=False, no nominatedNodeName): its pod goes with its
// chaperon, and its deletion brings it back to no queue.
func TestIntegrationDeletedChaperonRejectsWaitingCandidate(t *testing.T) {
	ns := newNamespace(t)
	startScheduler(t, candidate.DefaultPermitTimeout)
	winner, loser := newChaperon(t, ns, "db-0"), newChaperon(t, ns, "db-1")
	winnerPod, loserPod := newCandidate(t, winner, "100m"), newCandidate(t, loser, "100m")
	waitReserved(t, winner)
	waitReserved(t, loser)
	before := allRejections(t)

	// The source elects one and deletes the other (the envtest cluster has
	// no garbage collector: the loser's pod stays, orphaned).
	require.NoError(t, k8sClient.Delete(context.Background(), loser))
	elect(t, winner)
	waitBound(t, winnerPod)
	waitRejected(t, before)
	testenv.CandidateUnwritten(t, k8sClient, loserPod, 2*time.Second)

	// The garbage collector's part: deleting a pod that is not bound sets
	// its deletionTimestamp first, an update that must not bring the loser
	// back to the queue for a FailedScheduling "skip schedule deleting pod".
	require.NoError(t, k8sClient.Delete(context.Background(), loserPod))
	testenv.CandidateUnwritten(t, k8sClient, loserPod, 2*time.Second)
}

// A candidate whose chaperon is already being deleted is rejected at Permit,
// and the reservation Reserve queued is taken back.
func TestIntegrationChaperonBeingDeletedRejectsAtOnce(t *testing.T) {
	ns := newNamespace(t)
	ch := newChaperon(t, ns, "api-0", "example.com/hold")
	t.Cleanup(func() {
		_ = k8sClient.Patch(context.Background(), ch, client.RawPatch(types.JSONPatchType, []byte(`[{"op":"remove","path":"/metadata/finalizers"}]`)))
	})
	require.NoError(t, k8sClient.Delete(context.Background(), ch))
	startScheduler(t, candidate.DefaultPermitTimeout)
	before := allRejections(t)
	pod := newCandidate(t, ch, "100m")

	waitRejected(t, before)
	testenv.CandidateUnwritten(t, k8sClient, pod, time.Second)
	consistently(t, "no reservation on a chaperon being deleted, and no binding", time.Second, func() error {
		if r, ok := getChaperon(t, ch).Annotations[v1alpha1.AnnotationReserved]; ok {
			return fmt.Errorf("reserved = %q", r)
		}
		return notBound(t, pod)()
	})
}

// A candidate too big for every node is unschedulable with the scheduler's
// message, and reserves nothing.
func TestIntegrationCandidateTooBigForEveryNode(t *testing.T) {
	ns := newNamespace(t)
	startScheduler(t, candidate.DefaultPermitTimeout)
	ch := newChaperon(t, ns, "huge-0")
	pod := newCandidate(t, ch, "64")

	testenv.Eventually(t, waitTimeout, "PodScheduled=False with the scheduler's message", func() error {
		c := podScheduled(getPod(t, pod))
		if c == nil || c.Status != corev1.ConditionFalse || c.Reason != corev1.PodReasonUnschedulable ||
			!strings.Contains(c.Message, "0/2 nodes are available") || !strings.Contains(c.Message, "Insufficient cpu") {
			return fmt.Errorf("PodScheduled = %+v", c)
		}
		t.Logf("PodScheduled=False: %s", c.Message)
		return nil
	})
	r, ok := getChaperon(t, ch).Annotations[v1alpha1.AnnotationReserved]
	assert.Falsef(t, ok, "an unschedulable candidate reserved %q", r)
}

// A scheduler that stops while a candidate waits, and comes back after the
// election, binds the elected candidate at once: Permit reads the chaperon
// first.
func TestIntegrationRestartedSchedulerBindsElectedCandidate(t *testing.T) {
	ns := newNamespace(t)
	stop := startScheduler(t, candidate.DefaultPermitTimeout)
	ch := newChaperon(t, ns, "cache-0")
	pod := newCandidate(t, ch, "100m")
	waitReserved(t, ch)
	stop() // like a killed process: nothing unreserved

	elect(t, ch)
	consistently(t, "nothing binds while no scheduler runs", time.Second, notBound(t, pod))
	started := time.Now()
	startScheduler(t, candidate.DefaultPermitTimeout)
	waitBound(t, pod)
	took := time.Since(started)
	t.Logf("bound %s after the scheduler started again", took)
	assert.Falsef(t, took > bindDeadline, "bound %s after the restart, want within %s", took, bindDeadline)
}

// A candidate that waited past the Permit timeout gives its node back (the
// reservation is cleared), and is sent back to scheduling the moment its
// chaperon is elected, without waiting for the unschedulable pods' flush.
func TestIntegrationTimedOutCandidateBindsWhenElected(t *testing.T) {
	ns := newNamespace(t)
	startScheduler(t, 2*time.Second)
	ch := newChaperon(t, ns, "late-0")
	pod := newCandidate(t, ch, "100m")
	waitReserved(t, ch)

	testenv.Eventually(t, waitTimeout, "the reservation is cleared after the Permit timeout", func() error {
		if r, ok := getChaperon(t, ch).Annotations[v1alpha1.AnnotationReserved]; ok {
			return fmt.Errorf("reserved = %q", r)
		}
		return nil
	})
	testenv.Eventually(t, waitTimeout, "PodScheduled=False after the timeout", func() error {
		if c := podScheduled(getPod(t, pod)); c == nil || c.Status != corev1.ConditionFalse {
			return fmt.Errorf("PodScheduled = %+v", c)
		}
		return nil
	})
	elected := elect(t, ch)
	waitBound(t, pod)
	took := time.Since(elected)
	t.Logf("bound %s after a late election", took)
	assert.Falsef(t, took > bindDeadline, "bound %s after the election, want within %s", took, bindDeadline)
}

// The API server refuses the plugin's writes on a chaperon that was
// replaced (same name, another UID) and the removal of a reservation that
// names another node, with the errors the plugin treats as final.
func TestIntegrationReservationPatchesArePreconditioned(t *testing.T) {
	ns := newNamespace(t)
	ch := newChaperon(t, ns, "pre-0")
	mc := metadata.NewForConfigOrDie(env.Config)
	res := mc.Resource(v1alpha1.GroupVersion.WithResource("podchaperons")).Namespace(ns)
	ctx := context.Background()

	merge := fmt.Appendf(nil, `{"metadata":{"uid":"not-its-uid","annotations":{%q:"node-1"}}}`, v1alpha1.AnnotationReserved)
	_, err := res.Patch(ctx, ch.Name, types.MergePatchType, merge, metav1.PatchOptions{})
	assert.Falsef(t, !apierrors.IsInvalid(err) && !apierrors.IsConflict(err), "a merge patch with another UID: %v, want Invalid or Conflict", err)

	set := fmt.Appendf(nil, `{"metadata":{"uid":%q,"annotations":{%q:"node-2"}}}`, ch.UID, v1alpha1.AnnotationReserved)
	_, err = res.Patch(ctx, ch.Name, types.MergePatchType, set, metav1.PatchOptions{})
	require.NoError(t, err)
	path := "/metadata/annotations/multicluster.fleetlet.io~1reserved"
	remove := fmt.Appendf(nil, `[{"op":"test","path":"/metadata/uid","value":%q},{"op":"test","path":%q,"value":"node-1"},{"op":"remove","path":%q}]`, ch.UID, path, path)
	_, err = res.Patch(ctx, ch.Name, types.JSONPatchType, remove, metav1.PatchOptions{})
	assert.Truef(t, apierrors.IsInvalid(err), "removing a reservation of another node: %v, want Invalid", err)
	r := getChaperon(t, ch).Annotations[v1alpha1.AnnotationReserved]
	assert.Equalf(t, "node-2", r, "reserved = %q, want node-2 kept", r)

	require.NoError(t, k8sClient.Delete(ctx, ch))
	_, err = res.Patch(ctx, ch.Name, types.MergePatchType, set, metav1.PatchOptions{})
	assert.Truef(t, apierrors.IsNotFound(err), "a patch of a deleted chaperon: %v, want NotFound", err)
	var statusErr *apierrors.StatusError
	assert.Truef(t, errors.As(err, &statusErr), "want an API status error, got %T", err)
}
