package elector_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
	"github.com/fleetlet/fleetlet/pkg/proxy"
	"github.com/fleetlet/fleetlet/pkg/source/elector"
	"github.com/fleetlet/fleetlet/pkg/testenv"
)

func electedIn(key string) func(*corev1.Pod) bool {
	return func(p *corev1.Pod) bool { r, ok := proxy.Elected(p); return ok && r.TargetName == key }
}

func reelecting(p *corev1.Pod) bool {
	c := proxy.ElectedCondition(p)
	return c != nil && c.Status != corev1.ConditionTrue
}

// The proxy is pinned only once the target's kubelet has admitted its
// delegate; a kubelet that refuses it (Failed, never started) re-elects,
// and the proxy never sees that failure. Before: a bound delegate pinned
// the proxy at once, and a refusal of a bound pod was never looked at: the
// proxy was ungated and mirrored Failed.
func TestKubeletRefusalReelects(t *testing.T) {
	h, remote, local := start(t, elector.Options{})
	p := h.proxy(t, "web-1")
	h.reserve(t, remote, p)
	h.unschedulable(t, local, p)
	h.waitProxy(t, p, "elected in "+remote.Name, electedIn(remote.Name))
	h.bind(t, remote, p)

	assert.Never(t, func() bool { return proxy.PinnedNode(h.get(t, p)) != "" }, 2*time.Second, 100*time.Millisecond,
		"pinned before the kubelet admitted the delegate")
	h.refuse(t, remote, p)

	got := h.waitProxy(t, p, "election record dropped", reelecting)
	assert.Empty(t, proxy.PinnedNode(got), "pinned")
	assert.True(t, proxy.Gated(got), "ungated")
	assert.NotEqual(t, corev1.PodFailed, got.Status.Phase, "the proxy saw the refusal")
	h.waitEvent(t, p, elector.EventReelecting)
	pc, ok := h.chaperon(t, remote, p)
	require.True(t, ok)
	assert.NotNil(t, pc.DeletionTimestamp, "the refused delegate's chaperon was not deleted")
}

// Once admitted, the proxy is pinned and ungated.
func TestAdmittedDelegatePinsAndUngates(t *testing.T) {
	h, remote, local := start(t, elector.Options{})
	p := h.proxy(t, "web-1")
	runIn(t, h, remote, local, p)
}

// A loser that cannot be deleted (its target refuses, or does not answer)
// never holds up the winner. Before: the first delete error returned
// before the bind check, and the proxy stayed gated.
func TestLoserThatCannotBeDeletedDoesNotHoldTheWinner(t *testing.T) {
	h, remote, local := start(t, elector.Options{})
	denyChaperonDeletes(t, h.target, h.ns)
	p := h.proxy(t, "web-1")
	h.unschedulable(t, remote, p) // the loser, which its target keeps
	h.reserve(t, local, p)
	h.waitProxy(t, p, "elected in "+local.Name, electedIn(local.Name))
	h.bind(t, local, p)
	h.admit(t, local, p)
	h.waitProxy(t, p, "pinned and ungated", func(p *corev1.Pod) bool {
		return proxy.PinnedNode(p) == nodeName(local) && !proxy.Gated(p)
	})
	pc, ok := h.chaperon(t, remote, p)
	require.True(t, ok, "the loser went, although its target refuses deletes")
	assert.Nil(t, pc.DeletionTimestamp)
}

// A record naming a Target that was deleted re-elects (the proxy is not
// pinned yet). Before: the proxy waited for that target forever.
func TestElectedTargetDeletedReelects(t *testing.T) {
	h, remote, local := start(t, elector.Options{})
	ctx := context.Background()
	p := h.proxy(t, "web-1")
	h.reserve(t, remote, p)
	h.unschedulable(t, local, p)
	h.waitProxy(t, p, "elected in "+remote.Name, electedIn(remote.Name))
	h.collect(t, local, p) // the loser

	require.NoError(t, h.source.Delete(ctx, &v1alpha1.Target{ObjectMeta: metav1.ObjectMeta{Namespace: remote.Namespace, Name: remote.Name}}))
	got := h.waitProxy(t, p, "election record dropped", reelecting)
	assert.Contains(t, got.Annotations[v1alpha1.AnnotationPreviousDelegate], "target="+remote.String())
	h.waitEvent(t, p, elector.EventReelecting)

	// Elected again where it can run, once the deleted Target's drain
	// has taken its candidate.
	h.reserve(t, local, p)
	h.waitProxy(t, p, "elected in "+local.Name, electedIn(local.Name))
	h.collect(t, remote, p)
	h.bind(t, local, p)
	h.admit(t, local, p)
	h.waitProxy(t, p, "pinned to "+nodeName(local), pinnedTo(nodeName(local)))
}

