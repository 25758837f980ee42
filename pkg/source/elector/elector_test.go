package elector

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
	"github.com/fleetlet/fleetlet/pkg/proxy"
)

func TestElectionRecordNamesTheTarget(t *testing.T) {
	for _, key := range []proxy.TargetKey{{Name: "cluster-2"}, {Namespace: "team-a", Name: "edge"}} {
		p := &corev1.Pod{Status: corev1.PodStatus{Conditions: []corev1.PodCondition{{
			Type: v1alpha1.ConditionElected, Status: corev1.ConditionTrue, Message: recordOf(key, "web-abc-1234abcd").Message(),
		}}}}
		gotKey, gotName, ok := proxy.ElectedTarget(p)
		assert.Falsef(t, !ok || gotKey != key || gotName != "web-abc-1234abcd", "target.Elected = %v %q %t, want %v", gotKey, gotName, ok, key)
	}
}

func TestAnswer(t *testing.T) {
	reserved := &v1alpha1.PodChaperon{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{v1alpha1.AnnotationReserved: "node-1"}}}
	unschedulable := &v1alpha1.PodChaperon{Status: v1alpha1.PodChaperonStatus{PodStatus: corev1.PodStatus{Conditions: []corev1.PodCondition{{
		Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable, Message: "0/3 nodes are available: 3 Insufficient cpu.",
	}}}}}
	rejected := &v1alpha1.PodChaperon{Status: v1alpha1.PodChaperonStatus{Conditions: []metav1.Condition{{
		Type: v1alpha1.ConditionPodCreated, Status: metav1.ConditionFalse, Reason: v1alpha1.ReasonPodRejected, Message: "forbidden: exceeded quota",
	}}}}
	tests := []struct {
		name string
		pc   *v1alpha1.PodChaperon
		want answerKind
		msg  string
	}{
		{"nothing yet", &v1alpha1.PodChaperon{}, answerPending, ""},
		{"no chaperon", nil, answerPending, ""},
		{"reserved", reserved, answerReserved, ""},
		{"unschedulable", unschedulable, answerUnschedulable, "0/3 nodes are available: 3 Insufficient cpu."},
		{"rejected", rejected, answerRejected, "forbidden: exceeded quota"},
	}
	for _, tc := range tests {
		got, msg := answer(tc.pc)
		assert.Falsef(t, got != tc.want || msg != tc.msg, "%s: answer = %v %q, want %v %q", tc.name, got, msg, tc.want, tc.msg)
	}
}

func TestSetConditionKeepsTransitionTimeAndOthers(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	p := &corev1.Pod{Status: corev1.PodStatus{Conditions: []corev1.PodCondition{{Type: "example.com/Gate", Status: corev1.ConditionTrue}}}}
	require.True(t, setCondition(p, corev1.PodCondition{Type: v1alpha1.ConditionElected, Status: corev1.ConditionFalse, Reason: "A", Message: "m"}, t0), "a new condition was not set")
	assert.False(t, setCondition(p, corev1.PodCondition{Type: v1alpha1.ConditionElected, Status: corev1.ConditionFalse, Reason: "A", Message: "m"}, t0.Add(time.Hour)), "an unchanged condition counted as a change")
	setCondition(p, corev1.PodCondition{Type: v1alpha1.ConditionElected, Status: corev1.ConditionFalse, Reason: "B", Message: "n"}, t0.Add(time.Hour))
	c := proxy.ElectedCondition(p)
	assert.Truef(t, c.LastTransitionTime.Time.Equal(t0), "transition time moved without a status change: %v", c.LastTransitionTime)
	setCondition(p, corev1.PodCondition{Type: v1alpha1.ConditionElected, Status: corev1.ConditionTrue, Reason: "Elected"}, t0.Add(2*time.Hour))
	if c := proxy.ElectedCondition(p); !c.LastTransitionTime.Time.Equal(t0.Add(2 * time.Hour)) {
		assert.Failf(t, "transition time", "transition time = %v after a status change", c.LastTransitionTime)
	}
	assert.Falsef(t, len(p.Status.Conditions) != 2 || p.Status.Conditions[0].Type != "example.com/Gate", "another owner's condition was touched: %v", p.Status.Conditions)
}

// A target whose pending candidate was trimmed keeps saying what that
// candidate had answered (a quota, a policy) while it is kept out, and
// is kept out no longer once the round is over. Before: it said only that
// candidates were kept elsewhere, so a pod's Elected=False lost the
// quota's name for that cluster.
func TestTrimmedTargetKeepsItsAnswer(t *testing.T) {
	now := time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC)
	clk := testingclock.NewFakeClock(now)
	r := &Reconciler{opts: Options{RetryInterval: 10 * time.Second, PendingTargets: 1}, clock: clk, trimmed: map[types.UID]trimmedRound{}}
	quota := `pods "web-1" is forbidden: exceeded quota: pods, requested: pods=1, used: pods=2, limited: pods=2`
	r.noteTrimmed("uid-1", proxy.TargetKey{Name: "cluster-2"}, quota)

	until, why, out := r.keptOut("uid-1", proxy.TargetKey{Name: "cluster-2"})
	require.Falsef(t, !out || why != quota || !until.Equal(now.Add(10*time.Second)), "keptOut = %s %q %t, want kept out until %s saying %q", until, why, out, now.Add(10*time.Second), quota)
	got := keptOutReason(why, 1, until)
	assert.Falsef(t, !strings.HasPrefix(got, quota+" (") || !strings.Contains(got, "kept in the 1 best target(s)"), "keptOutReason = %q, want the quota first, then why no candidate is made", got)
	if _, _, out := r.keptOut("uid-1", proxy.TargetKey{Name: "cluster-3"}); out {
		assert.Fail(t, "a target that was not trimmed is kept out")
	}
	clk.Step(10 * time.Second)
	if _, _, out := r.keptOut("uid-1", proxy.TargetKey{Name: "cluster-2"}); out {
		assert.Fail(t, "kept out after the round")
	}
}

