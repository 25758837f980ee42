// admission: back-pressure. At most Options.ElectionsInFlight proxies
// have an election in flight in each target; the others wait, oldest
// first, and a finished election lets the next one in.

package elector

import (
	"context"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/fleetlet/fleetlet/pkg/proxy"
)

// admission is the ledger of elections in flight, per target. It is kept
// in memory only: it decides no phase. The line is ordered by the proxies'
// age, so a new leader, which starts empty, lets the oldest in first, and
// those are the ones whose candidates a leader before it made.
//
// A proxy takes a slot in every target it is about to have a candidate in,
// all or none, so that it never runs a smaller election than the pod asks
// for; it holds them until its election is decided, no cluster can take
// it, or it leaves the Electing phase. Waiters are woken oldest first, each
// with its slots already taken for it, so that a freed slot goes to one
// proxy rather than to a stampede; a younger waiter never takes a slot in
// a target an older one waits for, so nobody waits forever.
type admission struct {
	// limit is the slots per target; 0 or less: no bound.
	limit int

	mu      sync.Mutex
	held    map[types.NamespacedName]map[proxy.TargetKey]struct{}
	count   map[proxy.TargetKey]int
	waiting map[types.NamespacedName]waiter
	// line is the waiters, oldest first.
	line   []types.NamespacedName
	queues []workqueue.TypedRateLimitingInterface[reconcile.Request]
}

// waiter is a proxy waiting for slots: its age, and the targets it needs.
type waiter struct {
	since   time.Time
	targets []proxy.TargetKey
}

// before orders the line: older first, then by name.
func before(a waiter, ak types.NamespacedName, b waiter, bk types.NamespacedName) bool {
	if !a.since.Equal(b.since) {
		return a.since.Before(b.since)
	}
	return ak.String() < bk.String()
}

func newAdmission(limit int) *admission {
	return &admission{
		limit:   limit,
		held:    map[types.NamespacedName]map[proxy.TargetKey]struct{}{},
		count:   map[proxy.TargetKey]int{},
		waiting: map[types.NamespacedName]waiter{},
	}
}

// source enqueues the proxies admission wakes.
func (a *admission) source() source.Source {
	return source.Func(func(_ context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
		a.mu.Lock()
		defer a.mu.Unlock()
		a.queues = append(a.queues, q)
		return nil
	})
}

// admit says whether the proxy, created at since, may have candidates in
// targets now. One that holds slots already gets the targets it lacks too
// (eligibility grew mid-election). Otherwise it joins the line, and is let
// in if every one of its targets has a free slot that no older waiter is
// blocked on.
func (a *admission) admit(key types.NamespacedName, since time.Time, targets []proxy.TargetKey) bool {
	if a == nil || a.limit <= 0 || len(targets) == 0 {
		return true
	}
	a.mu.Lock()
	if _, holds := a.held[key]; holds {
		a.take(key, targets)
		a.mu.Unlock()
		return true
	}
	a.enter(key, waiter{since: since, targets: targets})
	woken := a.wake()
	_, admitted := a.held[key]
	a.gauge()
	queues := a.queues
	a.mu.Unlock()
	enqueue(queues, woken, key)
	return admitted
}

// release gives up the proxy's slots and its place in line, and wakes
// those who now fit.
func (a *admission) release(key types.NamespacedName) {
	if a == nil || a.limit <= 0 {
		return
	}
	a.mu.Lock()
	slots, holds := a.held[key]
	_, waits := a.waiting[key]
	if !holds && !waits {
		a.mu.Unlock()
		return
	}
	for t := range slots {
		if a.count[t]--; a.count[t] <= 0 {
			delete(a.count, t)
		}
	}
	delete(a.held, key)
	a.leave(key)
	woken := a.wake()
	a.gauge()
	queues := a.queues
	a.mu.Unlock()
	enqueue(queues, woken, key)
}