// A record whose target has been NotReady past ElectedTargetTimeout
// re-elects; the new delegate is never marked while the old one cannot be
// confirmed gone. Since that target has not been Ready for
// ElectedTargetTimeout, the proxy is deleted instead, as a pod on an
// unreachable node is (Event PreviousDelegateUnreachable), so that its
// controller makes a new one; it stays Terminating until the old target
// answers and its delegate is gone. Before: the proxy waited, gated, for as
// long as the old target stayed down (a rollout hung for the whole outage:
// 5 of 30 proxies still gated 300 s into a target outage).
func TestElectedTargetNotReadyReelectsWithoutOverlap(t *testing.T) {
	h, remote, local := start(t, elector.Options{ElectedTargetTimeout: 2 * time.Second})
	p := h.proxy(t, "web-1")
	h.reserve(t, remote, p)
	h.unschedulable(t, local, p)
	h.waitProxy(t, p, "elected in "+remote.Name, electedIn(remote.Name))
	h.collect(t, local, p) // the loser

	back := h.unreachable(t, remote, targetEnv.Config)
	h.waitProxy(t, p, "election record dropped", reelecting)
	h.reserve(t, local, p)
	h.waitProxy(t, p, "elected in "+local.Name, electedIn(local.Name))
	cur, present := h.waitProxyDeleted(t, p, "deleted: its previous delegate cannot be confirmed gone")
	require.True(t, present, "the proxy went while its previous delegate may run in an unreachable target")
	assert.Empty(t, proxy.PinnedNode(cur), "the deleted proxy was pinned")
	h.waitEvent(t, p, elector.EventPreviousDelegateUnreachable)
	assert.Never(t, func() bool {
		return h.marked(t, local, p) || apierrors.IsNotFound(h.source.Get(context.Background(), client.ObjectKeyFromObject(p), &corev1.Pod{}))
	}, 2*time.Second, 100*time.Millisecond, "the new delegate was marked, or the proxy went, while the old one may still run in an unreachable target")

	back()
	h.collect(t, local, p) // the unmarked candidate, deleted with the proxy
	h.collect(t, remote, p)
	h.waitProxyGone(t, p, "the proxy gone once its old delegate is")
}

// After a re-election the new delegate may bind only once the old one is
// confirmed gone: its chaperon, deleted, is Terminating while its pod goes.
// Before: the new one was marked at once, and two delegates overlapped for
// the old one's grace period. What holds the old chaperon is fleetlet's
// delegate-pod finalizer, which its mark added, not Foreground propagation:
// that cost the target's garbage collector about 8.5 requests per delegate.
func TestReelectionWaitsForThePreviousDelegate(t *testing.T) {
	h, remote, local := start(t, elector.Options{BindTimeout: 2 * time.Second})
	p := h.proxy(t, "web-1")
	reelectAway(t, h, remote, local, p)
	var old *v1alpha1.PodChaperon
	testenv.EventuallyTrue(t, waitTimeout, "the old delegate's chaperon Terminating", func(context.Context) bool {
		pc, ok := h.chaperon(t, remote, p)
		old = pc
		return ok && pc.DeletionTimestamp != nil
	})
	assert.Contains(t, old.Finalizers, v1alpha1.FinalizerDelegatePod, "the finalizer the mark adds")
	assert.NotContains(t, old.Finalizers, metav1.FinalizerDeleteDependents, "deleted Foreground")
	assert.Never(t, func() bool { return h.marked(t, local, p) }, 2*time.Second, 100*time.Millisecond,
		"the new delegate was marked while the old one is still Terminating")
	h.collect(t, remote, p)
	testenv.EventuallyTrue(t, waitTimeout, "the new delegate marked", func(context.Context) bool { return h.marked(t, local, p) })
}

// runIn elects a proxy's delegate in key (other's candidate unschedulable),
// and waits until it is admitted there and the proxy pinned and ungated.
func runIn(t *testing.T, h *harness, key, other proxy.TargetKey, p *corev1.Pod) {
	t.Helper()
	h.reserve(t, key, p)
	h.unschedulable(t, other, p)
	h.bind(t, key, p)
	h.admit(t, key, p)
	h.waitProxy(t, p, "pinned and ungated", func(p *corev1.Pod) bool {
		return proxy.PinnedNode(p) == nodeName(key) && !proxy.Gated(p)
	})
}

