// narrow: candidates only in the K best-ranked targets first
// (Options.CandidateTargets), the others once every one of those said no.

package elector

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
	"github.com/fleetlet/fleetlet/pkg/naming"
)

// narrow leaves eligible only the targets that get a candidate now, when
// Options.CandidateTargets (K) is set: those that have one already, and
// the best ranked up to K that the pod's peer constraints let it win
// (peersRefuse; a kept candidate they refuse now is not one of the K).
// Once every candidate there said no (unschedulable or refused), every
// eligible target gets one, as without K. What it reads is the targets'
// caches, so a restarted manager decides the same.
func (r *Reconciler) narrow(ctx context.Context, pod *corev1.Pod, rd *round) {
	k := r.opts.CandidateTargets
	var eligible []*targetState
	for _, ts := range rd.states {
		if ts.eligible {
			eligible = append(eligible, ts)
		}
	}
	if k <= 0 || len(eligible) <= k {
		return
	}
	refused := r.peersRefuse(ctx, pod, rd.pl, rd.states)
	mayWin := func(key string) bool { return refused[key] == "" }
	keep := map[string]bool{}
	winnable := 0
	allSaidNo := true
	for _, ts := range eligible {
		pc, exists := r.cachedCandidate(ctx, pod, ts)
		if !exists {
			continue
		}
		keep[ts.key.String()] = true
		if mayWin(ts.key.String()) {
			winnable++
		}
		if a, _ := answer(pc); a != answerUnschedulable && a != answerRejected {
			allSaidNo = false
		}
	}
	if len(keep) >= k && allSaidNo {
		if len(keep) == k {
			// The first pass past the K: the others get theirs now,
			// and are kept from the next pass on.
			candidateFallbacks.Inc()
		}
		return
	}
	offers := make([]Offer, 0, len(eligible))
	for _, ts := range eligible {
		offers = append(offers, Offer{Target: ts.key.String(), Score: ts.score, Priority: ts.cluster.Priority(), Short: ts.short, FreeShare: FreeShareAfter(withRequested(ts.cluster.Summary(), r.inflight(ts.key.String())), rd.requests)})
	}
	for _, o := range Rank(pod.UID, offers) {
		if winnable >= k {
			break
		}
		if keep[o.Target] || !mayWin(o.Target) {
			continue
		}
		keep[o.Target] = true
		winnable++
	}
	for _, ts := range eligible {
		switch key := ts.key.String(); {
		case keep[key]:
		case refused[key] != "":
			ts.eligible, ts.reason = false, refused[key]
		default:
			ts.eligible = false
			ts.reason = fmt.Sprintf("not among the %d best-ranked targets that get a candidate first", k)
		}
	}
}

// cachedCandidate is the proxy's live candidate in a target as its cache
// shows it (a candidate this elector created moments ago counts, with no
// answer yet).
func (r *Reconciler) cachedCandidate(ctx context.Context, pod *corev1.Pod, ts *targetState) (*v1alpha1.PodChaperon, bool) {
	if r.createdLately(pod.UID, ts.key) {
		return nil, true
	}
	var pc v1alpha1.PodChaperon
	key := client.ObjectKey{Namespace: pod.Namespace, Name: naming.RemoteName(pod.Name, pod.UID)}
	if err := ts.cluster.Chaperons(pod.Namespace).Get(ctx, key, &pc); err != nil {
		return nil, false
	}
	if pc.Labels[v1alpha1.LabelParentUID] != string(pod.UID) || pc.DeletionTimestamp != nil {
		return nil, false
	}
	return &pc, true
}

// markNoNodeFits marks short the eligible targets whose summary says no
// node has room for the pod: for some resource it asks for (and one pod),
// more than the most any one node has free (largestFree). Free capacity
// spread over many nodes is no room for a pod that needs it on one; with
// --candidate-targets such a target would otherwise rank first by its total
// and make the ranking miss. A summary without largestFree (an older
// fleetlet) says nothing.
func markNoNodeFits(states []*targetState, requests corev1.ResourceList) {
	for _, ts := range states {
		if ts.eligible && !ts.short && noNodeFits(ts.cluster.Summary(), requests) {
			ts.short = true
		}
	}
}

// noNodeFits tells whether summary's largestFree leaves no node with room
// for a pod of requests.
func noNodeFits(summary *v1alpha1.ClusterSummaryStatus, requests corev1.ResourceList) bool {
	if summary == nil || summary.LargestFree == nil {
		return false
	}
	if q, ok := summary.LargestFree[corev1.ResourcePods]; ok && q.Sign() <= 0 {
		return true
	}
	for name, want := range requests {
		if name == corev1.ResourcePods || want.IsZero() {
			continue
		}
		free, ok := summary.LargestFree[name]
		if !ok {
			// A resource no node lists is left to the target's
			// scheduler.
			continue
		}
		if want.Cmp(free) > 0 {
			return true
		}
	}
	return false
}
