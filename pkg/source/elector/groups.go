// groups: the members of a group (a gang) are elected together, into one
// target, all or nothing.

package elector

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
	"github.com/fleetlet/fleetlet/pkg/proxy"
)

// Group labels and annotations of Kueue's plain pod groups, read as
// fleetlet's own.
const (
	kueuePodGroupName  = "kueue.x-k8s.io/pod-group-name"
	kueuePodGroupTotal = "kueue.x-k8s.io/pod-group-total-count"
)

// Reasons of the Elected condition for groups.
const (
	reasonInvalidGroup    = "InvalidGroup"
	reasonWaitingForGroup = "WaitingForGroup"
	// EventGroupTimedOut: a group waited past the group timeout; its
	// members gave up their reservations and try again later.
	EventGroupTimedOut = "GroupTimedOut"
)

// DefaultGroupTimeout is how long a group's members hold reservations
// while too few of them are reserved in one target.
const DefaultGroupTimeout = 2 * time.Minute

// groupRetryPoll is how often a member waiting for its group looks again:
// other members' reservations do not bring it back by themselves.
const groupRetryPoll = time.Second

// staleGroupWait is how long a group's wait lasts with no member waiting.
const staleGroupWait = 30 * groupRetryPoll

// group is a pod's group: its namespace/name key and minimum members.
type group struct {
	key, name string
	min       int
}

// groupState is a pod's group as an election pass sees it.
type groupState struct {
	in      bool
	g       group
	members []corev1.Pod
	// home is the target the group runs in, "" before one is chosen.
	home string
}

// undecided tells a member of a group that has no target yet.
func (gs groupState) undecided() bool { return gs.in && gs.home == "" }

// groupOf reads the pod's group and where it runs, and keeps the pod to
// that target. A malformed group, or a group backing off, stops the pass
// (Elected says why).
func (r *Reconciler) groupOf(ctx context.Context, pod *corev1.Pod, states []*targetState) (groupState, *reconcile.Result, error) {
	g, in, err := parseGroup(pod)
	if err != nil {
		return groupState{}, &reconcile.Result{}, r.setNotElected(ctx, pod, reasonInvalidGroup, err.Error(), EventNotSchedulable)
	}
	if !in {
		return groupState{}, nil, nil
	}
	if !r.backingOff(g).IsZero() {
		res, err := r.backOffGroup(ctx, pod, g, states)
		return groupState{}, &res, err
	}
	members, err := r.members(ctx, pod, g)
	if err != nil {
		return groupState{}, &reconcile.Result{}, err
	}
	gs := groupState{in: true, g: g, members: members, home: r.groupTarget(g, members)}
	keepWithGroup(g, gs.home, states)
	return gs, nil, nil
}

// groupOffers keeps, of a member's offers, the one in the target chosen for
// its group; with no target chosen yet, the member waits (waitForGroup).
func (r *Reconciler) groupOffers(ctx context.Context, pod *corev1.Pod, gs groupState, offers []Offer, byKey map[string]*targetState, states []*targetState) ([]Offer, *reconcile.Result, error) {
	chosen, why := r.chooseGroupTarget(ctx, pod, gs.g, gs.members, offers, byKey)
	if chosen == "" {
		res, err := r.waitForGroup(ctx, pod, gs.g, why, states)
		return nil, &res, err
	}
	keepWithGroup(gs.g, chosen, states)
	offers = slices.DeleteFunc(offers, func(o Offer) bool { return o.Target != chosen })
	if len(offers) == 0 {
		res := r.requeueAfter(pod, requeueGroup, groupRetryPoll)
		return nil, &res, nil
	}
	return offers, nil, nil
}

