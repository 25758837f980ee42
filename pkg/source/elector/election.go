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
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
	"github.com/fleetlet/fleetlet/pkg/crashpoint"
	"github.com/fleetlet/fleetlet/pkg/proxy"
	"github.com/fleetlet/fleetlet/pkg/source/claims"
	"github.com/fleetlet/fleetlet/pkg/source/devices"
	"github.com/fleetlet/fleetlet/pkg/source/follow"
	"github.com/fleetlet/fleetlet/pkg/source/placement"
)

// preferredDeadlineFactor stretches the election deadline while a target
// of a higher priority, or one the pod prefers (a higher placement score
// than every offer), has not answered: a preference is not lost to a
// faster cluster, and a preferred cluster that does not answer holds the
// pod up only this long.
const preferredDeadlineFactor = 5

// elect creates candidates in every eligible target, and elects one when
// they have answered. A pass runs in phases: what the pod asks for and
// where it may go (prepare), a candidate in every eligible target
// (ensureCandidates), what the candidates answered (tally), and then an
// election among the reserved (decide) or, when none is schedulable
// anywhere, the reasons why (noCluster).
func (r *Reconciler) elect(ctx context.Context, pod *corev1.Pod) (reconcile.Result, error) {
	rd, stop, err := r.prepare(ctx, pod)
	if stop != nil || err != nil {
		r.admission.release(client.ObjectKeyFromObject(pod))
		return ptr.Deref(stop, reconcile.Result{}), err
	}
	if !r.hasTurn(pod, rd) {
		// Its turn comes when elections before it finish (their
		// release enqueues it); the timer only covers a lost wake.
		return r.requeueAfter(pod, requeueAdmission, r.opts.RetryInterval), nil
	}
	r.ensureCandidates(ctx, pod, rd)
	t := r.tally(ctx, rd)
	if len(t.offers) > 0 && rd.group.undecided() {
		// No member elected yet: only a target where enough members are
		// reserved may take any of them.
		if t.offers, stop, err = r.groupOffers(ctx, pod, rd.group, t.offers, t.byKey, rd.states); stop != nil {
			return *stop, err
		}
		t.answered, t.eligible = 1, 1
	}
	if len(t.offers) > 0 {
		return r.decide(ctx, pod, rd, t)
	}
	if t.answered < t.eligible {
		// Candidates still deciding; their chaperons' events bring the
		// proxy back. A slow safety requeue covers a lost event.
		return r.requeueAfter(pod, requeueSafety, r.opts.ResyncInterval), nil
	}
	return r.noCluster(ctx, pod, rd)
}

// round is what one election pass knows of the pod before any candidate:
// its spec, what follows it, its claims, devices and group, and every
// target's view.
type round struct {
	refs     follow.RefSet
	place    claims.Placement
	pl       placement.Placement
	need     devices.Need
	group    groupState
	states   []*targetState
	requests corev1.ResourceList
}

