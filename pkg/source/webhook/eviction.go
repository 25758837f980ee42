package webhook

import (
	"context"
	"fmt"
	"net/http"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
	"github.com/fleetlet/fleetlet/pkg/proxy"
	"github.com/fleetlet/fleetlet/pkg/source/claims"
)

// handleEviction answers the eviction of a pod (CREATE pods/eviction): a
// proxy that mounts a claim kept in its virtual node's target is not
// evicted, unless it is annotated multicluster.fleetlet.io/evict-with-claims
// "true". Evicted, it would only be made again and wait for that target:
// moving a claim is a user's act, not a side effect of a drain. A delete
// (kubectl drain --disable-eviction) is not held. Every other eviction is
// let through, PodDisruptionBudgets deciding as usual. Its webhook
// (EvictionWebhookName) fails open: fleetlet down never blocks a drain.
func (h *Handler) handleEviction(ctx context.Context, req admission.Request) admission.Response {
	var pod corev1.Pod
	if err := h.nodes.Get(ctx, types.NamespacedName{Namespace: req.Namespace, Name: req.Name}, &pod); err != nil {
		if apierrors.IsNotFound(err) {
			return admission.Allowed("no such pod")
		}
		return admission.Errored(http.StatusInternalServerError, fmt.Errorf("reading pod %s/%s: %w", req.Namespace, req.Name, err))
	}
	if !proxy.IsManaged(&pod) || pod.Spec.NodeName == "" || pod.Annotations[v1alpha1.AnnotationEvictWithClaims] == "true" {
		return admission.Allowed("not a proxy that keeps claims")
	}
	node := &metav1.PartialObjectMetadata{}
	node.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Node"))
	if err := h.nodes.Get(ctx, types.NamespacedName{Name: pod.Spec.NodeName}, node); err != nil {
		if apierrors.IsNotFound(err) {
			return admission.Allowed("its node is gone")
		}
		return admission.Errored(http.StatusInternalServerError, fmt.Errorf("reading node %s: %w", pod.Spec.NodeName, err))
	}
	target := node.Annotations[v1alpha1.AnnotationTarget]
	if target == "" {
		return admission.Allowed("not on a virtual node")
	}
	claim, err := claims.HeldIn(ctx, h.nodes, &pod, target)
	if err != nil {
		return admission.Errored(http.StatusInternalServerError, err)
	}
	if claim == "" {
		return admission.Allowed("no claim kept in " + target)
	}
	admissionsTotal.WithLabelValues("refused").Inc()
	return admission.Denied(fmt.Sprintf("pod %s/%s keeps claim %s in target %s: evicted, it would only wait for %s again, its data there. "+
		"To evict it anyway, annotate it %s=true (or delete it: kubectl drain --disable-eviction)",
		pod.Namespace, pod.Name, claim, target, target, v1alpha1.AnnotationEvictWithClaims))
}