// reelectAway elects a proxy's delegate in from, marks it, lets BindTimeout
// (2 s) drop the record while its chaperon stays (never admitted), and
// elects the proxy again in to. The first delegate is left Terminating.
func reelectAway(t *testing.T, h *harness, from, to proxy.TargetKey, p *corev1.Pod) {
	t.Helper()
	h.reserve(t, from, p)
	h.unschedulable(t, to, p)
	h.waitProxy(t, p, "elected in "+from.Name, electedIn(from.Name))
	testenv.EventuallyTrue(t, waitTimeout, "the delegate marked in "+from.Name, func(context.Context) bool { return h.marked(t, from, p) })
	h.collect(t, to, p) // the loser
	h.bind(t, from, p)  // never admitted: BindTimeout re-elects

	h.waitProxy(t, p, "election record dropped", reelecting)
	h.reserve(t, to, p)
	h.waitProxy(t, p, "elected in "+to.Name, electedIn(to.Name))
}

// marked reports whether the proxy's chaperon in a target is marked
// elected (the delegate may bind).
func (h *harness) marked(t *testing.T, key proxy.TargetKey, p *corev1.Pod) bool {
	pc, ok := h.chaperon(t, key, p)
	return ok && pc.Annotations[v1alpha1.AnnotationElected] == "true"
}

// denyChaperonDeletes makes a target refuse to delete PodChaperons in a
// namespace (a ValidatingAdmissionPolicy), until the test ends.
func denyChaperonDeletes(t *testing.T, c client.Client, ns string) {
	t.Helper()
	denyChaperons(t, c, ns, admissionregistrationv1.Delete)
}

// denyChaperons makes a target refuse an operation on PodChaperons in a
// namespace (a ValidatingAdmissionPolicy) until lift is called or the test
// ends; it returns once the refusal is in force, and lift once it is not.
func denyChaperons(t *testing.T, c client.Client, ns string, op admissionregistrationv1.OperationType) (lift func()) {
	t.Helper()
	ctx := context.Background()
	name := fmt.Sprintf("deny-chaperon-%s-%s", strings.ToLower(string(op)), ns)
	policy := &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: ptr.To(admissionregistrationv1.Fail),
			MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionregistrationv1.RuleWithOperations{
					Operations: []admissionregistrationv1.OperationType{op},
					Rule:       admissionregistrationv1.Rule{APIGroups: []string{v1alpha1.GroupVersion.Group}, APIVersions: []string{"*"}, Resources: []string{"podchaperons"}},
				},
			}}},
			Validations: []admissionregistrationv1.Validation{{Expression: fmt.Sprintf("request.namespace != %q", ns), Message: "this test's target refuses it"}},
		},
	}
	binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName: name, ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny},
		},
	}
	chaperon := func(name string) *v1alpha1.PodChaperon {
		return &v1alpha1.PodChaperon{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: v1alpha1.PodChaperonSpec{Template: v1alpha1.PodChaperonTemplate{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}}}
	}
	probe := chaperon("probe-" + strings.ToLower(string(op)))
	require.NoError(t, c.Create(ctx, probe))
	// In force while a dry run of the operation on a probe is refused.
	inForce := func(ctx context.Context) bool {
		if op == admissionregistrationv1.Delete {
			return c.Delete(ctx, probe, client.DryRunAll) != nil
		}
		return c.Create(ctx, chaperon(probe.Name+"-2"), client.DryRunAll) != nil
	}
	require.NoError(t, c.Create(ctx, policy))
	require.NoError(t, c.Create(ctx, binding))
	remove := func() {
		_ = c.Delete(context.Background(), binding)
		_ = c.Delete(context.Background(), policy)
	}
	t.Cleanup(remove)
	testenv.EventuallyTrue(t, waitTimeout, "the policy in force", inForce)
	return func() {
		t.Helper()
		remove()
		testenv.EventuallyTrue(t, waitTimeout, "the policy lifted", func(ctx context.Context) bool { return !inForce(ctx) })
	}
}

