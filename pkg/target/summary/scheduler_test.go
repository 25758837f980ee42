package summary

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
	"github.com/fleetlet/fleetlet/pkg/testenv"
)

var testLease = types.NamespacedName{Namespace: "fleetlet-system", Name: "fleetlet-candidate-scheduler"}

func schedulerLease(key types.NamespacedName, holder string, renew time.Time, seconds int32) *coordinationv1.Lease {
	l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name},
		Spec: coordinationv1.LeaseSpec{LeaseDurationSeconds: ptr.To(seconds), RenewTime: ptr.To(metav1.NewMicroTime(renew))}}
	if holder != "" {
		l.Spec.HolderIdentity = ptr.To(holder)
	}
	return l
}

// The check follows the scheduler's Lease through its life, timing
// renewals by its own clock (a scheduler clock far ahead or behind decides
// nothing), and reads the Lease at most once per window.
func TestSchedulerCheck(t *testing.T) {
	ctx := t.Context()
	clk := clocktesting.NewFakePassiveClock(time.Date(2026, 12, 6, 9, 0, 0, 0, time.UTC))
	gets := 0
	var getErr error
	c := fake.NewClientBuilder().WithScheme(testenv.Scheme()).WithInterceptorFuncs(interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			gets++
			if getErr != nil {
				return getErr
			}
			return c.Get(ctx, key, obj, opts...)
		},
	}).Build()
	s := &schedulerCheck{lease: testLease, reader: c, clock: clk}
	step := func(what string, wantStatus metav1.ConditionStatus, wantReason string, wantGets int) time.Duration {
		t.Helper()
		cond, recheck := s.condition(ctx)
		assert.Equalf(t, v1alpha1.ConditionCandidateScheduler, cond.Type, "%s: type", what)
		assert.Equalf(t, wantStatus, cond.Status, "%s: status (%s)", what, cond.Message)
		assert.Equalf(t, wantReason, cond.Reason, "%s: reason (%s)", what, cond.Message)
		assert.Equalf(t, wantGets, gets, "%s: Lease reads so far", what)
		assert.Positivef(t, recheck, "%s: recheck", what)
		return recheck
	}
	set := func(l *coordinationv1.Lease) {
		t.Helper()
		var cur coordinationv1.Lease
		if err := c.Get(ctx, testLease, &cur); err == nil {
			l.ResourceVersion = cur.ResourceVersion
			require.NoError(t, c.Update(ctx, l))
		} else {
			require.NoError(t, c.Create(ctx, l))
		}
		gets-- // the read above
	}

	recheck := step("no Lease", metav1.ConditionFalse, v1alpha1.ReasonLeaseMissing, 1)
	assert.Equal(t, schedulerRecheckDown, recheck)
	step("no Lease, read again within the window", metav1.ConditionFalse, v1alpha1.ReasonLeaseMissing, 1)

	// The scheduler's clock is an hour behind: its renewTime looks old,
	// and yet it is a renewal.
	clk.SetTime(clk.Now().Add(schedulerRecheckDown))
	set(schedulerLease(testLease, "sched-a", clk.Now().Add(-time.Hour), 15))
	recheck = step("held", metav1.ConditionTrue, v1alpha1.ReasonLeaseHeld, 2)
	assert.Equal(t, 15*time.Second+schedulerRecheckMargin, recheck, "a held Lease is read again once it would have expired")
	first, _ := s.condition(ctx)

	clk.SetTime(clk.Now().Add(10 * time.Second))
	step("held, within its window", metav1.ConditionTrue, v1alpha1.ReasonLeaseHeld, 2)
	clk.SetTime(clk.Now().Add(6 * time.Second))
	set(schedulerLease(testLease, "sched-a", clk.Now().Add(-time.Hour), 15))
	step("renewed", metav1.ConditionTrue, v1alpha1.ReasonLeaseHeld, 3)
	again, _ := s.condition(ctx)
	assert.Equal(t, first.Message, again.Message, "a renewal changes nothing in the condition (no summary write)")

	// Not renewed any more: expired once a lease duration has passed by
	// this clock since the last renewal was seen.
	clk.SetTime(clk.Now().Add(16 * time.Second))
	step("not renewed for a lease duration", metav1.ConditionFalse, v1alpha1.ReasonLeaseExpired, 4)

	clk.SetTime(clk.Now().Add(schedulerRecheckDown))
	set(schedulerLease(testLease, "sched-b", clk.Now().Add(time.Hour), 15))
	step("taken over by another replica", metav1.ConditionTrue, v1alpha1.ReasonLeaseHeld, 5)

	clk.SetTime(clk.Now().Add(16 * time.Second))
	set(schedulerLease(testLease, "", clk.Now(), 1))
	step("released", metav1.ConditionFalse, v1alpha1.ReasonLeaseReleased, 6)

	clk.SetTime(clk.Now().Add(schedulerRecheckDown))
	getErr = apierrors.NewForbidden(coordinationv1.Resource("leases"), testLease.Name, errors.New("no"))
	recheck = step("unreadable", metav1.ConditionUnknown, v1alpha1.ReasonLeaseUnreadable, 7)
	assert.Equal(t, schedulerRecheckUnknown, recheck)
}