// Room that fits the pod lets a trimmed target back in once per round: a
// second trim there in the same round keeps it out until the round ends,
// so that a target whose pods come and go does not make and trim a
// candidate on each change.
func TestUntrimOncePerRound(t *testing.T) {
	now := time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC)
	clk := testingclock.NewFakeClock(now)
	r := &Reconciler{opts: Options{RetryInterval: 10 * time.Second, PendingTargets: 1}, clock: clk, trimmed: map[types.UID]trimmedRound{}}
	c2, c3 := proxy.TargetKey{Name: "cluster-2"}, proxy.TargetKey{Name: "cluster-3"}
	r.noteTrimmed("uid-1", c2, "0/3 nodes are available")
	assert.False(t, r.untrim("uid-1", c3), "a target that was not trimmed was let back in")
	assert.False(t, r.untrim("uid-2", c2), "a proxy with no round was let back in")
	require.True(t, r.untrim("uid-1", c2), "a trimmed target was not let back in")
	if _, _, out := r.keptOut("uid-1", c2); out {
		assert.Fail(t, "let back in, still kept out")
	}
	r.noteTrimmed("uid-1", c2, "0/3 nodes are available")
	assert.False(t, r.untrim("uid-1", c2), "let back in twice in one round")
	if _, _, out := r.keptOut("uid-1", c2); !out {
		assert.Fail(t, "trimmed again, not kept out")
	}
	clk.Step(10 * time.Second)
	r.noteTrimmed("uid-1", c2, "0/3 nodes are available")
	assert.True(t, r.untrim("uid-1", c2), "a new round did not let the target back in")
}

func TestShortOfRoom(t *testing.T) {
	for msg, want := range map[string]bool{
		"0/3 nodes are available: 3 Insufficient cpu.":                                                     true,
		"0/3 nodes are available: 1 Too many pods, 2 node(s) had untolerated taint {gpu: true}.":           true,
		"0/3 nodes are available: 3 Insufficient example.com/gpu. preemption: 0/3 nodes are available.":    true,
		"0/3 nodes are available: 3 node(s) didn't match Pod's node affinity/selector.":                    false,
		"0/3 nodes are available: 3 node(s) had untolerated taint {node-role.kubernetes.io/control-plane}": false,
		"": false,
	} {
		assert.Equal(t, want, shortOfRoom(msg), msg)
	}
}

func TestRoomFor(t *testing.T) {
	rl := func(pairs ...string) corev1.ResourceList {
		out := corev1.ResourceList{}
		for i := 0; i < len(pairs); i += 2 {
			out[corev1.ResourceName(pairs[i])] = resource.MustParse(pairs[i+1])
		}
		return out
	}
	pod := rl("cpu", "100m", "memory", "1Gi")
	tests := []struct {
		name         string
		alloc, req   corev1.ResourceList
		largest      corev1.ResourceList
		want, noneAt bool
	}{
		{name: "no summary", noneAt: true},
		{name: "room in all", alloc: rl("cpu", "4", "memory", "8Gi", "pods", "10"), req: rl("cpu", "2", "memory", "4Gi", "pods", "7"), want: true},
		{name: "exactly the pod", alloc: rl("cpu", "1", "memory", "2Gi"), req: rl("cpu", "900m", "memory", "1Gi"), want: true},
		{name: "too little cpu", alloc: rl("cpu", "1", "memory", "8Gi"), req: rl("cpu", "950m")},
		{name: "no pod slot", alloc: rl("cpu", "4", "memory", "8Gi", "pods", "10"), req: rl("pods", "10")},
		{name: "a resource the summary does not list is no room", alloc: rl("cpu", "4")},
		{name: "room in all, on no one node", alloc: rl("cpu", "4", "memory", "8Gi"), largest: rl("cpu", "50m", "memory", "4Gi", "pods", "5")},
		{name: "room on a node", alloc: rl("cpu", "4", "memory", "8Gi"), largest: rl("cpu", "500m", "memory", "2Gi", "pods", "5"), want: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var summary *v1alpha1.ClusterSummaryStatus
			if !tc.noneAt {
				summary = &v1alpha1.ClusterSummaryStatus{Allocatable: tc.alloc, Requested: tc.req, LargestFree: tc.largest}
			}
			assert.Equal(t, tc.want, roomFor(summary, pod))
		})
	}
}