// A pod no cluster can run keeps pending candidates in at most
// PendingTargets targets (one cluster autoscaler scales up, not all of
// them): a trimmed candidate is not made again on the next pass (its own
// deletion brings the proxy back at once), only after RetryInterval.
// Before: it was recreated as soon as it was gone.
func TestPendingCandidatesStayInTheBestTargets(t *testing.T) {
	h, remote, local := start(t, elector.Options{PendingTargets: 1})
	p := h.proxy(t, "web-1")
	h.unschedulable(t, remote, p)
	h.unschedulable(t, local, p)

	h.waitTrimmed(t, p, remote, local)
	live := func() int {
		n := 0
		for _, k := range []proxy.TargetKey{remote, local} {
			if pc, ok := h.chaperon(t, k, p); ok && pc.DeletionTimestamp == nil {
				n++
			}
		}
		return n
	}
	assert.Never(t, func() bool { return live() > 1 }, 3*time.Second, 100*time.Millisecond,
		"the trimmed candidate was made again")
	assert.Equal(t, 1, live(), "the best target lost its pending candidate")
	h.waitEvent(t, p, elector.EventNotSchedulable)
}

// A pod no cluster could run whose pending candidate was trimmed from a
// target gets a candidate there again as soon as that target's summary
// shows room that fits it (a burst's losing candidates that held the room
// went, say), not when the round ends: it spills over at once. Room too
// small for it changes nothing. Before: the target was kept out for the
// whole round (RetryInterval, here 10 minutes).
func TestTrimmedTargetWithRoomForThePodGetsACandidateAgain(t *testing.T) {
	h, remote, local := start(t, elector.Options{PendingTargets: 1, RetryInterval: 10 * time.Minute})
	planes := map[proxy.TargetKey]client.Client{remote: h.target, local: h.source}
	for _, c := range planes {
		setSummary(t, c, tenCPUs("10"))
	}
	time.Sleep(2 * time.Second) // several of the registry's 500 ms probes: both full before the pod

	p := h.proxy(t, "web-1")
	h.unschedulable(t, remote, p)
	h.unschedulable(t, local, p)
	trimmed := h.waitTrimmed(t, p, remote, local)
	h.waitEvent(t, p, elector.EventNotSchedulable)

	// 50m free: room grew, not enough for the pod's 100m.
	setSummary(t, planes[trimmed], tenCPUs("9950m"))
	assert.Never(t, func() bool { _, ok := h.chaperon(t, trimmed, p); return ok }, 3*time.Second, 100*time.Millisecond,
		"a candidate made again in %s, where the room that appeared is too small for the pod", trimmed.Name)
	setSummary(t, planes[trimmed], tenCPUs("0"))
	testenv.EventuallyTrue(t, 20*time.Second, "a candidate in "+trimmed.Name+" again, once room for the pod appeared there", func(context.Context) bool {
		_, ok := h.chaperon(t, trimmed, p)
		return ok
	})
	h.reserve(t, trimmed, p)
	h.waitProxy(t, p, "elected in "+trimmed.Name, electedIn(trimmed.Name))
}

// tenCPUs is the summary of a target with 10 CPUs, requested of them.
func tenCPUs(requested string) v1alpha1.ClusterSummaryStatus {
	return v1alpha1.ClusterSummaryStatus{
		Allocatable: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10"), corev1.ResourcePods: resource.MustParse("110")},
		Requested:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(requested)},
	}
}

// A pending candidate is not trimmed from a target whose summary shows
// room for the pod: what holds it back there is passing (a burst's losing
// candidates hold the room until they go), and the target's scheduler
// places it as soon as it is free, with no round to wait for. Before:
// trimmed to the PendingTargets best like any other, and kept out until
// the round ended.
func TestPendingCandidateStaysWhereTheSummaryShowsRoom(t *testing.T) {
	h, remote, local := start(t, elector.Options{PendingTargets: 1, RetryInterval: 10 * time.Minute})
	setSummary(t, h.target, tenCPUs("5"))
	setSummary(t, h.source, tenCPUs("5"))
	time.Sleep(2 * time.Second) // several of the registry's 500 ms probes

	p := h.proxy(t, "web-1")
	h.unschedulable(t, remote, p)
	h.unschedulable(t, local, p)
	h.waitEvent(t, p, elector.EventNotSchedulable)
	assert.Never(t, func() bool {
		for _, k := range []proxy.TargetKey{remote, local} {
			if pc, ok := h.chaperon(t, k, p); !ok || pc.DeletionTimestamp != nil {
				return true
			}
		}
		return false
	}, 3*time.Second, 100*time.Millisecond, "a pending candidate trimmed from a target with room for the pod")
	h.reserve(t, remote, p)
	h.waitProxy(t, p, "elected in "+remote.Name, electedIn(remote.Name))
}