// With the Lease named, the ClusterSummary says whether the candidate
// scheduler runs, follows it when it stops and starts, and keeps its Ready
// condition; without (leader election off), it says nothing, and a
// condition written before is removed. Before: the summary never said, and
// a cluster whose scheduler had stopped took every new candidate.
func TestClusterSummarySchedulerCondition(t *testing.T) {
	testenv.Need(t, env)
	c := newClient(t)
	ns := createNamespace(t, c)
	lease := types.NamespacedName{Namespace: ns, Name: "fleetlet-candidate-scheduler"}
	waitScheduler := func(what string, want metav1.ConditionStatus, reason string) {
		t.Helper()
		waitFor(t, what, func() string {
			cs := &v1alpha1.ClusterSummary{}
			if err := c.Get(t.Context(), client.ObjectKey{Name: v1alpha1.ClusterSummaryName}, cs); err != nil {
				return err.Error()
			}
			if meta.FindStatusCondition(cs.Status.Conditions, v1alpha1.ConditionReady) == nil {
				return "no Ready condition"
			}
			cond := meta.FindStatusCondition(cs.Status.Conditions, v1alpha1.ConditionCandidateScheduler)
			switch {
			case cond == nil && want == "":
				return ""
			case cond == nil:
				return "no CandidateSchedulerRunning condition"
			case want == "":
				return fmt.Sprintf("CandidateSchedulerRunning %s/%s still there", cond.Status, cond.Reason)
			case cond.Status != want || cond.Reason != reason:
				return fmt.Sprintf("CandidateSchedulerRunning %s/%s: %s", cond.Status, cond.Reason, cond.Message)
			}
			return ""
		})
	}

	t.Run("with the Lease", func(t *testing.T) {
		startManagerWith(t, lease)
		waitScheduler("the scheduler not started", metav1.ConditionFalse, v1alpha1.ReasonLeaseMissing)

		l := schedulerLease(lease, "sched-a", time.Now(), 3)
		require.NoError(t, c.Create(t.Context(), l))
		waitScheduler("the scheduler holding its Lease", metav1.ConditionTrue, v1alpha1.ReasonLeaseHeld)
		// Nobody renews it: expired after its 3 s.
		waitScheduler("the Lease expired", metav1.ConditionFalse, v1alpha1.ReasonLeaseExpired)

		require.NoError(t, c.Get(t.Context(), lease, l))
		l.Spec.RenewTime = ptr.To(metav1.NewMicroTime(time.Now()))
		require.NoError(t, c.Update(t.Context(), l))
		waitScheduler("the Lease renewed", metav1.ConditionTrue, v1alpha1.ReasonLeaseHeld)
	})
	t.Run("without leader election", func(t *testing.T) {
		startManager(t)
		waitScheduler("the condition removed", "", "")
	})
}
