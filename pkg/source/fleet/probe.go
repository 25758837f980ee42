// probe: the loop that asks each target whether it answers, runs fleetlet
// and accepts the credentials, and renews this source's heartbeat there.

package fleet

import (
	"context"
	"errors"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
)

// probeLoop probes at once, then every ProbeInterval while the target is
// healthy, and with exponential backoff from ProbeBackoffInitial up to
// ProbeInterval while it is not. A Ready target turns NotReady only after
// ProbeFailureThreshold failed probes in a row. A probe that ran out of
// time (or was told to come back later) while the target answered other
// requests of this process is not a failure: the target is busy, maybe
// with this very source's work, and answers; calling it Unreachable would
// take it out of every election and taint its virtual node, which adds
// the work of moving elections to an overload (measured at ten targets:
// docs/performance.md).
func (c *Cluster) probeLoop(ctx context.Context) {
	backoff := c.opts.ProbeBackoffInitial
	failures := 0
	for {
		start := c.clock.Now()
		h, summary, busy := c.probe(ctx)
		if ctx.Err() != nil {
			return
		}
		observeProbe(c.key, h, c.clock.Since(start).Seconds())
		answering := !h.Ready && busy && c.answers.since(start)
		switch {
		case h.Ready:
			failures = 0
		case answering && c.Health().Ready:
			ctrl.Log.WithName("target").V(1).Info("A probe ran out of time while the target answered other requests; it stays Ready",
				"target", c.key.String(), "reason", h.Reason, "message", h.Message)
		default:
			failures++
		}
		if h.Ready || failures >= c.opts.ProbeFailureThreshold || !c.Health().Ready {
			c.record(h, summary)
		} else if !answering {
			ctrl.Log.WithName("target").V(1).Info("A probe failed; the target stays Ready until the failure threshold",
				"target", c.key.String(), "failures", failures, "threshold", c.opts.ProbeFailureThreshold, "reason", h.Reason, "message", h.Message)
		}
		observeHealth(c.key, c.Health())
		wait := c.opts.ProbeInterval
		if !h.Ready && !answering {
			wait = backoff
			backoff = min(2*backoff, c.opts.ProbeInterval)
		} else {
			backoff = c.opts.ProbeBackoffInitial
		}
		select {
		case <-ctx.Done():
			return
		case <-c.clock.After(wait):
		}
	}
}

// record stores a probe's result and notifies when something changed that a
// user or the virtual node would see.
func (c *Cluster) record(h Health, summary *v1alpha1.ClusterSummaryStatus) {
	c.mu.Lock()
	changed := h.Ready != c.health.Ready || h.Reason != c.health.Reason || h.Message != c.health.Message
	if h.Ready != c.health.Ready {
		c.turns++
	}
	if summary != nil {
		if c.summary == nil || !summaryEqual(c.summary, summary) {
			changed = true
		}
		if c.summary == nil || !timeEqual(c.summary.ObservedTime, summary.ObservedTime) {
			c.summaryMoved = c.clock.Now()
		}
		c.summary = summary
	}
	c.health = h
	if stale := c.staleLocked(); stale != c.wasStale {
		c.wasStale, changed = stale, true
	}
	c.mu.Unlock()
	if changed {
		c.notify(c.key)
	}
}

// probe reads the target's ClusterSummary — which proves it is reachable, the
// credentials are accepted and fleetlet runs there — and renews the
// heartbeat Lease. busy tells a failure that is the target's slowness: the
// probe's time ran out, or the API server asked to come back later.
func (c *Cluster) probe(ctx context.Context) (h Health, summary *v1alpha1.ClusterSummaryStatus, busy bool) {
	now := c.clock.Now()
	ctx, cancel := context.WithTimeout(context.WithValue(ctx, probeRequest{}, true), c.opts.ProbeTimeout)
	defer cancel()
	var cs v1alpha1.ClusterSummary
	if err := c.client.Get(ctx, types.NamespacedName{Name: v1alpha1.ClusterSummaryName}, &cs); err != nil {
		reason, msg := classify(err, "reading the ClusterSummary", c.key.Namespace != "")
		return Health{Reason: reason, Message: msg, LastProbe: now}, nil, isBusy(ctx, err)
	}
	if !c.conn.self {
		if err := c.renewHeartbeat(ctx); err != nil {
			reason, msg := classify(err, fmt.Sprintf("renewing the heartbeat Lease %s/%s", c.conn.leaseNamespace, HeartbeatLeaseName(c.opts.SourceName)), c.key.Namespace != "")
			return Health{Reason: reason, Message: msg, LastProbe: now}, cs.Status.DeepCopy(), isBusy(ctx, err)
		}
	}
	return Health{Ready: true, Reason: v1alpha1.ReasonConnected, Message: "the target answers and runs fleetlet", LastProbe: now}, cs.Status.DeepCopy(), false
}

// isBusy tells whether a probe's error is the target's slowness: the
// probe's own time ran out, or the API server said it is too busy
// (429) or timed out itself (504).
func isBusy(probe context.Context, err error) bool {
	return errors.Is(probe.Err(), context.DeadlineExceeded) ||
		apierrors.IsTooManyRequests(err) || apierrors.IsServerTimeout(err) || apierrors.IsTimeout(err)
}

// renewHeartbeat creates or renews this source's Lease in the target.
func (c *Cluster) renewHeartbeat(ctx context.Context) error {
	now := metav1.NewMicroTime(c.clock.Now())
	name := HeartbeatLeaseName(c.opts.SourceName)
	var lease coordinationv1.Lease
	err := c.client.Get(ctx, types.NamespacedName{Namespace: c.conn.leaseNamespace, Name: name}, &lease)
	if apierrors.IsNotFound(err) {
		lease = coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{
				Namespace: c.conn.leaseNamespace,
				Name:      name,
				Labels:    map[string]string{v1alpha1.LabelParentCluster: c.opts.SourceName},
			},
			Spec: coordinationv1.LeaseSpec{
				HolderIdentity:       ptr.To(c.opts.SourceName),
				LeaseDurationSeconds: ptr.To(int32(c.opts.HeartbeatDuration / time.Second)),
				AcquireTime:          &now,
				RenewTime:            &now,
			},
		}
		return c.client.Create(ctx, &lease)
	}
	if err != nil {
		return err
	}
	lease.Spec.RenewTime = &now
	lease.Spec.HolderIdentity = ptr.To(c.opts.SourceName)
	lease.Spec.LeaseDurationSeconds = ptr.To(int32(c.opts.HeartbeatDuration / time.Second))
	return c.client.Update(ctx, &lease)
}