// A candidate that no node of its target takes whatever their room (an
// affinity, a taint) does not wait for room there, summary or not: it is
// trimmed, so that a cluster autoscaler in that target does not scale up
// for it. Before: kept wherever the summary showed room, whatever the
// candidate scheduler's reason.
func TestCandidateNoNodeTakesIsTrimmedWhereTheSummaryShowsRoom(t *testing.T) {
	h, remote, local := start(t, elector.Options{PendingTargets: 1, RetryInterval: 10 * time.Minute})
	setSummary(t, h.target, tenCPUs("5"))
	setSummary(t, h.source, tenCPUs("5"))
	time.Sleep(2 * time.Second) // several of the registry's 500 ms probes

	p := h.proxy(t, "web-1")
	const affinity = "0/3 nodes are available: 3 node(s) didn't match Pod's node affinity/selector."
	h.unschedulableFor(t, remote, p, affinity)
	h.unschedulableFor(t, local, p, affinity)
	h.waitEvent(t, p, elector.EventNotSchedulable)
	h.waitTrimmed(t, p, remote, local)
}

// waitTrimmed waits for the proxy's pending candidate in one of keys to be
// trimmed, plays the target's garbage collector for it and says which.
func (h *harness) waitTrimmed(t *testing.T, p *corev1.Pod, keys ...proxy.TargetKey) proxy.TargetKey {
	t.Helper()
	var trimmed proxy.TargetKey
	testenv.EventuallyTrue(t, waitTimeout, "one pending candidate trimmed", func(context.Context) bool {
		for _, k := range keys {
			if pc, ok := h.chaperon(t, k, p); ok && pc.DeletionTimestamp != nil {
				trimmed = k
				return true
			}
		}
		return false
	})
	h.collect(t, trimmed, p)
	return trimmed
}

// Back-to-back re-elections: a delegate is re-elected away and is still
// Terminating; the next election's record is dropped too, before its
// candidate was ever marked. The first delegate stays the one remembered,
// so the third election's delegate is marked only once it is gone. Before:
// the annotation was overwritten with the unmarked record, and a new
// candidate in that record's target was marked at once, beside the
// Terminating delegate.
func TestBackToBackReelectionsRememberTheFirstDelegate(t *testing.T) {
	h, remote, local := start(t, elector.Options{BindTimeout: 2 * time.Second})
	p := h.proxy(t, "web-1")
	reelectAway(t, h, remote, local, p)
	// The unmarked candidate vanishes: this record is dropped too.
	pc, ok := h.chaperon(t, local, p)
	require.True(t, ok)
	require.NoError(t, h.clientOf(local).Delete(context.Background(), pc))
	h.collect(t, local, p)
	h.waitProxy(t, p, "the second record dropped", reelecting)
	h.reserve(t, local, p)
	h.waitProxy(t, p, "elected in "+local.Name+" again", electedIn(local.Name))
	assert.Never(t, func() bool { return h.marked(t, local, p) }, 3*time.Second, 100*time.Millisecond,
		"the third delegate was marked while the first is still Terminating")
	h.collect(t, remote, p)
	testenv.EventuallyTrue(t, waitTimeout, "the third delegate marked", func(context.Context) bool { return h.marked(t, local, p) })
}

// A target whose credentials cannot be read any more (its kubeconfig
// Secret deleted) is known but unreachable: a deleted proxy whose delegate
// runs there stays Terminating, its delegate not confirmed gone, until the
// target answers again; then its chaperon is deleted there and the
// finalizer goes. Before: the registry dropped the target, finalize looked
// only at the targets it had, and the finalizer went at once while the
// delegate ran on (a StatefulSet's db-0 recreated beside the old one).
func TestUnreadableCredentialsKeepTheProxyTerminating(t *testing.T) {
	h, remote, local := start(t, elector.Options{})
	ctx := context.Background()
	p := h.proxy(t, "db-0")
	runIn(t, h, remote, local, p)
	h.collect(t, local, p) // the loser

	var secret corev1.Secret
	require.NoError(t, h.source.Get(ctx, client.ObjectKey{Namespace: h.ns, Name: remote.Name + "-kubeconfig"}, &secret))
	require.NoError(t, h.source.Delete(ctx, &secret))
	testenv.EventuallyTrue(t, waitTimeout, "Target "+remote.Name+" NotReady", func(ctx context.Context) bool {
		var tg v1alpha1.Target
		if err := h.source.Get(ctx, client.ObjectKey{Namespace: h.ns, Name: remote.Name}, &tg); err != nil {
			return false
		}
		c := meta.FindStatusCondition(tg.Status.Conditions, v1alpha1.ConditionReady)
		return c != nil && c.Status == metav1.ConditionFalse
	})
	require.NoError(t, h.source.Delete(ctx, p))
	gone := func() bool {
		return apierrors.IsNotFound(h.source.Get(ctx, client.ObjectKeyFromObject(p), &corev1.Pod{}))
	}
	assert.Never(t, gone, 3*time.Second, 100*time.Millisecond,
		"the proxy went while its delegate's target could not be reached")
	pc, ok := h.chaperon(t, remote, p)
	require.True(t, ok, "the delegate's chaperon")
	assert.Nil(t, pc.DeletionTimestamp)

	secret.ResourceVersion = ""
	require.NoError(t, h.source.Create(ctx, &secret))
	h.collect(t, remote, p)
	testenv.EventuallyTrue(t, waitTimeout, "the proxy gone", func(context.Context) bool { return gone() })
}

