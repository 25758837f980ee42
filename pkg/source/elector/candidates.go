// candidates: phase candidates: a candidate in every eligible target, and what each answered.

package elector

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
	proxypod "github.com/fleetlet/fleetlet/pkg/proxy"
	"github.com/fleetlet/fleetlet/pkg/source/claims"
	"github.com/fleetlet/fleetlet/pkg/source/fleet"
	"github.com/fleetlet/fleetlet/pkg/source/follow"
	"github.com/fleetlet/fleetlet/pkg/source/placement"
)

// targetState is one target's view for one proxy.
type targetState struct {
	key      proxypod.TargetKey
	cluster  *fleet.Cluster
	node     *corev1.Node
	eligible bool
	reason   string
	chaperon *v1alpha1.PodChaperon
	// score ranks the target by the pod's preferences; spec is the user's
	// spec as the candidate there carries it (placement.Placement.NodeSpec).
	score int64
	spec  *corev1.PodSpec
	// soon: the target may take a candidate in a moment, with no event
	// to say so (a namespace this source just created there).
	soon bool
	// short: the target's summary counts fewer free devices than the
	// pod's resource claims ask for (devices.Need.Short), or no node with
	// room for the pod (noNodeFits); ranked last.
	short bool
	// domain: the target counts as a domain of the pod's spread over
	// clusters (domains): it may take the pod as its health, labels,
	// claims, devices and group say, whether or not it got a candidate
	// this pass (a candidate it could not be given yet, or one kept for
	// later by --candidate-targets, is no reason to count it out: the
	// skew would then be counted over the others only). A target
	// lacking the pod's namespace for good is no domain (lacksNamespace).
	domain bool
}

// lacksNamespace notes that the target lacks the pod's namespace: one
// this source just created there is awaited (soon) and the target stays a
// domain; one it may not create, or one being deleted, leaves the target
// out of the domains, as a node the pod may never go to.
func (ts *targetState) lacksNamespace(soon bool) {
	ts.soon = soon
	ts.domain = ts.domain && soon
}

// targets is every target's view for the proxy: eligible when the target
// may take it and the pod's cluster-level constraints admit it.
func (r *Reconciler) targets(ctx context.Context, pod *corev1.Pod, userSpec *corev1.PodSpec, clusters labels.Selector, pl placement.Placement) []*targetState {
	var out []*targetState
	for _, cl := range r.registry.List() {
		key := cl.Key()
		h := cl.Health()
		ts := &targetState{key: key, cluster: cl}
		cl.WatchChaperons(pod.Namespace)
		// The cache's own node, not a copy: only read (its labels,
		// taints and cordon), and a pass reads every target's.
		var node corev1.Node
		if err := r.client.Get(ctx, types.NamespacedName{Name: proxypod.NodeName(key)}, &node, client.UnsafeDisableDeepCopy); err == nil {
			ts.node = &node
		}
		ts.eligible, ts.reason = Eligible(pod, TargetView{Namespace: key.Namespace, Name: key.Name, Ready: h.Ready, Reason: h.Reason, Draining: cl.Draining(), SummaryStale: cl.SummaryStale(), SchedulerDown: cl.SchedulerDown(), Node: ts.node}, clusters)
		ts.spec = userSpec
		if ts.node != nil {
			if ts.eligible {
				ts.eligible, ts.reason = pl.Admits(ts.node.Labels)
			}
			ts.score = pl.Score(ts.node.Labels)
			ts.spec = pl.NodeSpec(userSpec, ts.node.Labels)
		}
		if key.Namespace != "" && key.Namespace != pod.Namespace {
			continue
		}
		out = append(out, ts)
	}
	return out
}

type answerKind int

const (
	answerPending answerKind = iota
	answerReserved
	answerUnschedulable
	answerRejected
)

// answer reads what a candidate said: reserved (the candidate scheduler
// holds a node at Permit), unschedulable (with the scheduler's message),
// rejected (the target refused the pod), or nothing yet.
func answer(pc *v1alpha1.PodChaperon) (answerKind, string) {
	if pc == nil {
		return answerPending, ""
	}
	if pc.Annotations[v1alpha1.AnnotationReserved] != "" {
		return answerReserved, ""
	}
	for _, c := range pc.Status.Conditions {
		if c.Type == v1alpha1.ConditionPodCreated && c.Status == metav1.ConditionFalse {
			return answerRejected, c.Message
		}
	}
	for _, c := range pc.Status.PodStatus.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
			return answerUnschedulable, c.Message
		}
	}
	return answerPending, ""
}