// enqueue runs the woken proxies but self (the pass that woke them runs
// already).
func enqueue(queues []workqueue.TypedRateLimitingInterface[reconcile.Request], woken []types.NamespacedName, self types.NamespacedName) {
	for _, k := range woken {
		if k == self {
			continue
		}
		for _, q := range queues {
			q.Add(reconcile.Request{NamespacedName: k})
		}
	}
}

// wake takes slots, in line, for every waiter whose targets all have a
// free slot that no older waiter is blocked on, and returns them. Called
// with mu held.
func (a *admission) wake() []types.NamespacedName {
	var woken []types.NamespacedName
	blocked := map[proxy.TargetKey]bool{}
	kept := a.line[:0]
	for _, k := range a.line {
		w := a.waiting[k]
		if a.free(w.targets) && !anyOf(w.targets, blocked) {
			a.take(k, w.targets)
			delete(a.waiting, k)
			woken = append(woken, k)
			continue
		}
		for _, t := range w.targets {
			blocked[t] = true
		}
		kept = append(kept, k)
	}
	a.line = kept
	return woken
}

// enter puts the proxy in line, or updates what it waits for. Called with
// mu held.
func (a *admission) enter(key types.NamespacedName, w waiter) {
	if _, waits := a.waiting[key]; !waits {
		i, _ := slices.BinarySearchFunc(a.line, key, func(k, key types.NamespacedName) int {
			switch {
			case before(a.waiting[k], k, w, key):
				return -1
			case k == key:
				return 0
			}
			return 1
		})
		a.line = slices.Insert(a.line, i, key)
	}
	a.waiting[key] = w
}

// leave takes the proxy out of line. Called with mu held.
func (a *admission) leave(key types.NamespacedName) {
	if _, waits := a.waiting[key]; !waits {
		return
	}
	delete(a.waiting, key)
	if i := slices.Index(a.line, key); i >= 0 {
		a.line = slices.Delete(a.line, i, i+1)
	}
}

func anyOf(targets []proxy.TargetKey, set map[proxy.TargetKey]bool) bool {
	return slices.ContainsFunc(targets, func(t proxy.TargetKey) bool { return set[t] })
}

// free tells whether every target has a slot left. Called with mu held.
func (a *admission) free(targets []proxy.TargetKey) bool {
	for _, t := range targets {
		if a.count[t] >= a.limit {
			return false
		}
	}
	return true
}

// take gives the proxy a slot in each target it does not hold one in.
// Called with mu held.
func (a *admission) take(key types.NamespacedName, targets []proxy.TargetKey) {
	slots := a.held[key]
	if slots == nil {
		slots = map[proxy.TargetKey]struct{}{}
		a.held[key] = slots
	}
	for _, t := range targets {
		if _, ok := slots[t]; !ok {
			slots[t] = struct{}{}
			a.count[t]++
		}
	}
}

// gauge publishes the ledger's size. Called with mu held.
func (a *admission) gauge() {
	electionsInFlight.Set(float64(len(a.held)))
	electionsWaiting.Set(float64(len(a.waiting)))
}

// holds tells whether the proxy holds slots.
func (a *admission) holds(key types.NamespacedName) bool {
	if a == nil {
		return false
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	_, ok := a.held[key]
	return ok
}

// inFlight is how many proxies hold a slot in target.
func (a *admission) inFlight(t proxy.TargetKey) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.count[t]
}

// hasTurn says whether the proxy may have its candidates made now: it
// asks for a slot in every eligible target, in line by its age. A member
// of a group is not bounded: its group needs enough members reserved in
// one target at once, which a bound smaller than the group would never
// let happen.
func (r *Reconciler) hasTurn(pod *corev1.Pod, rd *round) bool {
	if rd.group.in {
		return true
	}
	var targets []proxy.TargetKey
	for _, ts := range rd.states {
		if ts.eligible {
			targets = append(targets, ts.key)
		}
	}
	return r.admission.admit(client.ObjectKeyFromObject(pod), pod.CreationTimestamp.Time, targets)
}