// A proxy whose sealed spec cannot be opened now (the seal key Secret is
// missing, or a rotation has not reached this replica) is tried again, and
// elected once the keys are back. Before: InvalidSourceSpec was final until
// the pod changed.
func TestInvalidSourceSpecIsRetried(t *testing.T) {
	var keysBack atomic.Bool
	h, remote, local := start(t, elector.Options{RetryInterval: 500 * time.Millisecond, Spec: func(p *corev1.Pod) (*corev1.PodSpec, error) {
		if !keysBack.Load() {
			return nil, errors.New("no seal key: the seal key Secret is missing")
		}
		return p.Spec.DeepCopy(), nil
	}})
	p := h.proxy(t, "web-1")
	h.waitEvent(t, p, elector.EventInvalidSpec)
	keysBack.Store(true)
	h.reserve(t, remote, p)
	h.unschedulable(t, local, p)
	h.waitProxy(t, p, "elected in "+remote.Name+" once the keys are back", electedIn(remote.Name))
}

// A chaperon deleted in its target without propagation (an admin's
// `kubectl delete podchaperon`, a namespace reset) leaves its pod to the
// target's garbage collector and to the pod's grace period: the deleted
// proxy stays Terminating until that pod is gone too. Before: the
// finalizer went as soon as the chaperon was NotFound, and a StatefulSet
// made its pod again in another cluster while the old one still ran (two
// db-0s at once).
func TestDeletedProxyWaitsForItsDelegatePodNotOnlyItsChaperon(t *testing.T) {
	h, remote, local := start(t, elector.Options{})
	ctx := context.Background()
	p := h.proxy(t, "db-0")
	runIn(t, h, remote, local, p)
	h.collect(t, local, p) // the loser
	delegate := h.orphanDelegate(t, remote, p)
	before := requeues(t)

	require.NoError(t, h.source.Delete(ctx, p))
	gone := func() bool {
		return apierrors.IsNotFound(h.source.Get(ctx, client.ObjectKeyFromObject(p), &corev1.Pod{}))
	}
	assert.Never(t, gone, 3*time.Second, 100*time.Millisecond,
		"the proxy went while its delegate's pod still ran in "+remote.Name)

	require.NoError(t, h.clientOf(remote).Delete(ctx, delegate))
	testenv.EventuallyTrue(t, waitTimeout, "the proxy gone once its delegate's pod is", func(context.Context) bool { return gone() })
	// The pod's deletion, seen by the target's cache, brought the last
	// pass: no timer did.
	noTimedPasses(t, before, "while the deleted proxy's delegate pod went")
}

// A bound proxy deleted with a grace period (`kubectl delete
// --grace-period=30`, a DeleteCollection with grace 1) goes once its
// delegate is gone, as a pod does once its kubelet has seen its containers
// stop. Before: fleetlet removed its finalizer and the proxy stayed
// Terminating for good, phase Running: on a virtual node no kubelet makes
// the last delete.
func TestProxyDeletedWithAGracePeriodGoes(t *testing.T) {
	h, remote, local := start(t, elector.Options{})
	ctx := context.Background()
	p := h.proxy(t, "web-1")
	runIn(t, h, remote, local, p)
	h.collect(t, local, p) // the loser
	binding := &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Namespace: p.Namespace, Name: p.Name},
		Target: corev1.ObjectReference{Kind: "Node", Name: nodeName(remote)}}
	require.NoError(t, h.source.SubResource("binding").Create(ctx, p, binding))

	require.NoError(t, h.source.Delete(ctx, p, client.GracePeriodSeconds(30)))
	h.collect(t, remote, p) // the delegate's chaperon, and so its pod
	h.waitProxyGone(t, p, "the proxy gone once its delegate is")
}

