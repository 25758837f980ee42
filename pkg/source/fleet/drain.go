// drain: a deleted Target or ClusterTarget is emptied before it goes.

package fleet

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
	"github.com/fleetlet/fleetlet/pkg/indexer"
	"github.com/fleetlet/fleetlet/pkg/proxy"
)

// Events of a drain.
const (
	EventDraining          = "Draining"
	EventForcedDisconnect  = "ForcedDisconnect"
	EventDisconnected      = "Disconnected"
	drainRecheck           = 2 * time.Second
	drainListLimit         = 5
	reasonDrainWaiting     = "Waiting"
	reasonDrainBlocked     = "Blocked"
	reasonDrainUnreachable = "Unreachable"
)

// errDraining asks for the drain to be looked at again soon.
type errDraining struct{ why string }

func (e errDraining) Error() string { return "draining: " + e.why }

// drain empties a deleted target before it goes: no election goes there any
// more (Cluster.Draining), the proxies bound to its virtual node are evicted
// (PodDisruptionBudgets respected) and their controllers make new ones
// elsewhere, and once none is left there this source's remaining chaperons
// there (candidates, leftovers) are deleted. Only when the target shows none
// are the connection, the virtual node and the finalizer removed. While it
// cannot progress, the Draining condition names the blocker; the
// force-disconnect annotation ends the wait and an Event says what is left.
func (r *Registry) drain(ctx context.Context, obj targetObject, key proxy.TargetKey) error {
	if !controllerutil.ContainsFinalizer(obj.object(), v1alpha1.FinalizerDrain) {
		r.removeCluster(key)
		return r.nodes.Remove(ctx, key)
	}
	if reason := refusal(obj); reason != "" && obj.status().VirtualNodeName == "" {
		// Refused before it ever had a node (an older fleetlet gave
		// refused ones the finalizer too): no election ever went there,
		// and the node name or the cluster it would drain are another
		// registration's. Nothing is evicted or deleted.
		r.recorder.Eventf(obj.object(), nil, corev1.EventTypeNormal, EventDisconnected, "Disconnect",
			"Removed without a drain: the registration was refused (%s), nothing of it runs anywhere", reason)
		return r.removeDrainFinalizer(ctx, obj, key)
	}
	cl, connected := r.Get(key)
	if connected {
		cl.draining.Store(true)
		defer r.hub.targetChanged(key)
	}
	force := obj.object().GetAnnotations()[v1alpha1.AnnotationForceDisconnect] == "true"
	left, reason, why := r.drainStep(ctx, key, cl, connected, proxy.NodeName(key))
	switch {
	case why == "":
	case force:
		r.recorder.Eventf(obj.object(), nil, corev1.EventTypeWarning, EventForcedDisconnect, "Disconnect",
			"Disconnected by %s=true, leaving behind: %s", v1alpha1.AnnotationForceDisconnect, why)
	default:
		if err := r.setDraining(ctx, obj, reason, why); err != nil {
			return err
		}
		return errDraining{why: why}
	}
	if left == 0 && why == "" {
		r.recorder.Eventf(obj.object(), nil, corev1.EventTypeNormal, EventDisconnected, "Disconnect", "Drained: nothing of this source is left there")
	}
	return r.removeDrainFinalizer(ctx, obj, key)
}

// refusal is the reason a registration was refused (NodeNameTaken,
// DuplicateCluster) as its Ready condition records it, empty if it was
// not.
func refusal(obj targetObject) string {
	c := meta.FindStatusCondition(obj.status().Conditions, v1alpha1.ConditionReady)
	if c == nil || c.Status == metav1.ConditionTrue {
		return ""
	}
	if c.Reason == v1alpha1.ReasonNodeNameTaken || c.Reason == v1alpha1.ReasonDuplicateCluster {
		return c.Reason
	}
	return ""
}

// removeDrainFinalizer ends a drain. The finalizer first: if its removal
// fails, the connection is still there for the next pass. Once the Target
// is gone, its NotFound removes the connection and the node (reconcile);
// the node controller never deletes a node that stands for another target.
func (r *Registry) removeDrainFinalizer(ctx context.Context, obj targetObject, key proxy.TargetKey) error {
	patch := client.MergeFrom(obj.object().DeepCopyObject().(client.Object))
	controllerutil.RemoveFinalizer(obj.object(), v1alpha1.FinalizerDrain)
	if err := r.client.Patch(ctx, obj.object(), patch); client.IgnoreNotFound(err) != nil {
		return err
	}
	r.removeCluster(key)
	return r.nodes.Remove(ctx, key)
}