// prepare reads what the pod asks for and which targets may take it. A
// non-nil Result (or an error) ends the pass: the pod cannot be elected
// now, and says why.
func (r *Reconciler) prepare(ctx context.Context, pod *corev1.Pod) (*round, *reconcile.Result, error) {
	userSpec, err := r.opts.Spec(pod)
	if err != nil {
		// Tried again: the seal keys may be back (a Secret restored, a
		// rotation reaching this replica).
		res := r.requeueAfter(pod, requeueInvalidSpec, r.opts.RetryInterval)
		return nil, &res, r.setNotElected(ctx, pod, reasonInvalidSpec, fmt.Sprintf("the sealed source-spec cannot be trusted: %v", err), EventInvalidSpec)
	}
	clusters, err := ParseClusterSelector(pod)
	if err != nil {
		return nil, &reconcile.Result{}, r.setNotElected(ctx, pod, reasonInvalidSelector, err.Error(), EventInvalidSelector)
	}
	rd := &round{}
	if r.opts.Follower != nil {
		if rd.refs, err = follow.Refs(pod, userSpec); err == nil {
			err = r.opts.Follower.Check(rd.refs)
		}
		if err != nil {
			var refusal *follow.Refusal
			if !errors.As(err, &refusal) {
				return nil, nil, err
			}
			// A malformed annotation, a kind that is not allowed or
			// not namespaced: no cluster may run the pod.
			return nil, &reconcile.Result{}, r.setNotElected(ctx, pod, reasonFollowRefused, err.Error(), EventFollowRefused)
		}
	}
	var stop *reconcile.Result
	if rd.place, stop, err = r.claimsOf(ctx, pod, userSpec); stop != nil {
		return nil, stop, err
	}
	rd.pl = placement.Split(userSpec, pod.Labels)
	rd.states = r.targets(ctx, pod, userSpec, clusters, rd.pl)
	keepWithClaims(rd.place, rd.states)
	if rd.need, err = r.devicesOf(ctx, pod, userSpec); err != nil {
		return nil, nil, err
	}
	keepWithDevices(rd.need, rd.states)
	if rd.group, stop, err = r.groupOf(ctx, pod, rd.states); stop != nil {
		return nil, stop, err
	}
	rd.requests = proxy.PodRequests(&corev1.Pod{Spec: *userSpec})
	markNoNodeFits(rd.states, rd.requests)
	for _, ts := range rd.states {
		ts.domain = ts.eligible
	}
	r.narrow(ctx, pod, rd)
	return rd, nil, nil
}

// ensureCandidates makes sure of a candidate in every eligible target, in
// parallel; a target where none can be made is no longer eligible.
func (r *Reconciler) ensureCandidates(ctx context.Context, pod *corev1.Pod, rd *round) {
	var wg sync.WaitGroup
	for _, ts := range rd.states {
		if !ts.eligible {
			continue
		}
		wg.Go(func() {
			ts.chaperon, ts.reason = r.ensureCandidate(ctx, pod, rd.refs, rd.place, ts)
			if ts.chaperon == nil {
				ts.eligible = false
			}
		})
	}
	wg.Wait()
}

// answers is what the candidates of one pass answered.
type answers struct {
	offers             []Offer
	answered, eligible int
	// pending is the best rank (priority, then score) of the targets yet
	// to answer.
	pending *Offer
	byKey   map[string]*targetState
}

// tally reads every eligible candidate's answer: the reserved become
// offers, the refusals reasons.
func (r *Reconciler) tally(ctx context.Context, rd *round) answers {
	t := answers{byKey: map[string]*targetState{}}
	for _, ts := range rd.states {
		t.byKey[ts.key.String()] = ts
		if !ts.eligible {
			continue
		}
		t.eligible++
		switch a, msg := answer(ts.chaperon); a {
		case answerPending:
			if o := (Offer{Priority: ts.cluster.Priority(), Score: ts.score}); t.pending == nil || ranksAbove(o, *t.pending) {
				t.pending = &o
			}
		case answerReserved:
			t.answered++
			t.offers = append(t.offers, Offer{Target: ts.key.String(), Score: ts.score, Priority: ts.cluster.Priority(), FreeShare: FreeShareAfter(withRequested(ts.cluster.Summary(), r.inflight(ts.key.String())), rd.requests)})
		case answerUnschedulable, answerRejected:
			t.answered++
			ts.reason = msg
		}
	}
	return t
}

