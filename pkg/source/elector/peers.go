// peers: a pod whose spread or anti-affinity is over clusters counts this
// source's proxies per cluster when its winner is chosen; the decisions of
// a burst are taken one at a time, each seeing the ones before it.

package elector

import (
	"context"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fleetlet/fleetlet/pkg/proxy"
	"github.com/fleetlet/fleetlet/pkg/source/placement"
)

// ledgerMemory is how long a recorded election is remembered for the
// counts: longer than the cache takes to show the record.
const ledgerMemory = 30 * time.Second

// peerLedger serializes the choice of pods that count peers, and
// remembers the targets it chose lately (by proxy UID).
type peerLedger struct {
	mu     sync.Mutex
	chosen map[types.UID]chosenTarget
}

type chosenTarget struct {
	target proxy.TargetKey
	at     time.Time
}

// note remembers that a proxy was elected into a target (under mu).
func (l *peerLedger) note(uid types.UID, key proxy.TargetKey, now time.Time) {
	if l.chosen == nil {
		l.chosen = map[types.UID]chosenTarget{}
	}
	for u, c := range l.chosen {
		if now.Sub(c.at) > ledgerMemory {
			delete(l.chosen, u)
		}
	}
	l.chosen[uid] = chosenTarget{target: key, at: now}
}

// peerCounter counts, per domain of a key, the live proxies of the pod's
// namespace other than the pod that a selector selects and whose election
// record (or, not in the cache yet, this elector's latest choice) names a
// target; the domain is the key's value on that target's virtual node.
// Read once per decision from the cache (under l.mu).
func (r *Reconciler) peerCounter(ctx context.Context, pod *corev1.Pod, states []*targetState) placement.Peers {
	nodeLabels := map[proxy.TargetKey]map[string]string{}
	for _, ts := range states {
		if ts.node != nil {
			nodeLabels[ts.key] = ts.node.Labels
		}
	}
	var pods corev1.PodList
	if err := r.client.List(ctx, &pods, client.InNamespace(pod.Namespace), client.UnsafeDisableDeepCopy); err != nil {
		pods.Items = nil
	}
	now := r.clock.Now()
	type peer struct {
		labels labels.Set
		target proxy.TargetKey
	}
	var peers []peer
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.UID == pod.UID || p.DeletionTimestamp != nil || !proxy.IsManaged(p) ||
			p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		key, ok := proxy.TargetKey{}, false
		if rec, elected := proxy.Elected(p); elected {
			key, ok = keyOf(rec), true
		} else if c, seen := r.peers.chosen[p.UID]; seen && now.Sub(c.at) <= ledgerMemory {
			key, ok = c.target, true
		}
		if ok {
			peers = append(peers, peer{labels: labels.Set(p.Labels), target: key})
		}
	}
	return func(key string, sel labels.Selector) map[string]int {
		out := map[string]int{}
		for _, p := range peers {
			if !sel.Matches(p.labels) {
				continue
			}
			if d, ok := nodeLabels[p.target][key]; ok {
				out[d]++
			}
		}
		return out
	}
}

// domains are, per key of the pod's peer constraints, the values the
// targets that may take it carry (targetState.domain): the domains the
// skew is counted over, as the kube-scheduler counts every node the pod's
// node affinity admits, full or not.
func domains(pl placement.Placement, states []*targetState) map[string][]string {
	out := map[string][]string{}
	for _, key := range pl.Keys() {
		seen := map[string]bool{}
		for _, ts := range states {
			if !ts.domain || ts.node == nil {
				continue
			}
			if v, ok := ts.node.Labels[key]; ok && !seen[v] {
				seen[v] = true
				out[key] = append(out[key], v)
			}
		}
	}
	return out
}

// fitPeers keeps the offers whose target the pod's peer constraints allow
// now, ranked with their crowding, and says for the others why not (on
// their target state). The caller holds r.peers.mu.
func (r *Reconciler) fitPeers(ctx context.Context, pod *corev1.Pod, pl placement.Placement, states []*targetState, byKey map[string]*targetState, offers []Offer) []Offer {
	peers := r.peerCounter(ctx, pod, states)
	doms := domains(pl, states)
	var out []Offer
	for _, o := range offers {
		ts := byKey[o.Target]
		if ok, why := pl.Fits(ts.node.Labels, doms, peers); !ok {
			ts.reason = why
			continue
		}
		o.Crowding = pl.Crowding(ts.node.Labels, peers)
		out = append(out, o)
	}
	return out
}

// peersRefuse says, per eligible target the pod's spread and
// (anti-)affinity over clusters do not let it go to now, why; empty when
// they allow every one, or the pod counts no peers. narrow gives its first
// candidates to targets that may win: a candidate only where the skew
// refuses the pod would hold it there for good.
func (r *Reconciler) peersRefuse(ctx context.Context, pod *corev1.Pod, pl placement.Placement, states []*targetState) map[string]string {
	if !pl.CountsPeers() {
		return nil
	}
	r.peers.mu.Lock()
	defer r.peers.mu.Unlock()
	peers := r.peerCounter(ctx, pod, states)
	doms := domains(pl, states)
	out := map[string]string{}
	for _, ts := range states {
		if !ts.eligible || ts.node == nil {
			continue
		}
		if ok, why := pl.Fits(ts.node.Labels, doms, peers); !ok {
			out[ts.key.String()] = why
		}
	}
	return out
}

// peersRetry is how soon a pod the peer constraints refuse runs again:
// half the time it has been refused, from 2 s up to RetryInterval. What
// frees it (a peer elected or gone elsewhere, a target taking a candidate
// at last) brings no event of its own; a refusal that lasts is asked about
// less and less often.
func (r *Reconciler) peersRetry(pod *corev1.Pod) time.Duration {
	const least = 2 * time.Second
	d := least
	if c := proxy.ElectedCondition(pod); c != nil && c.Status == corev1.ConditionFalse {
		d = max(least, r.clock.Since(c.LastTransitionTime.Time)/2)
	}
	return min(d, r.opts.RetryInterval)
}
