package webhook

import (
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
)

const (
	// ConfigurationName is the name of the MutatingWebhookConfiguration.
	ConfigurationName = "fleetlet-proxy-pods"
	// WebhookName is the name of its webhook of pods.
	WebhookName = "proxy-pods.multicluster.fleetlet.io"
	// EvictionWebhookName is the name of its webhook of evictions.
	EvictionWebhookName = "proxy-evictions.multicluster.fleetlet.io"
	// Path is where the webhook server serves the handler.
	Path = "/mutate-pods"
	// DefaultTimeoutSeconds is the API server's timeout for one call.
	DefaultTimeoutSeconds = 10
)

// ConfigurationOptions configure MutatingWebhookConfiguration.
type ConfigurationOptions struct {
	// Name is the configuration's name (default ConfigurationName).
	Name string
	// FleetletNamespace is fleetlet's own namespace, never mutated.
	FleetletNamespace string
	// ClientConfig says how the API server reaches the webhook: a URL (the
	// local sandbox) or a Service (in a cluster), with the CA bundle.
	ClientConfig admissionregistrationv1.WebhookClientConfig
	// TimeoutSeconds is the API server's timeout for one call (default
	// DefaultTimeoutSeconds).
	TimeoutSeconds int32
}

// MatchConditions leave to the API server, without a call, the pods Mutate
// leaves alone whatever their spec: candidates and delegates (which matters
// for `self` targets: the chaperon controller creates them in the source
// cluster), mirror pods, DaemonSet pods and pods opted out. So these pods
// never depend on fleetlet being up. Pods with spec.nodeName still call the
// webhook, which refuses those naming a virtual node.
func MatchConditions() []admissionregistrationv1.MatchCondition {
	return []admissionregistrationv1.MatchCondition{
		{
			Name:       "not-a-candidate-or-delegate",
			Expression: `!has(object.metadata.labels) || !('` + v1alpha1.LabelParentUID + `' in object.metadata.labels)`,
		},
		{
			Name:       "not-a-mirror-pod",
			Expression: `!has(object.metadata.annotations) || !('` + corev1.MirrorPodAnnotationKey + `' in object.metadata.annotations)`,
		},
		{
			Name:       "not-a-daemonset-pod",
			Expression: `!has(object.metadata.ownerReferences) || !object.metadata.ownerReferences.exists(r, r.kind == 'DaemonSet' && r.apiVersion.startsWith('apps/'))`,
		},
		{
			Name: "not-opted-out",
			Expression: `!has(object.metadata.annotations) || !('` + v1alpha1.AnnotationElect + `' in object.metadata.annotations) || ` +
				`object.metadata.annotations['` + v1alpha1.AnnotationElect + `'] != '` + v1alpha1.AnnotationElectDisabled + `'`,
		},
	}
}

// NamespaceSelector selects the enabled namespaces, minus kube-system and
// fleetlet's own.
func NamespaceSelector(fleetletNamespace string) *metav1.LabelSelector {
	excluded := []string{metav1.NamespaceSystem}
	if fleetletNamespace != "" && fleetletNamespace != metav1.NamespaceSystem {
		excluded = append(excluded, fleetletNamespace)
	}
	return &metav1.LabelSelector{
		MatchLabels: map[string]string{v1alpha1.LabelEnabled: v1alpha1.LabelEnabledValue},
		MatchExpressions: []metav1.LabelSelectorRequirement{{
			Key:      corev1.LabelMetadataName,
			Operator: metav1.LabelSelectorOpNotIn,
			Values:   excluded,
		}},
	}
}

// MutatingWebhookConfiguration returns fleetlet-proxy-pods, two webhooks
// on the enabled namespaces (minus kube-system and fleetlet's), no side
// effects, one handler (Path):
//   - proxy-pods: pods CREATE, failurePolicy Fail (no pod of an enabled
//     namespace escapes fleetlet), reinvocation IfNeeded (what later
//     webhooks add is folded into the source spec);
//   - proxy-evictions: pods/eviction CREATE, failurePolicy Ignore (an
//     eviction of a proxy that keeps a claim in its target is refused, but
//     fleetlet being down never blocks a drain).
//
// The chart ships the same with a service reference.
func MutatingWebhookConfiguration(o ConfigurationOptions) *admissionregistrationv1.MutatingWebhookConfiguration {
	none := admissionregistrationv1.SideEffectClassNone
	equivalent := admissionregistrationv1.Equivalent
	scope := admissionregistrationv1.NamespacedScope
	timeout := o.TimeoutSeconds
	if timeout == 0 {
		timeout = DefaultTimeoutSeconds
	}
	name := o.Name
	if name == "" {
		name = ConfigurationName
	}
	rule := func(resource string) []admissionregistrationv1.RuleWithOperations {
		return []admissionregistrationv1.RuleWithOperations{{
			Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
			Rule: admissionregistrationv1.Rule{
				APIGroups:   []string{""},
				APIVersions: []string{"v1"},
				Resources:   []string{resource},
				Scope:       &scope,
			},
		}}
	}
	// What both webhooks share: the handler, the namespaces, no side
	// effects, the timeout.
	webhook := func(name, resource string, failure admissionregistrationv1.FailurePolicyType, reinvocation admissionregistrationv1.ReinvocationPolicyType) admissionregistrationv1.MutatingWebhook {
		return admissionregistrationv1.MutatingWebhook{
			Name:                    name,
			ClientConfig:            *o.ClientConfig.DeepCopy(),
			Rules:                   rule(resource),
			FailurePolicy:           &failure,
			MatchPolicy:             &equivalent,
			NamespaceSelector:       NamespaceSelector(o.FleetletNamespace),
			ObjectSelector:          &metav1.LabelSelector{},
			SideEffects:             &none,
			TimeoutSeconds:          &timeout,
			AdmissionReviewVersions: []string{"v1"},
			ReinvocationPolicy:      &reinvocation,
		}
	}
	pods := webhook(WebhookName, "pods", admissionregistrationv1.Fail, admissionregistrationv1.IfNeededReinvocationPolicy)
	pods.MatchConditions = MatchConditions()
	return &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{
			Name:   name,
			Labels: map[string]string{"app.kubernetes.io/part-of": "fleetlet", "app.kubernetes.io/component": "webhook"},
		},
		Webhooks: []admissionregistrationv1.MutatingWebhook{
			pods,
			webhook(EvictionWebhookName, "pods/eviction", admissionregistrationv1.Ignore, admissionregistrationv1.NeverReinvocationPolicy),
		},
	}
}
