// election: phase electing: rank the reserved candidates and write the record first.

package elector

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
	"github.com/fleetlet/fleetlet/pkg/crashpoint"
	"github.com/fleetlet/fleetlet/pkg/devices"
	"github.com/fleetlet/fleetlet/pkg/follow"
	"github.com/fleetlet/fleetlet/pkg/placement"
	"github.com/fleetlet/fleetlet/pkg/proxy"
	"github.com/fleetlet/fleetlet/pkg/summary"
	"github.com/fleetlet/fleetlet/pkg/target"
)

// preferredDeadlineFactor stretches the election deadline while a target
// of a higher priority, or one the pod prefers (a higher placement score
// than every offer), has not answered: a preference is not lost to a
// faster cluster, and a preferred cluster that does not answer holds the
// pod up only this long.
const preferredDeadlineFactor = 5

// elect creates candidates in every eligible target, and elects one when
// they have answered.
func (r *Reconciler) elect(ctx context.Context, pod *corev1.Pod) (reconcile.Result, error) {
	log := ctrl.LoggerFrom(ctx)
	userSpec, err := r.opts.Spec(pod)
	if err != nil {
		// Tried again: the seal keys may be back (a Secret restored, a
		// rotation reaching this replica).
		return r.requeueAfter(pod, requeueInvalidSpec, r.opts.RetryInterval), r.setNotElected(ctx, pod, reasonInvalidSpec, fmt.Sprintf("the sealed source-spec cannot be trusted: %v", err), EventInvalidSpec)
	}
	clusters, err := ParseClusterSelector(pod)
	if err != nil {
		return reconcile.Result{}, r.setNotElected(ctx, pod, reasonInvalidSelector, err.Error(), EventInvalidSelector)
	}
	var refs follow.RefSet
	if r.opts.Follower != nil {
		if refs, err = follow.Refs(pod, userSpec); err == nil {
			err = r.opts.Follower.Check(refs)
		}
		if err != nil {
			var refusal *follow.Refusal
			if !errors.As(err, &refusal) {
				return reconcile.Result{}, err
			}
			// A malformed annotation, a kind that is not allowed or
			// not namespaced: no cluster may run the pod.
			return reconcile.Result{}, r.setNotElected(ctx, pod, reasonFollowRefused, err.Error(), EventFollowRefused)
		}
	}
	place, stop, err := r.claimsOf(ctx, pod, userSpec)
	if stop != nil {
		return *stop, err
	}
	pl := placement.Split(userSpec, pod.Labels)
	states := r.targets(ctx, pod, userSpec, clusters, pl)
	keepWithClaims(place, states)
	need, err := r.devicesOf(ctx, pod, userSpec)
	if err != nil {
		return reconcile.Result{}, err
	}
	keepWithDevices(need, states)
	gs, stop, err := r.groupOf(ctx, pod, states)
	if stop != nil {
		return *stop, err
	}
	requests := summary.PodRequests(&corev1.Pod{Spec: *userSpec})
	r.narrow(ctx, pod, states, requests)

	// Candidates in every eligible target, in parallel.
	var wg sync.WaitGroup
	for _, ts := range states {
		if !ts.eligible {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			ts.chaperon, ts.reason = r.ensureCandidate(ctx, pod, refs, place, ts)
			if ts.chaperon == nil {
				ts.eligible = false
			}
		}()
	}
	wg.Wait()

	var offers []Offer
	var inflight map[string]corev1.ResourceList
	answered, eligible := 0, 0
	// pending is the best rank (priority, then score) of the targets yet
	// to answer.
	var pending *Offer
	byKey := map[string]*targetState{}
	for _, ts := range states {
		byKey[ts.key.String()] = ts
		if !ts.eligible {
			continue
		}
		eligible++
		switch a, msg := answer(ts.chaperon); a {
		case answerPending:
			if o := (Offer{Priority: ts.cluster.Priority(), Score: ts.score}); pending == nil || ranksAbove(o, *pending) {
				pending = &o
			}
		case answerReserved:
			answered++
			if inflight == nil {
				inflight = r.inflight(ctx)
			}
			offers = append(offers, Offer{Target: ts.key.String(), Score: ts.score, Priority: ts.cluster.Priority(), FreeShare: FreeShareAfter(withRequested(ts.cluster.Summary(), inflight[ts.key.String()]), requests)})
		case answerUnschedulable, answerRejected:
			answered++
			ts.reason = msg
		}
	}

	if len(offers) > 0 && gs.undecided() {
		// No member elected yet: only a target where enough members are
		// reserved may take any of them.
		if offers, stop, err = r.groupOffers(ctx, pod, gs, offers, byKey, states); stop != nil {
			return *stop, err
		}
		answered, eligible = 1, 1
	}
	if len(offers) > 0 {
		r.mu.Lock()
		first, ok := r.firstReservation[pod.UID]
		if !ok {
			first = r.clock.Now()
			r.firstReservation[pod.UID] = first
		}
		r.mu.Unlock()
		winner := Rank(pod.UID, offers)[0]
		deadline := r.opts.ElectionDeadline
		if pending != nil && ranksAbove(*pending, winner) {
			// A target of a higher priority, or one the pod prefers, has
			// not answered yet: it may still take the pod, so its answer
			// is worth a longer wait.
			deadline *= preferredDeadlineFactor
		}
		if wait := deadline - r.clock.Since(first); answered < eligible && wait > 0 {
			return r.requeueAfter(pod, requeueAwaitingAnswers, wait), nil
		}
		unlock := func() {}
		if pl.CountsPeers() {
			// Spread or anti-affinity over clusters: one such choice at a
			// time, each counting the ones before it.
			r.peers.mu.Lock()
			unlock = r.peers.mu.Unlock
			fitting := r.fitPeers(ctx, pod, pl, states, byKey, offers)
			if len(fitting) == 0 {
				unlock()
				return r.requeueAfter(pod, requeuePeers, r.opts.RetryInterval), r.setNotElected(ctx, pod, reasonNoClusters, reasons(states), EventNotSchedulable)
			}
			winner = Rank(pod.UID, fitting)[0]
		}
		ts := byKey[winner.Target]
		if place.Probing() {
			unlock()
			return r.placeClaims(ctx, pod, place, ts, states)
		}
		log.V(2).Info("Electing a candidate", "target", winner.Target, "chaperon", ts.chaperon.Name, "offers", len(offers), "eligible", eligible)
		if err := devices.Place(ctx, r.client, need.Shared, winner.Target); err != nil {
			unlock()
			if apierrors.IsConflict(err) {
				// Another pod sharing a claim placed it meanwhile.
				return r.requeueAfter(pod, requeueConflict, requeueSoon), nil
			}
			return reconcile.Result{}, err
		}
		recorded, err := r.recordElection(ctx, pod, ts)
		if err == nil && pl.CountsPeers() {
			r.peers.note(pod.UID, ts.key, r.clock.Now())
		}
		unlock()
		if err != nil {
			if apierrors.IsConflict(err) {
				// The proxy changed since it was read: decide again on
				// the fresh object (the record is never written blind).
				return r.requeueAfter(pod, requeueConflict, requeueSoon), nil
			}
			return reconcile.Result{}, err
		}
		electionsTotal.WithLabelValues("elected").Inc()
		crashpoint.Hit(crashpoint.AfterRecord)
		r.mu.Lock()
		if first, ok := r.firstReservation[pod.UID]; ok {
			electionDuration.Observe(r.clock.Since(first).Seconds())
		}
		r.mu.Unlock()
		r.forget(pod.UID)
		// The record stands: this pass goes on from the proxy the write
		// returned, to mark the winner and remove the losers.
		return r.finishElection(ctx, recorded, proxy.ElectedCondition(recorded))
	}

	if answered < eligible {
		// Candidates still deciding; their chaperons' events bring the
		// proxy back. A slow safety requeue covers a lost event.
		return r.requeueAfter(pod, requeueSafety, r.opts.ResyncInterval), nil
	}
	// No candidate is schedulable anywhere: keep pending candidates in the
	// K best targets only, and say why for each cluster.
	r.trimPending(ctx, pod, states, requests)
	retry, why := r.opts.RetryInterval, requeueNoCluster
	if slices.ContainsFunc(states, func(ts *targetState) bool { return ts.soon }) {
		retry, why = namespaceAdmitWait, requeueNamespace
	}
	return r.requeueAfter(pod, why, retry), r.setNotElected(ctx, pod, reasonNoClusters, reasons(states), EventNotSchedulable)
}

