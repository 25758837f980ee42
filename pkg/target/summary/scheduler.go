// scheduler: whether the cluster's candidate scheduler runs, told from its
// leader election Lease, for the ClusterSummary's CandidateSchedulerRunning
// condition.

package summary

import (
	"context"
	"fmt"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
)

const (
	// schedulerRecheckDown is how often a Lease that says the scheduler
	// does not run (missing, released, expired) is read again: a
	// scheduler that starts is seen this soon.
	schedulerRecheckDown = 5 * time.Second
	// schedulerRecheckUnknown is how often an unreadable Lease is read
	// again.
	schedulerRecheckUnknown = 30 * time.Second
	// schedulerRecheckMargin is how long after a held Lease would expire,
	// if not renewed, it is read again: the renewal that came meanwhile is
	// seen as a renewal, its absence as an expiry.
	schedulerRecheckMargin = time.Second
)

// schedulerCheck tells whether the candidate scheduler runs: whether it
// holds its leader election Lease and renews it. The Lease is read live
// (the manager's cache holds only the sources' heartbeat Leases), at most
// once per window: once per lease duration while it is renewed, every
// schedulerRecheckDown while it is not.
//
// Renewals are timed by this process's clock, as leader election does:
// a renewTime is taken as new when it changes, so that a clock skew
// between this manager and the scheduler decides nothing. A manager that
// starts while the scheduler is down sees the last renewTime as new, and
// the expiry one lease duration later.
type schedulerCheck struct {
	lease  types.NamespacedName
	reader client.Reader
	clock  clock.PassiveClock

	mu sync.Mutex
	// renew and holder are what the Lease said at the last read; seen is
	// when, by this clock, renew was first read.
	renew  time.Time
	holder string
	seen   time.Time
	// cond is the last answer, valid until validUntil.
	cond       metav1.Condition
	validUntil time.Time
}

// condition is the CandidateSchedulerRunning condition (without
// observedGeneration and lastTransitionTime), and how long it holds before
// the Lease is read again.
func (s *schedulerCheck) condition(ctx context.Context) (metav1.Condition, time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clock.Now()
	if now.Before(s.validUntil) {
		return s.cond, s.validUntil.Sub(now)
	}
	var lease coordinationv1.Lease
	err := s.reader.Get(ctx, s.lease, &lease)
	var recheck time.Duration
	s.cond, recheck = s.judge(&lease, err, now)
	s.validUntil = now.Add(recheck)
	return s.cond, recheck
}

// judge reads the Lease (or the error reading it) at now.
func (s *schedulerCheck) judge(lease *coordinationv1.Lease, err error, now time.Time) (metav1.Condition, time.Duration) {
	down := func(reason, msg string) (metav1.Condition, time.Duration) {
		return metav1.Condition{Type: v1alpha1.ConditionCandidateScheduler, Status: metav1.ConditionFalse, Reason: reason,
			Message: msg + ": no new candidate is sent to this cluster; what runs here keeps running"}, schedulerRecheckDown
	}
	switch {
	case apierrors.IsNotFound(err):
		return down(v1alpha1.ReasonLeaseMissing, fmt.Sprintf("the candidate scheduler's Lease %s does not exist: it has not started", s.lease))
	case err != nil:
		return metav1.Condition{Type: v1alpha1.ConditionCandidateScheduler, Status: metav1.ConditionUnknown, Reason: v1alpha1.ReasonLeaseUnreadable,
			Message: fmt.Sprintf("reading the candidate scheduler's Lease %s: %v", s.lease, err)}, schedulerRecheckUnknown
	}
	holder := ""
	if lease.Spec.HolderIdentity != nil {
		holder = *lease.Spec.HolderIdentity
	}
	if holder == "" {
		return down(v1alpha1.ReasonLeaseReleased, fmt.Sprintf("the candidate scheduler's Lease %s was released and no replica holds it", s.lease))
	}
	var renew time.Time
	if lease.Spec.RenewTime != nil {
		renew = lease.Spec.RenewTime.Time
	}
	duration := 15 * time.Second
	if d := lease.Spec.LeaseDurationSeconds; d != nil && *d > 0 {
		duration = time.Duration(*d) * time.Second
	}
	if holder != s.holder || !renew.Equal(s.renew) || s.seen.IsZero() {
		s.holder, s.renew, s.seen = holder, renew, now
	}
	if age := now.Sub(s.seen); age > duration {
		return down(v1alpha1.ReasonLeaseExpired, fmt.Sprintf("the candidate scheduler's Lease %s, held by %s, was last renewed at %s and not since (lease duration %s)",
			s.lease, holder, renew.UTC().Format(time.RFC3339), duration))
	}
	// The message names no time, so that a renewal changes nothing in the
	// summary.
	return metav1.Condition{Type: v1alpha1.ConditionCandidateScheduler, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonLeaseHeld,
		Message: fmt.Sprintf("the candidate scheduler holds its Lease %s (%s) and renews it", s.lease, holder)}, s.seen.Add(duration + schedulerRecheckMargin).Sub(now)
}
