package fleet

import (
	"context"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
	"github.com/fleetlet/fleetlet/pkg/proxy"
)

// Two registrations may want what only one may have: the same virtual node
// name (a ClusterTarget a-b and a Target b in namespace a), or the same
// cluster (a ClusterTarget and a team's Target with one kubeconfig). The
// one that holds it keeps it; when neither or both hold it, the older one
// (creationTimestamp, then the key, so that both sides of a tie within one
// second agree). "Holds" is read from the API, never from memory, so that a
// restart, which reconciles targets in any order, changes nothing.

// conflictRecheck is how often a refused registration looks again: the one
// that holds what it wants may have gone.
const conflictRecheck = 15 * time.Second

// errRefused makes a refused registration look again after
// conflictRecheck.
type errRefused struct{ reason string }

func (e errRefused) Error() string { return "refused: " + e.reason }

// claim is one registration's bid.
type claim struct {
	key     proxy.TargetKey
	created time.Time
	holds   bool
}

// before reports whether a is served before b.
func (a claim) before(b claim) bool {
	if a.holds != b.holds {
		return a.holds
	}
	if !a.created.Equal(b.created) {
		return a.created.Before(b.created)
	}
	return a.key.String() < b.key.String()
}

// registrations lists every Target and ClusterTarget in the cache, deleted
// ones included (a Target draining still has its node and its cluster).
func (r *Registry) registrations(ctx context.Context) ([]targetObject, error) {
	var out []targetObject
	var cts v1alpha1.ClusterTargetList
	if err := r.client.List(ctx, &cts); err != nil {
		return nil, fmt.Errorf("listing ClusterTargets: %w", err)
	}
	for i := range cts.Items {
		out = append(out, clusterTargetWrapper{&cts.Items[i]})
	}
	var ts v1alpha1.TargetList
	if err := r.client.List(ctx, &ts); err != nil {
		return nil, fmt.Errorf("listing Targets: %w", err)
	}
	for i := range ts.Items {
		out = append(out, targetWrapper{&ts.Items[i]})
	}
	return out, nil
}

func keyOfObject(o targetObject) proxy.TargetKey {
	return proxy.TargetKey{Namespace: o.GetNamespace(), Name: o.GetName()}
}

// kindKey names a registration for a message: "Target team-a/c1".
func kindKey(k proxy.TargetKey) string { return k.Kind() + " " + k.String() }

// nodeNameOwner returns the registration that keeps nodeName when it is not
// obj: the one holding it (its status names it), or the older one.
func (r *Registry) nodeNameOwner(ctx context.Context, obj targetObject, nodeName string) (proxy.TargetKey, bool, error) {
	all, err := r.registrations(ctx)
	if err != nil {
		return proxy.TargetKey{}, false, err
	}
	holds := func(o targetObject) bool { return o.status().VirtualNodeName == nodeName }
	me := claim{key: keyOfObject(obj), created: obj.GetCreationTimestamp().Time, holds: holds(obj)}
	for _, o := range all {
		k := keyOfObject(o)
		if k == me.key || proxy.NodeName(k) != nodeName {
			continue
		}
		if (claim{key: k, created: o.GetCreationTimestamp().Time, holds: holds(o)}).before(me) {
			return k, true, nil
		}
	}
	return proxy.TargetKey{}, false, nil
}

// sameClusterOwner returns the connected registration that reaches the
// cluster clusterID and comes before obj: the one Ready (it holds the
// cluster), or the older one. An empty clusterID (a target whose fleetlet
// does not publish it) matches nothing.
func (r *Registry) sameClusterOwner(ctx context.Context, obj targetObject, clusterID string) (proxy.TargetKey, bool, error) {
	if clusterID == "" {
		return proxy.TargetKey{}, false, nil
	}
	me := keyOfObject(obj)
	var rivals []proxy.TargetKey
	for _, c := range r.List() {
		if s := c.Summary(); c.Key() != me && s != nil && s.ClusterID == clusterID {
			rivals = append(rivals, c.Key())
		}
	}
	if len(rivals) == 0 {
		return proxy.TargetKey{}, false, nil
	}
	holds := func(o targetObject) bool {
		c := meta.FindStatusCondition(o.status().Conditions, v1alpha1.ConditionReady)
		return c != nil && c.Status == metav1.ConditionTrue
	}
	mine := claim{key: me, created: obj.GetCreationTimestamp().Time, holds: holds(obj)}
	for _, k := range rivals {
		o, err := r.get(ctx, k)
		if err != nil {
			continue // gone meanwhile: no rival
		}
		if (claim{key: k, created: o.GetCreationTimestamp().Time, holds: holds(o)}).before(mine) {
			return k, true, nil
		}
	}
	return proxy.TargetKey{}, false, nil
}