// reasons says, per cluster, why it does not run the pod.
func reasons(states []*targetState) string {
	var parts []string
	for _, s := range states {
		if s.reason == "" {
			s.reason = "no answer yet"
		}
		parts = append(parts, fmt.Sprintf("%s: %s", s.key, s.reason))
	}
	if len(parts) == 0 {
		return "no target is connected"
	}
	return strings.Join(parts, "; ")
}

// recordElection writes the decision on the source first: Elected=True
// naming the target and the chaperon, with the pod's resourceVersion as a
// precondition. Only this record counts after a crash or a leader change.
// It returns the proxy as the API server wrote it.
func (r *Reconciler) recordElection(ctx context.Context, pod *corev1.Pod, ts *targetState) (*corev1.Pod, error) {
	p := pod.DeepCopy()
	setCondition(p, corev1.PodCondition{
		Type:    v1alpha1.ConditionElected,
		Status:  corev1.ConditionTrue,
		Reason:  reasonElected,
		Message: recordOf(ts.key, ts.chaperon.Name).Message(),
	}, r.clock.Now())
	if err := r.client.Status().Update(ctx, p); err != nil {
		return nil, fmt.Errorf("recording the election of %s: %w", ts.key, err)
	}
	r.writes.Wrote(pod.UID, pod.ResourceVersion)
	r.recorder.Eventf(pod, nil, corev1.EventTypeNormal, EventElected, "Elect", "Elected %s (candidate %s)", ts.key, ts.chaperon.Name)
	return p, nil
}