// decide elects among the offers once every eligible target has answered
// or the deadline has passed, and records the election.
func (r *Reconciler) decide(ctx context.Context, pod *corev1.Pod, rd *round, t answers) (reconcile.Result, error) {
	first := r.firstReserved(pod.UID)
	winner := Rank(pod.UID, t.offers)[0]
	deadline := r.opts.ElectionDeadline
	if t.pending != nil && ranksAbove(*t.pending, winner) {
		// A target of a higher priority, or one the pod prefers, has not
		// answered yet: it may still take the pod, so its answer is worth
		// a longer wait.
		deadline *= preferredDeadlineFactor
	}
	if wait := deadline - r.clock.Since(first); t.answered < t.eligible && wait > 0 {
		return r.requeueAfter(pod, requeueAwaitingAnswers, wait), nil
	}
	unlock := func() {}
	if rd.pl.CountsPeers() {
		// Spread or anti-affinity over clusters: one such choice at a
		// time, each counting the ones before it.
		r.peers.mu.Lock()
		unlock = r.peers.mu.Unlock
		fitting := r.fitPeers(ctx, pod, rd.pl, rd.states, t.byKey, t.offers)
		if len(fitting) == 0 {
			unlock()
			r.admission.release(client.ObjectKeyFromObject(pod))
			return r.requeueAfter(pod, requeuePeers, r.peersRetry(pod)), r.setNotElected(ctx, pod, reasonNoClusters, reasons(rd.states), EventNotSchedulable)
		}
		winner = Rank(pod.UID, fitting)[0]
	}
	ts := t.byKey[winner.Target]
	if rd.place.Probing() {
		unlock()
		return r.placeClaims(ctx, pod, rd.place, ts, rd.states)
	}
	ctrl.LoggerFrom(ctx).V(2).Info("Electing a candidate", "target", winner.Target, "chaperon", ts.chaperon.Name, "offers", len(t.offers), "eligible", t.eligible)
	recorded, err := r.record(ctx, pod, rd, ts)
	unlock()
	if err != nil {
		if apierrors.IsConflict(err) {
			// Another pod sharing a claim placed it meanwhile, or the
			// proxy changed since it was read: decide again on the fresh
			// object (the record is never written blind).
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
	r.admission.release(client.ObjectKeyFromObject(pod))
	// The record stands: this pass goes on from the proxy the write
	// returned, to mark the winner and remove the losers.
	return r.finishElection(ctx, recorded, proxy.ElectedCondition(recorded))
}

// firstReserved is when a candidate of the pod was first seen reserved:
// the election deadline counts from it.
func (r *Reconciler) firstReserved(uid types.UID) time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	first, ok := r.firstReservation[uid]
	if !ok {
		first = r.clock.Now()
		r.firstReservation[uid] = first
	}
	return first
}

// record places the pod's shared device claims in the winner's target,
// then writes the election record; a pod that counts its peers notes the
// choice. Called with the peers' lock held when the placement counts
// peers.
func (r *Reconciler) record(ctx context.Context, pod *corev1.Pod, rd *round, ts *targetState) (*corev1.Pod, error) {
	if err := devices.Place(ctx, r.client, rd.need.Shared, ts.key.String()); err != nil {
		return nil, err
	}
	recorded, err := r.recordElection(ctx, pod, ts)
	if err == nil && rd.pl.CountsPeers() {
		r.peers.note(pod.UID, ts.key, r.clock.Now())
	}
	return recorded, err
}

// noCluster is the end of a pass where no candidate is schedulable
// anywhere: pending candidates are kept in the K best targets only, and
// the proxy says why for each cluster.
func (r *Reconciler) noCluster(ctx context.Context, pod *corev1.Pod, rd *round) (reconcile.Result, error) {
	// Its pending candidates wait for room, not for an answer: no slot.
	r.admission.release(client.ObjectKeyFromObject(pod))
	r.trimPending(ctx, pod, rd.states, rd.requests)
	retry, why := r.opts.RetryInterval, requeueNoCluster
	if slices.ContainsFunc(rd.states, func(ts *targetState) bool { return ts.soon }) {
		retry, why = namespaceAdmitWait, requeueNamespace
	}
	return r.requeueAfter(pod, why, retry), r.setNotElected(ctx, pod, reasonNoClusters, reasons(rd.states), EventNotSchedulable)
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
	// No Event: the condition says it, and the delegate's Scheduled Event,
	// mirrored on the proxy, names the cluster and the node; an Event
	// per proxy was one write in ten of a proxy's in the source.
	return p, nil
}

// recordOf is the election record naming a target's candidate.
func recordOf(key proxy.TargetKey, chaperon string) proxy.Record {
	return proxy.Record{TargetNamespace: key.Namespace, TargetName: key.Name, Chaperon: chaperon}
}

// keyOf is the elected target of a record.
func keyOf(r proxy.Record) proxy.TargetKey { return r.Target() }

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