// A deleted proxy waits for its delegate to go on the target's events, not
// on a timer: while its chaperon is Terminating in a target that answers,
// no pass runs for a timer, and the chaperon's deletion there brings the
// proxy's last pass. Before: it looked again every second, reading every
// target each time (counted as unreachable-target, though the target
// answered), which made deleting thousands of proxies crawl.
func TestDeletedProxyWaitsForItsDelegateOnEvents(t *testing.T) {
	h, remote, local := start(t, elector.Options{})
	ctx := context.Background()
	p := h.proxy(t, "web-1")
	runIn(t, h, remote, local, p)
	h.collect(t, local, p) // the loser
	before := requeues(t)

	require.NoError(t, h.source.Delete(ctx, p))
	testenv.EventuallyTrue(t, waitTimeout, "the delegate's chaperon Terminating", func(context.Context) bool {
		pc, ok := h.chaperon(t, remote, p)
		return ok && pc.DeletionTimestamp != nil
	})
	// Long enough for a poll of one second to show.
	time.Sleep(3 * time.Second)
	_, present := h.waitProxyDeleted(t, p, "deleted, its delegate going")
	require.True(t, present, "the proxy went while its delegate's chaperon was Terminating")
	h.collect(t, remote, p)
	h.waitProxyGone(t, p, "the proxy gone once its delegate is")
	noTimedPasses(t, before, "while the deleted proxy's delegate went")
}

// A deleted proxy's chaperons, and its delegate's pod, are read from the
// targets' caches, which have synced: deleting it reads neither from an
// API server. Before: each pass read every target's chaperon live, about
// twice per target; then, once the chaperon was gone, the delegate's pod
// (a GET per delegate deletion).
func TestFinalizeReadsChaperonsFromTheCaches(t *testing.T) {
	h, remote, local := start(t, elector.Options{})
	ctx := context.Background()
	p := h.proxy(t, "web-1")
	runIn(t, h, remote, local, p)
	h.collect(t, local, p) // the loser

	// The harness lists chaperons from here on (LIST, not GET): every
	// GET of one is the elector's.
	before, beforeTarget := served(t), testenv.Served(t, targetEnv.Config)
	require.NoError(t, h.source.Delete(ctx, p))
	c := h.clientOf(remote)
	testenv.EventuallyTrue(t, waitTimeout, "the delegate's chaperon deleted, then gone", func(ctx context.Context) bool {
		var list v1alpha1.PodChaperonList
		if err := c.List(ctx, &list, client.InNamespace(p.Namespace)); err != nil {
			return false
		}
		for i := range list.Items {
			pc := &list.Items[i]
			if pc.Name != chaperonKey(p).Name {
				continue
			}
			if pc.DeletionTimestamp != nil { // the garbage collector's part
				_ = c.Patch(ctx, pc, client.RawPatch("application/merge-patch+json", []byte(`{"metadata":{"finalizers":null}}`)))
			}
			return false
		}
		return true
	})
	h.waitProxyGone(t, p, "the proxy gone once its delegate is")
	const get = "GET podchaperons/"
	assert.Zerof(t, served(t)[get]-before[get], "chaperons read from an API server while the proxy was deleted")
	// The harness reads no pod of the target (the proxy is the source's).
	const getPod = "GET pods/"
	assert.Zerof(t, testenv.Served(t, targetEnv.Config)[getPod]-beforeTarget[getPod], "the delegate's pod read from its target's API server while the proxy was deleted")
}

// noTimedPasses fails for every pass that ran for a timer since before
// (requeues' counts then).
func noTimedPasses(t *testing.T, before map[string]float64, when string) {
	t.Helper()
	for reason, v := range requeues(t) {
		assert.Zerof(t, v-before[reason], "passes ran for a timer (%s) %s", reason, when)
	}
}

// The same rule after a re-election: the new delegate may bind only once
// the old one's pod is gone, not only its chaperon. Before: it was marked
// as soon as the old chaperon was NotFound.
func TestReelectionWaitsForThePreviousDelegatePod(t *testing.T) {
	h, remote, local := start(t, elector.Options{BindTimeout: 2 * time.Second})
	ctx := context.Background()
	p := h.proxy(t, "web-1")
	reelectAway(t, h, remote, local, p)
	delegate := h.orphanDelegate(t, remote, p)
	assert.Never(t, func() bool { return h.marked(t, local, p) }, 3*time.Second, 100*time.Millisecond,
		"the new delegate was marked while the old one's pod still ran")
	require.NoError(t, h.clientOf(remote).Delete(ctx, delegate))
	testenv.EventuallyTrue(t, waitTimeout, "the new delegate marked", func(context.Context) bool { return h.marked(t, local, p) })
}

