package fleet

import (
	"context"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
	"github.com/fleetlet/fleetlet/pkg/proxy"
)

// orphanNodes deletes, once each time this replica starts leading, the
// virtual nodes whose Target or ClusterTarget is gone: a target deleted
// while no manager ran (its drain finalizer removed by hand, say) leaves a
// node no event will ever name. Nodes are known by the target annotation
// (vnode writes it); a node without one is left alone.
type orphanNodes struct{ r *Registry }

// NeedLeaderElection implements manager.LeaderElectionRunnable: the
// virtual nodes are the leader's.
func (orphanNodes) NeedLeaderElection() bool { return true }

// Start implements manager.Runnable. A failure is logged, never fatal: the
// next leader looks again.
func (o orphanNodes) Start(ctx context.Context) error {
	if err := o.r.collectOrphanNodes(ctx); err != nil && ctx.Err() == nil {
		ctrl.Log.WithName("target").Error(err, "Cannot collect the virtual nodes of deleted targets")
	}
	return nil
}

func (r *Registry) collectOrphanNodes(ctx context.Context) error {
	var nodes corev1.NodeList
	if err := r.apiReader.List(ctx, &nodes, client.MatchingLabels{v1alpha1.LabelNodeType: v1alpha1.NodeTypeVirtualKubelet}); err != nil {
		return err
	}
	log := ctrl.Log.WithName("target")
	for _, n := range nodes.Items {
		named := n.Annotations[v1alpha1.AnnotationTarget]
		if named == "" {
			continue
		}
		key := keyFromAnnotation(named)
		if proxy.NodeName(key) != n.Name {
			continue // not a name fleetlet gives that target: not ours
		}
		_, err := getTarget(ctx, r.apiReader, key)
		if err == nil {
			continue
		}
		if !apierrors.IsNotFound(err) {
			return err
		}
		log.Info("Deleting the virtual node of a target that is gone", "node", n.Name, "target", named)
		if err := r.nodes.Remove(ctx, key); err != nil {
			return err
		}
	}
	return nil
}

// keyFromAnnotation parses AnnotationTarget: "namespace/name" or "name".
func keyFromAnnotation(v string) proxy.TargetKey {
	if ns, name, ok := strings.Cut(v, "/"); ok {
		return proxy.TargetKey{Namespace: ns, Name: name}
	}
	return proxy.TargetKey{Name: v}
}