// parseGroup reads a pod's group: fleetlet's label and annotation, else
// Kueue's pod group. ok is false for a pod in no group.
func parseGroup(pod *corev1.Pod) (g group, ok bool, err error) {
	name, count, source := pod.Labels[v1alpha1.LabelGroup], pod.Annotations[v1alpha1.AnnotationGroupMinMembers], v1alpha1.AnnotationGroupMinMembers
	if name == "" {
		name, count, source = pod.Labels[kueuePodGroupName], pod.Annotations[kueuePodGroupTotal], kueuePodGroupTotal
	}
	if name == "" {
		return group{}, false, nil
	}
	n, err := strconv.Atoi(count)
	if err != nil || n < 1 {
		return group{}, true, fmt.Errorf("the pod is in group %q, but its %s annotation is %q: it must be a positive number of members", name, source, count)
	}
	return group{key: pod.Namespace + "/" + name, name: name, min: n}, true, nil
}

// groupLedger remembers, per group, the target chosen for it, when its
// members started waiting, and until when they back off after a timeout.
// A chosen target is also read from the members' election records, so a
// restarted elector finds it again.
type groupLedger struct {
	mu      sync.Mutex
	chosen  map[string]choice
	waiting map[string]wait
	backoff map[string]time.Time
}

// wait is when a group's members started waiting, and when one last did:
// a wait no member kept up (the group went, or a new one took its name)
// starts again.
type wait struct{ since, last time.Time }

// choice is a target chosen for a group, and when.
type choice struct {
	target string
	at     time.Time
}

func (l *groupLedger) init() {
	l.chosen, l.waiting, l.backoff = map[string]choice{}, map[string]wait{}, map[string]time.Time{}
}

// waited notes that a member of the group waits at now, and tells whether
// the group has waited past timeout: its wait then ends and it backs off
// for backoff.
func (l *groupLedger) waited(key string, now time.Time, timeout, backoff time.Duration) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	w, ok := l.waiting[key]
	if !ok || now.Sub(w.last) > staleGroupWait {
		w.since = now
	}
	w.last = now
	l.waiting[key] = w
	if now.Sub(w.since) <= timeout {
		return false
	}
	delete(l.waiting, key)
	l.backoff[key] = now.Add(backoff)
	return true
}

// members lists the live proxies of the pod's group, the pod included.
func (r *Reconciler) members(ctx context.Context, pod *corev1.Pod, g group) ([]corev1.Pod, error) {
	var list corev1.PodList
	label := v1alpha1.LabelGroup
	if pod.Labels[label] == "" {
		label = kueuePodGroupName
	}
	if err := r.client.List(ctx, &list, client.InNamespace(pod.Namespace), client.MatchingLabels{label: g.name}); err != nil {
		return nil, fmt.Errorf("listing the members of group %s: %w", g.key, err)
	}
	out := list.Items[:0]
	for _, m := range list.Items {
		if m.DeletionTimestamp == nil && m.Status.Phase != corev1.PodSucceeded && m.Status.Phase != corev1.PodFailed {
			out = append(out, m)
		}
	}
	return out, nil
}

// groupTarget is the target the group runs in: a member's election record
// names it, or this elector chose it lately; "" when none yet. A choice
// no member was elected on within the group timeout (the group went, or a
// new one took its name) is forgotten.
func (r *Reconciler) groupTarget(g group, members []corev1.Pod) string {
	for i := range members {
		if key, _, ok := proxy.ElectedTarget(&members[i]); ok {
			return key.String()
		}
	}
	r.groups.mu.Lock()
	defer r.groups.mu.Unlock()
	c, ok := r.groups.chosen[g.key]
	if ok && r.clock.Since(c.at) > r.opts.GroupTimeout {
		delete(r.groups.chosen, g.key)
		return ""
	}
	return c.target
}

// keepWithGroup leaves out every target but the group's own.
func keepWithGroup(g group, home string, states []*targetState) {
	if home == "" {
		return
	}
	for _, ts := range states {
		if ts.key.String() != home {
			ts.eligible, ts.reason = false, fmt.Sprintf("its group %s runs in target %s", g.name, home)
		}
	}
}