// refuseTakenNodeName refuses obj when another registration keeps its
// virtual node name: Ready=False NodeNameTaken naming the other, no
// connection, no node (a node this process ran for it is released, not
// deleted: it is the other's). It looks again after conflictRecheck.
func (r *Registry) refuseTakenNodeName(ctx context.Context, obj targetObject, key proxy.TargetKey, nodeName string) (bool, error) {
	owner, taken, err := r.nodeNameOwner(ctx, obj, nodeName)
	if err != nil {
		return false, err
	}
	if !taken {
		r.setRefused(keyOfObject(obj), false)
		return false, nil
	}
	r.removeCluster(key)
	r.nodes.Release(key)
	r.setRefused(key, true)
	defer r.hub.targetChanged(key)
	h := Health{Reason: v1alpha1.ReasonNodeNameTaken, Message: fmt.Sprintf(
		"its virtual node name %s stands for %s, registered first; rename one of them", nodeName, kindKey(owner))}
	if err := r.updateStatus(ctx, obj, h, "", summaryConditions{}); err != nil {
		return true, err
	}
	return true, errRefused{reason: h.Message}
}

// refuseSameCluster refuses cl (Health NotReady DuplicateCluster naming the
// other) while another registration that comes first reaches the same
// cluster, and lifts the refusal once none does. The connection stays, so
// that the probes keep the identity known.
func (r *Registry) refuseSameCluster(ctx context.Context, obj targetObject, cl *Cluster, summary *v1alpha1.ClusterSummaryStatus) error {
	var clusterID string
	if summary != nil {
		clusterID = summary.ClusterID
	}
	owner, dup, err := r.sameClusterOwner(ctx, obj, clusterID)
	if err != nil {
		return err
	}
	r.setRefused(cl.Key(), dup)
	if !dup {
		cl.refuse(nil)
		return nil
	}
	cl.refuse(&Health{Reason: v1alpha1.ReasonDuplicateCluster, LastProbe: cl.probeHealth().LastProbe, Message: fmt.Sprintf(
		"%s reaches the same cluster (clusterID %s) and was registered first: one cluster, one registration; delete one of them", kindKey(owner), summary.ClusterID)})
	return nil
}

// staleness is the SummaryStale condition of a connected target: nil while
// its fleetlet does not publish observedTime (an older one) or before the
// first summary.
func staleness(cl *Cluster) *metav1.Condition {
	s := cl.Summary()
	if s == nil || s.ObservedTime == nil {
		return nil
	}
	if cl.SummaryStale() {
		return &metav1.Condition{Type: v1alpha1.ConditionSummaryStale, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonSummaryNotRenewed,
			Message: fmt.Sprintf("the target's ClusterSummary was not renewed for over %s (last observedTime %s): its fleetlet is down; no new election goes there, what runs there keeps running",
				cl.opts.SummaryStaleAfter, s.ObservedTime.UTC().Format(time.RFC3339))}
	}
	return &metav1.Condition{Type: v1alpha1.ConditionSummaryStale, Status: metav1.ConditionFalse, Reason: v1alpha1.ReasonSummaryRenewed,
		Message: "the target's fleetlet renews its ClusterSummary"}
}

// schedulerState is the CandidateSchedulerRunning condition of a connected
// target, as its ClusterSummary says it: nil while the summary says
// nothing of it (an older fleetlet, a scheduler without leader election).
func schedulerState(cl *Cluster) *metav1.Condition {
	c := schedulerCondition(cl.Summary())
	if c == nil {
		return nil
	}
	return &metav1.Condition{Type: c.Type, Status: c.Status, Reason: c.Reason, Message: c.Message}
}

// summaryConditions are the conditions of a Target or ClusterTarget that
// its ClusterSummary implies; nil for one the target shows none of.
type summaryConditions struct {
	stale, scheduler *metav1.Condition
}

// set sets or removes each of them in conds, with observedGeneration gen,
// and tells whether anything changed.
func (s summaryConditions) set(conds *[]metav1.Condition, gen int64) bool {
	changed := false
	for _, c := range []struct {
		kind string
		cond *metav1.Condition
	}{{v1alpha1.ConditionSummaryStale, s.stale}, {v1alpha1.ConditionCandidateScheduler, s.scheduler}} {
		if c.cond == nil {
			changed = meta.RemoveStatusCondition(conds, c.kind) || changed
			continue
		}
		cond := *c.cond
		cond.ObservedGeneration = gen
		changed = meta.SetStatusCondition(conds, cond) || changed
	}
	return changed
}

func (r *Registry) setRefused(key proxy.TargetKey, refused bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if refused {
		r.refused[key] = true
	} else {
		delete(r.refused, key)
	}
}

// notifyRefused asks for a reconcile of every refused registration: a
// target went, one of them may take its place at once.
func (r *Registry) notifyRefused() {
	r.mu.RLock()
	defer r.mu.RUnlock()
	for k := range r.refused {
		r.notify(k)
	}
}