// orphanDelegate plays what a chaperon deleted without propagation leaves
// in a target: the pod it held (created here as the chaperon controller
// would, with the proxy's parent labels and annotations), and the chaperon
// gone.
func (h *harness) orphanDelegate(t *testing.T, key proxy.TargetKey, p *corev1.Pod) *corev1.Pod {
	t.Helper()
	ctx := context.Background()
	c := h.clientOf(key)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: p.Namespace, Name: chaperonKey(p).Name, Labels: map[string]string{
			v1alpha1.LabelParentUID: string(p.UID), v1alpha1.LabelParentCluster: sourceName,
		}, Annotations: map[string]string{
			v1alpha1.AnnotationParentName: p.Name, v1alpha1.AnnotationParentNamespace: p.Namespace,
		}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "busybox"}}},
	}
	require.NoError(t, c.Create(ctx, pod))
	pc, ok := h.chaperon(t, key, p)
	require.True(t, ok, "the chaperon in "+key.Name)
	if pc.DeletionTimestamp == nil {
		require.NoError(t, c.Delete(ctx, pc, client.PropagationPolicy(metav1.DeletePropagationBackground)))
	}
	h.collect(t, key, p)
	return pod
}

// What a user changes on a bound proxy reaches its delegate's chaperon
// template: labels (a removed key recorded for the target), images, a
// resize; the sealed rest of the template stays, the container's command,
// environment and ports too (the source's cache keeps only what it reads
// of a template: a write from it would drop them). Before: nothing after
// the election reached the delegate.
func TestBoundProxyUpdatesReachItsDelegatesChaperon(t *testing.T) {
	h, remote, local := start(t, elector.Options{})
	ctx := context.Background()
	p := h.proxyWith(t, "web-1", func(p *corev1.Pod) {
		c := &p.Spec.Containers[0]
		c.Command = []string{"httpd", "-f"}
		c.Env = []corev1.EnvVar{{Name: "MODE", Value: "web"}}
		c.Ports = []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}}
	})
	runIn(t, h, remote, local, p)
	// The source scheduler's binding.
	cur := h.get(t, p)
	require.NoError(t, h.source.SubResource("binding").Create(ctx, cur, &corev1.Binding{
		ObjectMeta: metav1.ObjectMeta{Name: cur.Name, Namespace: cur.Namespace},
		Target:     corev1.ObjectReference{Kind: "Node", Name: nodeName(remote)},
	}))
	before, ok := h.chaperon(t, remote, p)
	require.True(t, ok)

	cur = h.get(t, p)
	orig := cur.DeepCopy()
	cur.Labels = map[string]string{"tier": "debug"}
	require.NoError(t, h.source.Patch(ctx, cur, client.MergeFrom(orig)))
	cur = h.get(t, p)
	orig = cur.DeepCopy()
	cur.Spec.Containers[0].Image = "busybox:2"
	require.NoError(t, h.source.Patch(ctx, cur, client.StrategicMergeFrom(orig)))

	testenv.EventuallyTrue(t, waitTimeout, "the chaperon's template updated", func(context.Context) bool {
		pc, ok := h.chaperon(t, remote, p)
		return ok && pc.Spec.Template.Metadata.Labels["tier"] == "debug" && pc.Spec.Template.Spec.Containers[0].Image == "busybox:2"
	})
	after, _ := h.chaperon(t, remote, p)
	assert.Greater(t, after.Generation, before.Generation)
	assert.Equal(t, before.Spec.Template.Spec.Affinity, after.Spec.Template.Spec.Affinity, "the sealed placement changed")
	assert.Equal(t, before.Spec.Template.Spec.SchedulerName, after.Spec.Template.Spec.SchedulerName)
	kept := before.Spec.Template.Spec.Containers[0].DeepCopy()
	kept.Image = "busybox:2"
	assert.Empty(t, cmp.Diff(kept, &after.Spec.Template.Spec.Containers[0]), "the container beyond its image (-want,+got)")
	h.waitEvent(t, p, elector.EventDelegateUpdated)
}
