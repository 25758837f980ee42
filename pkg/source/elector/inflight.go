// inflight: elections this source has decided that a target's
// ClusterSummary does not show yet count against that target when the next
// pod is ranked, so that a burst spreads instead of herding into the
// cluster that looked freest at the last probe.

package elector

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
	"github.com/fleetlet/fleetlet/pkg/indexer"
	"github.com/fleetlet/fleetlet/pkg/proxy"
)

// inflight sums the requests of the proxies still gated whose election
// record names the target (its key as a string): read from the cache by
// an index of them, derived from the API like every phase, so that it
// costs what is in flight there, not every gated proxy. Their delegates
// are not bound there yet, or only just, so the target's summary does not
// count them. An error reads as none: ranking stays correct, only less
// spread.
func (r *Reconciler) inflight(ctx context.Context, target string) corev1.ResourceList {
	var pods corev1.PodList
	// Read only: no deep copies.
	if err := r.client.List(ctx, &pods, client.MatchingFields{indexer.ElectedProxy.Field: target}, client.UnsafeDisableDeepCopy); err != nil || len(pods.Items) == 0 {
		return nil
	}
	sum := corev1.ResourceList{}
	for i := range pods.Items {
		for name, q := range proxy.PodRequests(&pods.Items[i]) {
			total := sum[name]
			total.Add(q)
			sum[name] = total
		}
	}
	return sum
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