// ensureCandidate makes sure the target has the proxy's chaperon; it returns
// it, or nil and why not. A target whose pending candidate was trimmed in
// a round still running gets no new one.
func (r *Reconciler) ensureCandidate(ctx context.Context, pod *corev1.Pod, refs follow.RefSet, place claims.Placement, ts *targetState) (*v1alpha1.PodChaperon, string) {
	want := Chaperon(CandidateInput{Proxy: pod, Spec: ts.spec, SourceName: r.opts.SourceName, Self: ts.cluster.Self(), Probe: place.Probing()})
	var got v1alpha1.PodChaperon
	err := ts.cluster.Chaperons(pod.Namespace).Get(ctx, client.ObjectKeyFromObject(want), &got)
	if err == nil {
		// The cache shows it: nothing to remember any more.
		r.forgetCreated(pod.UID, ts.key)
		if got.Labels[v1alpha1.LabelParentUID] != string(pod.UID) {
			return nil, fmt.Sprintf("a PodChaperon %s/%s of another pod is in the way", got.Namespace, got.Name)
		}
		if got.DeletionTimestamp != nil {
			// A loser or an earlier election's candidate, its pod on
			// the way out: never this election's. Its deletion brings
			// the proxy back.
			return nil, "an earlier candidate there is still being deleted"
		}
		if isProbe(&got) != place.Probing() {
			// A probe, and the claims are placed now (or the other way
			// round, a placement removed): this one goes, its deletion
			// brings the proxy back.
			if err := r.deleteChaperon(ctx, ts.cluster, &got, pod.UID); err != nil {
				return nil, fmt.Sprintf("replacing the candidate: %v", err)
			}
			return nil, "its candidate there is being replaced: the pod's claims were placed"
		}
		return &got, ""
	}
	if !apierrors.IsNotFound(err) {
		if apierrors.IsForbidden(err) {
			// A namespace that does not exist there admits nobody: RBAC
			// answers before the namespace is looked up.
			if why, soon, absent := r.namespaceAbsent(ctx, pod, ts); absent {
				ts.lacksNamespace(soon)
				return nil, why
			}
		}
		return nil, fmt.Sprintf("reading the chaperon: %v", err)
	}
	if r.createdLately(pod.UID, ts.key) {
		// Created by an earlier pass, not in the cache yet: no second
		// create (its event brings the proxy back).
		return want, ""
	}
	if until, why, out := r.keptOut(pod.UID, ts.key); out {
		return nil, keptOutReason(why, r.opts.PendingTargets, until)
	}
	// What the candidate needs is there before it is.
	if r.opts.Follower != nil && !ts.cluster.Self() {
		why, err := r.follow(ctx, pod, refs, ts.cluster, follow.StageCandidate)
		if isNamespaceNotFound(err) {
			why, soon := r.missingNamespaceThere(ctx, pod, ts)
			ts.lacksNamespace(soon)
			return nil, why
		}
		if awaiting, ok := r.awaitingNamespace(pod, ts); ok && apierrors.IsForbidden(err) {
			ts.soon = true
			return nil, awaiting
		}
		if err != nil {
			return nil, fmt.Sprintf("copying what the pod needs: %v", err)
		}
		if why != "" {
			return nil, why
		}
	}
	// Its claims are placed there, and copied, before it is.
	if why, err := r.readyClaims(ctx, place, ts); err != nil || why != "" {
		if err != nil {
			return nil, fmt.Sprintf("readying the pod's claims: %v", err)
		}
		return nil, why
	}
	if err := ts.cluster.Client().Create(ctx, want); err != nil {
		if apierrors.IsAlreadyExists(err) {
			r.noteCreated(pod.UID, ts.key)
			return want, ""
		}
		if isNamespaceNotFound(err) {
			// The namespace is missing there (no GET before each
			// create: the create says so): it filters the target,
			// unless this source may create it there.
			why, soon := r.missingNamespaceThere(ctx, pod, ts)
			ts.lacksNamespace(soon)
			return nil, why
		}
		if why, ok := r.awaitingNamespace(pod, ts); ok && apierrors.IsForbidden(err) {
			ts.soon = true
			return nil, why
		}
		candidatesTotal.WithLabelValues(ts.key.String(), "error").Inc()
		return nil, fmt.Sprintf("creating the candidate: %v", err)
	}
	candidatesTotal.WithLabelValues(ts.key.String(), "created").Inc()
	r.noteCreated(pod.UID, ts.key)
	return want, ""
}

// createdMemory is how long a candidate created is taken to exist while
// the target's cache does not show it yet (once it does, it is
// forgotten): longer than a cache lags under load, short because one
// deleted by someone else before the cache ever showed it is only created
// again once this has passed.
const createdMemory = 10 * time.Second

// noteCreated remembers that a candidate was created, and forgets those
// created long ago.
func (r *Reconciler) noteCreated(uid types.UID, key proxypod.TargetKey) {
	now := r.clock.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.created[candidateKey{proxy: uid, target: key}] = now
	if len(r.created)%256 == 0 {
		for k, at := range r.created {
			if now.Sub(at) > createdMemory {
				delete(r.created, k)
			}
		}
	}
}

// createdLately tells whether this elector created the candidate lately.
func (r *Reconciler) createdLately(uid types.UID, key proxypod.TargetKey) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	at, ok := r.created[candidateKey{proxy: uid, target: key}]
	return ok && r.clock.Since(at) <= createdMemory
}

// forgetCreated drops the memory of a candidate deleted.
func (r *Reconciler) forgetCreated(uid types.UID, key proxypod.TargetKey) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.created, candidateKey{proxy: uid, target: key})
}

