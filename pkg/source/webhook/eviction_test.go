package webhook

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
)

func evictionRequest(namespace, name string) admission.Request {
	return admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
		UID:         "1",
		Kind:        metav1.GroupVersionKind{Group: "policy", Version: "v1", Kind: "Eviction"},
		Resource:    metav1.GroupVersionResource{Version: "v1", Resource: "pods"},
		SubResource: "eviction",
		Namespace:   namespace,
		Name:        name,
		Operation:   admissionv1.Create,
	}}
}

// An eviction of a proxy that keeps a claim in its virtual node's target
// is refused, saying how to evict it anyway; the others go through.
func TestEvictionOfAProxyThatKeepsAClaim(t *testing.T) {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "fleetlet-west", Annotations: map[string]string{v1alpha1.AnnotationTarget: "west"}}}
	real := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1"}}
	claim := func(name, target string) *corev1.PersistentVolumeClaim {
		return &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, Annotations: map[string]string{v1alpha1.AnnotationTarget: target}}}
	}
	pod := func(name, node, claim string, finalizer bool, annotations map[string]string) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, Annotations: annotations}, Spec: corev1.PodSpec{NodeName: node}}
		if finalizer {
			p.Finalizers = []string{v1alpha1.FinalizerDelegate}
		}
		if claim != "" {
			p.Spec.Volumes = []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim}}}}
		}
		return p
	}
	objs := []client.Object{node, real, claim("data-db-1", "west"), claim("data-east", "east"),
		pod("db-1", "fleetlet-west", "data-db-1", true, nil),
		pod("db-2", "fleetlet-west", "data-db-1", true, map[string]string{v1alpha1.AnnotationEvictWithClaims: "true"}),
		pod("web", "fleetlet-west", "", true, nil),
		pod("other", "fleetlet-west", "data-east", true, nil),
		pod("plain", "node-1", "data-db-1", false, nil),
	}
	h := newTestHandler(t, objs...)
	for name, wantAllowed := range map[string]bool{"db-1": false, "db-2": true, "web": true, "other": true, "plain": true, "gone": true} {
		resp := h.Handle(context.Background(), evictionRequest("ns", name))
		assert.Equal(t, wantAllowed, resp.Allowed, "evicting %s: allowed (%v)", name, resp.Result)
		assert.Falsef(t, !wantAllowed && (resp.Result == nil || !strings.Contains(resp.Result.Message, v1alpha1.AnnotationEvictWithClaims) || !strings.Contains(resp.Result.Message, "data-db-1")), "evicting %s: the refusal does not say which claim nor how to evict it anyway: %v", name, resp.Result)
	}
}
