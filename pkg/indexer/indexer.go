// Package indexer names the field indexes of fleetlet's caches, in one
// place: the manager registers them once at start (Register with All), and
// tests register the same ones on their managers and fake clients, so that
// no reader depends on another controller having registered an index it
// needs. A List by an index nobody registered fails; it never quietly
// returns nothing.
package indexer

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
	"github.com/fleetlet/fleetlet/pkg/proxy"
)

// Index is one field index: the kind it indexes, its name (what
// client.MatchingFields names) and how it reads an object.
type Index struct {
	Object  client.Object
	Field   string
	Extract client.IndexerFunc
}

// The indexes.
var (
	// ActivePodNodeName indexes pods by spec.nodeName, active pods only
	// (bound, neither Succeeded nor Failed): the pods that take a node's
	// room. The ClusterSummary counts real nodes' by it; the elector
	// counts a virtual node's before it lifts a proxy's gate.
	ActivePodNodeName = Index{Object: &corev1.Pod{}, Field: "summary.activePod.spec.nodeName", Extract: activePodNodeName}
	// GatedProxy indexes pods that still carry fleetlet's election gate
	// ("true").
	GatedProxy = Index{Object: &corev1.Pod{}, Field: "elector.gated", Extract: gatedProxy}
	// PinnedProxy indexes gated pods by the node they are pinned to.
	PinnedProxy = Index{Object: &corev1.Pod{}, Field: "elector.pinned", Extract: pinnedProxy}
	// HeadedProxy indexes gated pods by the virtual node they are pinned
	// or elected to (proxy.HeadedTo), which counts them in its
	// allocatable: its growth may let them go.
	HeadedProxy = Index{Object: &corev1.Pod{}, Field: "elector.headed", Extract: headedProxy}
	// TargetSecret indexes Targets by their kubeconfig Secret's name.
	TargetSecret = Index{Object: &v1alpha1.Target{}, Field: "spec.kubeconfigSecret.name", Extract: targetSecret}
	// ClusterTargetSecret indexes ClusterTargets by their kubeconfig
	// Secret's namespace/name.
	ClusterTargetSecret = Index{Object: &v1alpha1.ClusterTarget{}, Field: "spec.kubeconfigSecret.namespacedName", Extract: clusterTargetSecret}
)

// All are the indexes the manager registers.
var All = []Index{ActivePodNodeName, GatedProxy, PinnedProxy, HeadedProxy, TargetSecret, ClusterTargetSecret}

// Register registers indexes with a manager's field indexer.
func Register(ctx context.Context, fi client.FieldIndexer, indexes ...Index) error {
	for _, i := range indexes {
		if err := fi.IndexField(ctx, i.Object, i.Field, i.Extract); err != nil {
			return fmt.Errorf("indexing %T by %s: %w", i.Object, i.Field, err)
		}
	}
	return nil
}

// IsActivePod reports whether a pod takes room on its node: bound and not
// finished.
func IsActivePod(pod *corev1.Pod) bool {
	return pod.Spec.NodeName != "" &&
		pod.Status.Phase != corev1.PodSucceeded &&
		pod.Status.Phase != corev1.PodFailed
}

func activePodNodeName(obj client.Object) []string {
	pod, ok := obj.(*corev1.Pod)
	if !ok || !IsActivePod(pod) {
		return nil
	}
	return []string{pod.Spec.NodeName}
}

func gatedProxy(obj client.Object) []string {
	p, ok := obj.(*corev1.Pod)
	if ok && proxy.Gated(p) {
		return []string{"true"}
	}
	return nil
}

func pinnedProxy(obj client.Object) []string {
	p, ok := obj.(*corev1.Pod)
	if !ok || !proxy.Gated(p) {
		return nil
	}
	if node := proxy.PinnedNode(p); node != "" {
		return []string{node}
	}
	return nil
}

func headedProxy(obj client.Object) []string {
	p, ok := obj.(*corev1.Pod)
	if !ok || !proxy.Gated(p) {
		return nil
	}
	if node := proxy.HeadedTo(p); node != "" {
		return []string{node}
	}
	return nil
}

func targetSecret(obj client.Object) []string {
	t, ok := obj.(*v1alpha1.Target)
	if !ok || t.Spec.KubeconfigSecret == nil {
		return nil
	}
	return []string{t.Spec.KubeconfigSecret.Name}
}

func clusterTargetSecret(obj client.Object) []string {
	t, ok := obj.(*v1alpha1.ClusterTarget)
	if !ok || t.Spec.KubeconfigSecret == nil {
		return nil
	}
	return []string{t.Spec.KubeconfigSecret.Namespace + "/" + t.Spec.KubeconfigSecret.Name}
}