// recordOf is the election record naming a target's candidate.
func recordOf(key target.Key, chaperon string) proxy.Record {
	return proxy.Record{TargetNamespace: key.Namespace, TargetName: key.Name, Chaperon: chaperon}
}

// keyOf is the elected target of a record.
func keyOf(r proxy.Record) target.Key { return target.KeyOf(r) }

func setCondition(p *corev1.Pod, c corev1.PodCondition, now time.Time) bool {
	c.LastProbeTime = metav1.Time{}
	for i, old := range p.Status.Conditions {
		if old.Type != c.Type {
			continue
		}
		if old.Status == c.Status && old.Reason == c.Reason && old.Message == c.Message {
			return false
		}
		if old.Status == c.Status {
			c.LastTransitionTime = old.LastTransitionTime
		} else {
			c.LastTransitionTime = metav1.NewTime(now)
		}
		p.Status.Conditions[i] = c
		return true
	}
	c.LastTransitionTime = metav1.NewTime(now)
	p.Status.Conditions = append(p.Status.Conditions, c)
	return true
}

// setNotElected records why the proxy has no delegate yet, with an Event
// when that changes.
func (r *Reconciler) setNotElected(ctx context.Context, pod *corev1.Pod, reason, msg, eventReason string) error {
	p := pod.DeepCopy()
	if !setCondition(p, corev1.PodCondition{Type: v1alpha1.ConditionElected, Status: corev1.ConditionFalse, Reason: reason, Message: msg}, r.clock.Now()) {
		return nil
	}
	if err := r.client.Status().Update(ctx, p); err != nil {
		return client.IgnoreNotFound(err)
	}
	r.writes.Wrote(pod.UID, pod.ResourceVersion)
	electionsTotal.WithLabelValues(strings.ToLower(reason)).Inc()
	r.recorder.Eventf(pod, nil, corev1.EventTypeWarning, eventReason, "Elect", "%s", msg)
	return nil
}