// chooseGroupTarget picks, among the pod's offers, the best-ranked target
// where at least the group's minimum of members (the pod included) hold a
// reserved candidate, and records it for the group. "" and why, when no
// target has enough.
func (r *Reconciler) chooseGroupTarget(ctx context.Context, pod *corev1.Pod, g group, members []corev1.Pod, offers []Offer, byKey map[string]*targetState) (string, string) {
	reserved := map[string]int{}
	for _, o := range offers {
		ts := byKey[o.Target]
		for i := range members {
			m := &members[i]
			if m.UID == pod.UID {
				reserved[o.Target]++
				continue
			}
			if pc, ok := r.cachedCandidate(ctx, m, ts); ok {
				if a, _ := answer(pc); a == answerReserved {
					reserved[o.Target]++
				}
			}
		}
	}
	for _, o := range Rank(pod.UID, offers) {
		if reserved[o.Target] < g.min {
			continue
		}
		r.groups.mu.Lock()
		defer r.groups.mu.Unlock()
		if c, ok := r.groups.chosen[g.key]; ok {
			return c.target, ""
		}
		r.groups.chosen[g.key] = choice{target: o.Target, at: r.clock.Now()}
		delete(r.groups.waiting, g.key)
		return o.Target, ""
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(reserved)) {
		parts = append(parts, fmt.Sprintf("%s: %d", k, reserved[k]))
	}
	return "", fmt.Sprintf("group %s needs %d members reserved in one cluster; reserved now: %s", g.name, g.min, strings.Join(parts, ", "))
}

// waitForGroup keeps a member that cannot be elected yet: it says why and
// looks again soon. Past the group timeout, it gives up its candidates and
// the whole group backs off for a retry interval, so that reservations
// held for a group never starve single pods for good.
func (r *Reconciler) waitForGroup(ctx context.Context, pod *corev1.Pod, g group, why string, states []*targetState) (reconcile.Result, error) {
	if timedOut := r.groups.waited(g.key, r.clock.Now(), r.opts.GroupTimeout, r.opts.RetryInterval); timedOut {
		r.recorder.Eventf(pod, nil, corev1.EventTypeWarning, EventGroupTimedOut, "Elect", "%s after %s; trying again in %s", why, r.opts.GroupTimeout, r.opts.RetryInterval)
		return r.backOffGroup(ctx, pod, g, states)
	}
	return r.requeueAfter(pod, requeueGroup, groupRetryPoll), r.setNotElected(ctx, pod, reasonWaitingForGroup, why, EventNotSchedulable)
}

// backingOff tells until when the pod's group backs off; zero when not.
func (r *Reconciler) backingOff(g group) time.Time {
	r.groups.mu.Lock()
	defer r.groups.mu.Unlock()
	until := r.groups.backoff[g.key]
	if !until.After(r.clock.Now()) {
		delete(r.groups.backoff, g.key)
		return time.Time{}
	}
	return until
}

// backOffGroup deletes the member's candidates (their reservations go
// with them) and brings it back when its group's back-off ends.
func (r *Reconciler) backOffGroup(ctx context.Context, pod *corev1.Pod, g group, states []*targetState) (reconcile.Result, error) {
	for _, ts := range states {
		pc, ok := r.cachedCandidate(ctx, pod, ts)
		if !ok || pc == nil {
			continue
		}
		if err := r.deleteChaperon(ctx, ts.cluster, pc, pod.UID); err != nil {
			return reconcile.Result{}, fmt.Errorf("releasing the candidate in %s of a group that timed out: %w", ts.key, err)
		}
		r.release(ctx, pod, ts.cluster)
	}
	until := r.backingOff(g)
	msg := fmt.Sprintf("group %s found no cluster with %d members reserved within %s; its members gave up their reservations and try again at %s",
		g.name, g.min, r.opts.GroupTimeout, until.UTC().Format(time.RFC3339))
	return r.requeueAfter(pod, requeueGroup, until.Sub(r.clock.Now())), r.setNotElected(ctx, pod, reasonWaitingForGroup, msg, EventNotSchedulable)
}