// drainStep takes the next step of a drain; why is empty once nothing is
// left, else it says what the drain waits for (reason: Waiting, Blocked,
// Unreachable). left counts the chaperons still in the target.
func (r *Registry) drainStep(ctx context.Context, key proxy.TargetKey, cl *Cluster, connected bool, node string) (left int, reason, why string) {
	var waits, blocked []string
	var bound corev1.PodList
	if err := r.client.List(ctx, &bound, client.MatchingFields{indexer.ActivePodNodeName.Field: node}); err != nil {
		return -1, reasonDrainWaiting, fmt.Sprintf("listing the pods on %s: %v", node, err)
	}
	var pinned corev1.PodList
	if err := r.client.List(ctx, &pinned, client.MatchingFields{indexer.PinnedProxy.Field: node}); err != nil {
		return -1, reasonDrainWaiting, fmt.Sprintf("listing the pods pinned to %s: %v", node, err)
	}
	for i := range bound.Items {
		p := &bound.Items[i]
		if proxy.OwnedByDaemonSet(p) {
			// As kubectl drain --ignore-daemonsets: its DaemonSet would
			// make it again at once while the node stands; it goes
			// with the node.
			continue
		}
		waits = append(waits, p.Namespace+"/"+p.Name)
		if p.DeletionTimestamp != nil {
			continue
		}
		if err := r.evict(ctx, p); err != nil {
			blocked = append(blocked, fmt.Sprintf("%s/%s: %v", p.Namespace, p.Name, err))
		}
	}
	for i := range pinned.Items {
		waits = append(waits, pinned.Items[i].Namespace+"/"+pinned.Items[i].Name)
	}
	if len(blocked) > 0 {
		return -1, reasonDrainBlocked, fmt.Sprintf("%d proxies cannot be evicted yet: %s", len(blocked), firstFew(blocked))
	}
	if connected && len(waits) == 0 && cl.Health().Reason == v1alpha1.ReasonDuplicateCluster {
		// Refused for another registration of the same cluster: the
		// chaperons this source has there are that one's to keep.
		return 0, "", ""
	}
	if !connected || !cl.Health().Ready {
		h := Health{Reason: "NotConnected", Message: "no connection"}
		if connected {
			h = cl.Health()
		}
		return -1, reasonDrainUnreachable, fmt.Sprintf("the target does not answer (%s: %s), so what runs there cannot be deleted; set %s=true to disconnect anyway", h.Reason, h.Message, v1alpha1.AnnotationForceDisconnect)
	}
	if len(waits) > 0 {
		return -1, reasonDrainWaiting, fmt.Sprintf("waiting for %d proxies to leave %s: %s", len(waits), node, firstFew(waits))
	}
	chaperons, err := r.chaperonsOf(ctx, key, cl)
	if err != nil {
		return -1, reasonDrainUnreachable, err.Error()
	}
	var names []string
	for i := range chaperons {
		pc := &chaperons[i]
		names = append(names, pc.Namespace+"/"+pc.Name)
		if pc.DeletionTimestamp == nil {
			err := cl.Client().Delete(ctx, pc, client.PropagationPolicy(metav1.DeletePropagationForeground))
			if err != nil && !apierrors.IsNotFound(err) {
				return len(names), reasonDrainUnreachable, fmt.Sprintf("deleting PodChaperon %s/%s there: %v", pc.Namespace, pc.Name, err)
			}
		}
	}
	if len(names) > 0 {
		return len(names), reasonDrainWaiting, fmt.Sprintf("waiting for %d PodChaperons to be gone there: %s", len(names), firstFew(names))
	}
	// A pod the target's chaperon controller made from a stale cache after
	// its chaperon went is collected there by the garbage collector (its
	// owner is gone); the drain ends once nothing of this source is left.
	pods, err := r.podsOf(ctx, key, cl)
	if err != nil {
		return -1, reasonDrainUnreachable, err.Error()
	}
	if len(pods) > 0 {
		return len(pods), reasonDrainWaiting, fmt.Sprintf("waiting for the target's garbage collector to delete %d pods of this source whose PodChaperons are gone: %s", len(pods), firstFew(pods))
	}
	return 0, "", ""
}

