package webhook

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	psapi "k8s.io/pod-security-admission/api"
	"k8s.io/pod-security-admission/policy"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// podSecurity checks the user's pod against its namespace's enforced Pod
// Security level before the webhook seals part of it away. The API
// server's PodSecurity admission runs after the mutating webhooks, so it
// sees the proxy, without the hostPorts the seal keeps for the delegate:
// without this check, a namespace that enforces baseline would let a user
// run hostPorts in every target, which the source's own policy forbids.
//
// It reads the level from the namespace's pod-security.kubernetes.io/
// enforce and enforce-version labels; an unlabelled namespace is
// privileged (the API server's default configuration: a cluster whose
// PodSecurity configuration sets another default, or exempts users, is
// not known here). Labels that do not parse are left to the API server's
// own admission.
type podSecurity struct {
	evaluator policy.Evaluator
}

func newPodSecurity() (*podSecurity, error) {
	e, err := policy.NewEvaluator(policy.DefaultChecks(), nil)
	if err != nil {
		return nil, fmt.Errorf("the Pod Security evaluator: %w", err)
	}
	return &podSecurity{evaluator: e}, nil
}

// PodSecurityError: the user's pod violates its namespace's enforced Pod
// Security level in what the proxy no longer shows.
type PodSecurityError struct {
	Level   string
	Details string
}

func (e *PodSecurityError) Error() string {
	return fmt.Sprintf("violates PodSecurity %q: %s (checked by fleetlet on the pod as created: the proxy pod no longer carries what its delegate will)", e.Level, e.Details)
}

// check evaluates pod, as the user made it, against the enforced level of
// its namespace, read (metadata only) from cached, else from live: a
// namespace created a moment ago may not be in the cache yet.
func (p *podSecurity) check(ctx context.Context, cached, live client.Reader, pod *corev1.Pod) error {
	ns := &metav1.PartialObjectMetadata{}
	ns.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Namespace"))
	key := types.NamespacedName{Name: pod.Namespace}
	err := cached.Get(ctx, key, ns)
	if apierrors.IsNotFound(err) && live != nil {
		err = live.Get(ctx, key, ns)
	}
	if apierrors.IsNotFound(err) {
		return nil // the API server refuses a pod of a namespace that does not exist
	}
	if err != nil {
		return fmt.Errorf("reading namespace %s for its Pod Security level: %w", pod.Namespace, err)
	}
	privileged := psapi.LevelVersion{Level: psapi.LevelPrivileged, Version: psapi.LatestVersion()}
	pol, errs := psapi.PolicyToEvaluate(ns.Labels, psapi.Policy{Enforce: privileged, Audit: privileged, Warn: privileged})
	if len(errs) > 0 || pol.Enforce.Level == psapi.LevelPrivileged {
		return nil
	}
	res := policy.AggregateCheckResults(p.evaluator.EvaluatePod(pol.Enforce, &pod.ObjectMeta, &pod.Spec))
	if res.Allowed {
		return nil
	}
	return &PodSecurityError{Level: pol.Enforce.String(), Details: res.ForbiddenDetail()}
}
