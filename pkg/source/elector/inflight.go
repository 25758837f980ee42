// inflight: elections this source has decided that a target's
// ClusterSummary does not show yet count against that target when the next
// pod is ranked, so that a burst spreads instead of herding into the
// cluster that looked freest at the last probe.

package elector

import (
	corev1 "k8s.io/api/core/v1"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
	"github.com/fleetlet/fleetlet/pkg/proxy"
)

// inflight is what the proxies still gated whose election record names the
// target (its key as a string) request together: kept by the pod
// informer's events (r.inflightSums), so that reading it costs nothing of
// what is in flight there. Their delegates are not bound there yet, or
// only just, so the target's summary does not count them. Before every
// pod at start is counted it reads as none: ranking stays correct, only
// less spread.
func (r *Reconciler) inflight(target string) corev1.ResourceList {
	sum, _, ok := sumOf(r.inflightSums, target)
	if !ok || len(sum) == 0 {
		return nil
	}
	return sum
}

// electedTo is the target a gated proxy's election record names (as a
// string), "" for any other pod.
func electedTo(pod *corev1.Pod) string {
	if !proxy.Gated(pod) {
		return ""
	}
	if rec, ok := proxy.Elected(pod); ok {
		return rec.Target().String()
	}
	return ""
}

// withRequested is a summary that also counts extra requests (nil: the
// summary itself).
func withRequested(s *v1alpha1.ClusterSummaryStatus, extra corev1.ResourceList) *v1alpha1.ClusterSummaryStatus {
	if s == nil || len(extra) == 0 {
		return s
	}
	out := s.DeepCopy()
	if out.Requested == nil {
		out.Requested = corev1.ResourceList{}
	}
	for name, q := range extra {
		total := out.Requested[name]
		total.Add(q)
		out.Requested[name] = total
	}
	return out
}
