package proxy

import (
	"context"
	"fmt"
	"sort"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
)

// Namespaces are the source namespaces where proxies may be, and so where
// a target may hold this source's chaperons: those enabled, and those of
// any pod that carries the delegate finalizer (such a pod stays managed
// whatever its namespace's label says now). Sorted.
func Namespaces(ctx context.Context, r client.Reader) ([]string, error) {
	set := map[string]bool{}
	var nsList corev1.NamespaceList
	if err := r.List(ctx, &nsList, client.MatchingLabels{v1alpha1.LabelEnabled: v1alpha1.LabelEnabledValue}); err != nil {
		return nil, fmt.Errorf("listing the enabled namespaces: %w", err)
	}
	for _, ns := range nsList.Items {
		set[ns.Name] = true
	}
	var pods corev1.PodList
	if err := r.List(ctx, &pods); err != nil {
		return nil, fmt.Errorf("listing the proxy pods: %w", err)
	}
	for i := range pods.Items {
		if IsManaged(&pods.Items[i]) {
			set[pods.Items[i].Namespace] = true
		}
	}
	out := make([]string, 0, len(set))
	for ns := range set {
		out = append(out, ns)
	}
	sort.Strings(out)
	return out, nil
}
