package webhook

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
)

// admissionsTotal counts the webhook's answers by result.
var admissionsTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "fleetlet_webhook_admissions_total",
	Help: "Pods the proxy-pod webhook answered, by result (mutated, folded, unchanged, skipped, refused, error).",
}, []string{"result"})

func init() {
	metrics.Registry.MustRegister(admissionsTotal)
}

// Handler is the admission handler of pods CREATE: it applies Mutate and
// answers with a JSON patch.
type Handler struct {
	keys  KeySource
	nodes client.Reader
	live  client.Reader
	psa   *podSecurity
}

// NewHandler returns the handler. keys gives the seal keys (while it has
// none, pods that would become proxies are refused: fail closed); nodes
// reads Node and Namespace metadata (metav1.PartialObjectMetadata),
// typically the manager's cache; live, if not nil, is asked when nodes does
// not know one (a virtual node or a namespace created a moment ago).
func NewHandler(keys KeySource, nodes, live client.Reader) (*Handler, error) {
	if keys == nil {
		return nil, errors.New("a seal key source is required")
	}
	if nodes == nil {
		return nil, errors.New("a node reader is required")
	}
	psa, err := newPodSecurity()
	if err != nil {
		return nil, err
	}
	return &Handler{keys: keys, nodes: nodes, live: live, psa: psa}, nil
}

var _ admission.Handler = &Handler{}

// Handle implements admission.Handler.
func (h *Handler) Handle(ctx context.Context, req admission.Request) admission.Response {
	if req.Operation == admissionv1.Create && req.Resource.Group == "" && req.Resource.Resource == "pods" && req.SubResource == "eviction" {
		return h.handleEviction(ctx, req)
	}
	if req.Operation != admissionv1.Create || req.Kind.Group != "" || req.Kind.Kind != "Pod" || req.SubResource != "" {
		return admission.Allowed("not a pod being created")
	}
	pod := &corev1.Pod{}
	if err := json.Unmarshal(req.Object.Raw, pod); err != nil {
		admissionsTotal.WithLabelValues("error").Inc()
		return admission.Errored(http.StatusBadRequest, fmt.Errorf("decoding the pod: %w", err))
	}
	if pod.Namespace == "" {
		pod.Namespace = req.Namespace
	}
	log := logf.FromContext(ctx).WithValues("pod", klog.KRef(pod.Namespace, podName(pod)))

	keys, keysErr := h.keys.Keys()
	res, err := Mutate(pod, Options{Keys: keys, IsVirtualNode: func(name string) (bool, error) { return h.isVirtualNode(ctx, name) }})
	var refused *RefusedError
	switch {
	case errors.Is(err, ErrNoSealKey):
		admissionsTotal.WithLabelValues("refused").Inc()
		if keysErr != nil {
			err = keysErr
		}
		log.Error(err, "Refusing a pod: no seal key")
		return admission.Denied(fmt.Sprintf("fleetlet cannot make this pod a proxy pod now (%v); pods in fleetlet-enabled namespaces are refused until the seal key is back", err))
	case errors.Is(err, ErrUnverifiedPass):
		admissionsTotal.WithLabelValues("refused").Inc()
		log.Info("Refusing a pod whose source spec does not verify", "reason", err.Error())
		return admission.Denied(err.Error())
	case errors.As(err, &refused):
		admissionsTotal.WithLabelValues("refused").Inc()
		log.V(2).Info("Refusing a pod on a virtual node", "node", refused.NodeName)
		return admission.Denied(err.Error())
	case err != nil:
		admissionsTotal.WithLabelValues("error").Inc()
		log.Error(err, "Mutating a pod")
		return admission.Errored(http.StatusInternalServerError, err)
	}
	switch res.Action {
	case Skipped:
		admissionsTotal.WithLabelValues("skipped").Inc()
		log.V(4).Info("Leaving a pod alone", "reason", res.Reason)
		return admission.Allowed("left alone: " + res.Reason)
	case Unchanged:
		admissionsTotal.WithLabelValues("unchanged").Inc()
		log.V(4).Info("Second pass found nothing new")
		return admission.Allowed("already a proxy pod")
	case Mutated:
		// What the seal hides from the API server's PodSecurity admission
		// is checked here, on the pod as the user made it.
		var violation *PodSecurityError
		switch err := h.psa.check(ctx, h.nodes, h.live, pod); {
		case errors.As(err, &violation):
			admissionsTotal.WithLabelValues("refused").Inc()
			log.V(2).Info("Refusing a pod that violates its namespace's Pod Security level", "level", violation.Level)
			return admission.Denied(err.Error())
		case err != nil:
			admissionsTotal.WithLabelValues("error").Inc()
			log.Error(err, "Checking Pod Security")
			return admission.Errored(http.StatusInternalServerError, err)
		}
	}
	// The patch is computed between the pod as this fleetlet's types read
	// it and the mutated pod, never from the raw request: fields the types
	// do not know (a newer API server) are never touched.
	original, err := json.Marshal(pod)
	if err != nil {
		return admission.Errored(http.StatusInternalServerError, err)
	}
	mutated, err := json.Marshal(res.Pod)
	if err != nil {
		return admission.Errored(http.StatusInternalServerError, err)
	}
	admissionsTotal.WithLabelValues(strings.ToLower(string(res.Action))).Inc()
	log.V(2).Info("Making a proxy pod", "action", res.Action)
	return admission.PatchResponseFromRaw(original, mutated)
}

// isVirtualNode reports whether name is one of fleetlet's virtual nodes: a
// node labelled type=virtual-kubelet that fleetlet made (labelled with its
// target, or named fleetlet-…). Another virtual-kubelet provider's nodes
// are not fleetlet's to refuse. A node that does not exist is not one.
func (h *Handler) isVirtualNode(ctx context.Context, name string) (bool, error) {
	node := &metav1.PartialObjectMetadata{}
	node.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Node"))
	err := h.nodes.Get(ctx, types.NamespacedName{Name: name}, node)
	if apierrors.IsNotFound(err) && h.live != nil {
		err = h.live.Get(ctx, types.NamespacedName{Name: name}, node)
	}
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return IsVirtualNode(node.Name, node.Labels), nil
}

// IsVirtualNode reports whether a node with this name and labels is one of
// fleetlet's virtual nodes: labelled type=virtual-kubelet, and labelled
// with its target or named with fleetlet's prefix (the name alone is not
// proof).
func IsVirtualNode(name string, labels map[string]string) bool {
	if labels[v1alpha1.LabelNodeType] != v1alpha1.NodeTypeVirtualKubelet {
		return false
	}
	_, hasCluster := labels[v1alpha1.LabelCluster]
	return hasCluster || strings.HasPrefix(name, v1alpha1.VirtualNodeNamePrefix)
}

func podName(pod *corev1.Pod) string {
	if pod.Name != "" {
		return pod.Name
	}
	return pod.GenerateName + "*"
}
