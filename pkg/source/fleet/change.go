// change: what a target's reconcile changed, as the controllers that
// requeue proxies on it need to know, so that a probe that only refreshed a
// summary requeues nothing.

package fleet

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
	"github.com/fleetlet/fleetlet/pkg/proxy"
)

// View is a target as elections and feedback see it.
type View struct {
	// Present is false for a target that is not connected (deleted, or
	// never registered).
	Present bool
	// Ready, Draining, SummaryStale and SchedulerDown are the cluster's
	// state.
	Ready, Draining, SummaryStale, SchedulerDown bool
	// Free is what its summary says it can still run (allocatable −
	// requested, and the free devices of each DeviceClass under
	// DeviceClassResource); nil without a summary.
	Free corev1.ResourceList
	// cluster tells a reconnected target (a new connection, its caches
	// new) from the one before.
	cluster *Cluster
	// turns is how often the target's readiness turned: one that went
	// NotReady and back before a watcher looked again is still a change
	// of health (a controller that left a proxy for its target's
	// NotReady waits for it).
	turns uint64
}

// viewOf is a live cluster's view; nil is a target not connected.
func viewOf(c *Cluster) View {
	if c == nil {
		return View{}
	}
	h := c.Health()
	c.mu.RLock()
	turns := c.turns
	c.mu.RUnlock()
	return View{Present: true, Ready: h.Ready, Draining: c.Draining(), SummaryStale: c.SummaryStale(), SchedulerDown: c.SchedulerDown(), Free: Free(c.Summary()), cluster: c, turns: turns}
}

// Free is allocatable − requested of a summary, per resource, and the free
// devices of each DeviceClass under DeviceClassResource; nil without one.
func Free(s *v1alpha1.ClusterSummaryStatus) corev1.ResourceList {
	if s == nil {
		return nil
	}
	out := corev1.ResourceList{}
	for name, alloc := range s.Allocatable {
		q := alloc.DeepCopy()
		if used, ok := s.Requested[name]; ok {
			q.Sub(used)
		}
		out[name] = q
	}
	for _, c := range s.DeviceClasses {
		out[DeviceClassResource(c.Name)] = *resource.NewQuantity(int64(c.Free()), resource.DecimalSI)
	}
	return out
}

// DeviceClassResource names, in View.Free, the free devices of a
// DeviceClass: a class served anew, or devices freed, is room that grew.
func DeviceClassResource(class string) corev1.ResourceName {
	return corev1.ResourceName("deviceclass.multicluster.fleetlet.io/" + class)
}

// Change is one target's view before and after a reconcile.
type Change struct {
	Key           proxy.TargetKey
	Before, After View
}

// Health tells whether the target came, went, was reconnected or changed
// readiness, also there and back: what its bound proxies' feedback cares
// about.
func (c Change) Health() bool {
	b, a := c.Before, c.After
	return b.Present != a.Present || b.Ready != a.Ready || b.cluster != a.cluster || b.turns != a.turns
}

// Eligibility tells whether the change may change which proxies the target
// may take: health, a drain, a summary turning stale or fresh, the
// candidate scheduler stopping or starting.
func (c Change) Eligibility() bool {
	b, a := c.Before, c.After
	return c.Health() || b.Draining != a.Draining || b.SummaryStale != a.SummaryStale || b.SchedulerDown != a.SchedulerDown
}

// RoomGrew tells whether the target can now run more of some resource than
// before (a first summary, capacity added, pods gone): a proxy no cluster
// could take may fit now.
func (c Change) RoomGrew() bool {
	b, a := c.Before.Free, c.After.Free
	if a == nil {
		return false
	}
	if b == nil {
		return true
	}
	for name, q := range a {
		old, ok := b[name]
		if !ok || q.Cmp(old) > 0 {
			return true
		}
	}
	return false
}

// Any tells whether anything a watcher looks at changed.
func (c Change) Any() bool { return c.Eligibility() || !sameFree(c.Before.Free, c.After.Free) }

func sameFree(a, b corev1.ResourceList) bool {
	// nil is no summary: never the same as a summary with nothing free.
	return (a == nil) == (b == nil) && equality.Semantic.DeepEqual(a, b)
}