// podsOf names this source's pods in a target, in the namespaces
// chaperonsOf looks at.
func (r *Registry) podsOf(ctx context.Context, key proxy.TargetKey, cl *Cluster) ([]string, error) {
	namespaces, err := r.drainNamespaces(ctx, key)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, ns := range namespaces {
		var list corev1.PodList
		err := cl.Client().List(ctx, &list, client.InNamespace(ns), client.MatchingLabels{v1alpha1.LabelParentCluster: r.opts.SourceName})
		if apierrors.IsForbidden(err) || apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("listing this source's pods in namespace %s there: %w", ns, err)
		}
		for i := range list.Items {
			out = append(out, ns+"/"+list.Items[i].Name)
		}
	}
	return out, nil
}

// drainNamespaces are the namespaces of a target where this source's
// objects may be: a namespaced Target's own, or every one where proxies
// may be.
func (r *Registry) drainNamespaces(ctx context.Context, key proxy.TargetKey) ([]string, error) {
	if key.Namespace != "" {
		return []string{key.Namespace}, nil
	}
	return proxy.Namespaces(ctx, r.client)
}

// chaperonsOf lists this source's chaperons in a target, namespace by
// namespace (the source's identity there may list only in the namespaces
// admitted to it): a namespaced Target's own, or every one where proxies
// may be. A namespace the source may not read there holds none of them.
func (r *Registry) chaperonsOf(ctx context.Context, key proxy.TargetKey, cl *Cluster) ([]v1alpha1.PodChaperon, error) {
	namespaces, err := r.drainNamespaces(ctx, key)
	if err != nil {
		return nil, err
	}
	var out []v1alpha1.PodChaperon
	for _, ns := range namespaces {
		var list v1alpha1.PodChaperonList
		err := cl.Client().List(ctx, &list, client.InNamespace(ns), client.MatchingLabels{v1alpha1.LabelParentCluster: r.opts.SourceName})
		if apierrors.IsForbidden(err) || apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("listing this source's chaperons in namespace %s there: %w", ns, err)
		}
		out = append(out, list.Items...)
	}
	return out, nil
}

// evict asks the source's API server to evict a proxy, as kubectl drain
// does: a PodDisruptionBudget that allows no disruption refuses it (429).
// Not retried here (client-go would retry a 429 for its Retry-After, ten
// times): the drain looks again at its next pass.
func (r *Registry) evict(ctx context.Context, p *corev1.Pod) error {
	ev := &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Namespace: p.Namespace, Name: p.Name}}
	err := r.policy.Post().AbsPath("/api/v1").Namespace(p.Namespace).Resource("pods").Name(p.Name).
		SubResource("eviction").Body(ev).MaxRetries(0).Do(ctx).Error()
	if apierrors.IsNotFound(err) {
		return nil
	}
	if apierrors.IsTooManyRequests(err) {
		return fmt.Errorf("a PodDisruptionBudget allows no disruption now")
	}
	return err
}

// setDraining writes the Draining condition when it changes.
func (r *Registry) setDraining(ctx context.Context, obj targetObject, reason, why string) error {
	before := obj.DeepCopyObject().(client.Object)
	if !meta.SetStatusCondition(&obj.status().Conditions, metav1.Condition{Type: v1alpha1.ConditionDraining, Status: metav1.ConditionTrue, Reason: reason, Message: why, ObservedGeneration: obj.GetGeneration()}) {
		return nil
	}
	if err := r.client.Status().Patch(ctx, obj.object(), client.MergeFrom(before)); err != nil {
		return fmt.Errorf("updating the status of %s: %w", klog.KObj(obj), err)
	}
	r.recorder.Eventf(obj.object(), nil, corev1.EventTypeNormal, EventDraining, "Disconnect", "%s", why)
	return nil
}

// ensureDrainFinalizer adds the drain finalizer to a live target.
func (r *Registry) ensureDrainFinalizer(ctx context.Context, obj targetObject) error {
	if controllerutil.ContainsFinalizer(obj.object(), v1alpha1.FinalizerDrain) {
		return nil
	}
	patch := client.MergeFrom(obj.object().DeepCopyObject().(client.Object))
	controllerutil.AddFinalizer(obj.object(), v1alpha1.FinalizerDrain)
	if err := r.client.Patch(ctx, obj.object(), patch); err != nil {
		return fmt.Errorf("adding the drain finalizer to %s: %w", klog.KObj(obj), err)
	}
	return nil
}

func firstFew(items []string) string {
	if len(items) <= drainListLimit {
		return strings.Join(items, ", ")
	}
	return strings.Join(items[:drainListLimit], ", ") + fmt.Sprintf(" and %d more", len(items)-drainListLimit)
}