// missingNamespace is why a target without the pod's namespace is not a
// candidate: a create there answers NotFound.
func missingNamespace(ns string) string { return fmt.Sprintf("namespace %s does not exist there", ns) }

// isNamespaceNotFound tells a create refused for a missing namespace from
// other NotFound answers (a kind the target does not serve).
func isNamespaceNotFound(err error) bool {
	var status apierrors.APIStatus
	if !apierrors.IsNotFound(err) || !errors.As(err, &status) {
		return false
	}
	d := status.Status().Details
	return d != nil && d.Kind == "namespaces"
}

// keptOutReason says why a target whose pending candidate was trimmed has
// none: what that candidate had answered, first, so that a pod's
// Elected=False keeps naming a quota or a policy that refused it there.
func keptOutReason(answered string, pendingTargets int, until time.Time) string {
	kept := fmt.Sprintf("no cluster could run the pod at the last try; pending candidates are kept in the %d best target(s) until %s", pendingTargets, until.UTC().Format(time.RFC3339))
	if answered == "" {
		return kept
	}
	return answered + " (" + kept + ")"
}

// trimPending keeps pending candidates in at most K targets, the best ranked,
// so that one cluster autoscaler scales up, not all of them; and an
// unschedulable one in any target whose summary shows room for the pod,
// where it waits for the target's own scheduler, not for an autoscaler
// (waitsForRoom).
func (r *Reconciler) trimPending(ctx context.Context, pod *corev1.Pod, states []*targetState, requests corev1.ResourceList) {
	var offers []Offer
	byKey := map[string]*targetState{}
	for _, s := range states {
		if s.chaperon != nil {
			offers = append(offers, Offer{Target: s.key.String(), Score: s.score, Priority: s.cluster.Priority(), Short: s.short, FreeShare: FreeShareAfter(s.cluster.Summary(), requests)})
			byKey[s.key.String()] = s
		}
	}
	for i, o := range Rank(pod.UID, offers) {
		s := byKey[o.Target]
		if i < r.opts.PendingTargets || waitsForRoom(s, requests) {
			continue
		}
		if err := r.deleteChaperon(ctx, s.cluster, s.chaperon, pod.UID); err != nil {
			ctrl.LoggerFrom(ctx).Error(err, "Deleting a surplus pending candidate", "target", o.Target)
			continue
		}
		r.noteTrimmed(pod.UID, s.key, s.reason)
		r.forgetCreated(pod.UID, s.key)
		r.release(ctx, pod, s.cluster)
	}
}

// waitsForRoom tells whether a target's candidate is unschedulable for
// want of room where its summary shows room for the pod: room held for a
// moment (a burst's losing candidates), that its scheduler gives the
// candidate once free. A candidate the target refused (a quota, a policy),
// or that no node there takes whatever their room (an affinity, a taint),
// waits for no room: it is trimmed, so that a cluster autoscaler there
// does not scale up for a pod other clusters may run.
func waitsForRoom(s *targetState, requests corev1.ResourceList) bool {
	a, msg := answer(s.chaperon)
	return a == answerUnschedulable && shortOfRoom(msg) && roomFor(s.cluster.Summary(), requests)
}

// shortOfRoom tells whether a candidate scheduler's Unschedulable message
// names a node short of room: the reasons of kube-scheduler's
// NodeResourcesFit ("Insufficient cpu", "Too many pods"), which also
// counts the candidates reserved on a node and waiting for their election.
func shortOfRoom(msg string) bool {
	return strings.Contains(msg, "Insufficient ") || strings.Contains(msg, "Too many pods")
}

// deleteChaperon deletes a chaperon of this proxy so that it goes only after
// its pod, and forgets that it was created. An elected chaperon carries
// fleetlet's finalizer for that (v1alpha1.FinalizerDelegatePod: the
// target's chaperon controller deletes the pod, then lets the chaperon
// go), so it is deleted without propagation; any other (a candidate, one
// an earlier release elected) Foreground, by the target's garbage
// collector. Measured with `make bench`: Foreground cost a delegate's
// target about 8.5 requests of the garbage collector's (four live reads of
// the chaperon, reads and conflicting deletes of the pod, the finalizer's
// removal).
func (r *Reconciler) deleteChaperon(ctx context.Context, cl *fleet.Cluster, pc *v1alpha1.PodChaperon, uid types.UID) error {
	r.forgetCreated(uid, cl.Key())
	err := cl.Client().Delete(ctx, pc, client.PropagationPolicy(chaperonPropagation(pc)),
		client.Preconditions{UID: ptr.To(pc.UID)})
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil
	}
	return err
}

// chaperonPropagation is how a chaperon is deleted so that it goes only
// after its pod (deleteChaperon).
func chaperonPropagation(pc *v1alpha1.PodChaperon) metav1.DeletionPropagation {
	if proxypod.FinalizerIndex(pc.Finalizers, v1alpha1.FinalizerDelegatePod) >= 0 {
		return metav1.DeletePropagationBackground
	}
	return metav1.DeletePropagationForeground
}
