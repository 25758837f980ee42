package chaperon

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apiserver/pkg/authentication/serviceaccount"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
	"github.com/fleetlet/fleetlet/pkg/target/access"
)

// identity is who a chaperon's pod is created as: the ServiceAccount of
// the Source or ClusterSource named by its parent-cluster label.
type identity struct {
	// kind and name of the source, for messages.
	kind, name string
	// serviceAccount the source authenticates as.
	serviceAccount types.NamespacedName
}

// userName is the ServiceAccount's user name,
// system:serviceaccount:<namespace>:<name>.
func (id identity) userName() string {
	return serviceaccount.MakeUsername(id.serviceAccount.Namespace, id.serviceAccount.Name)
}

// waitError says why no pod can be created yet; the PodCreated condition
// reports it. The chaperon is checked again when its source changes.
type waitError struct {
	reason  string
	message string
}

func (e *waitError) Error() string { return e.message }

// resolveSource finds the identity for ch: the Source named after its
// parent-cluster label in its namespace, else the ClusterSource of that
// name if it selects the namespace. Either must be Ready for its current
// generation. A *waitError says why there is none; any other error is an
// API error to retry.
func resolveSource(ctx context.Context, c client.Reader, ch *v1alpha1.PodChaperon) (identity, error) {
	name := ch.Labels[v1alpha1.LabelParentCluster]
	var src v1alpha1.Source
	err := c.Get(ctx, types.NamespacedName{Namespace: ch.Namespace, Name: name}, &src)
	switch {
	case err == nil:
		what := fmt.Sprintf("Source %s/%s", src.Namespace, src.Name)
		if werr := notReady(what, src.DeletionTimestamp, src.Generation, src.Status.ObservedGeneration, src.Status.Conditions); werr != nil {
			return identity{}, werr
		}
		if src.Status.ServiceAccountName == "" {
			return identity{}, &waitError{reason: ReasonSourceNotReady, message: what + " reports no ServiceAccount"}
		}
		return identity{kind: access.KindSource, name: src.Name,
			serviceAccount: types.NamespacedName{Namespace: src.Namespace, Name: src.Status.ServiceAccountName}}, nil
	case !apierrors.IsNotFound(err):
		return identity{}, fmt.Errorf("reading Source %s/%s: %w", ch.Namespace, name, err)
	}

	var cs v1alpha1.ClusterSource
	if err := c.Get(ctx, types.NamespacedName{Name: name}, &cs); err != nil {
		if apierrors.IsNotFound(err) {
			return identity{}, &waitError{reason: ReasonSourceNotFound, message: fmt.Sprintf(
				"No Source %q in namespace %s and no ClusterSource %q: source cluster %q is not admitted here (label %s)",
				name, ch.Namespace, name, name, v1alpha1.LabelParentCluster)}
		}
		return identity{}, fmt.Errorf("reading ClusterSource %s: %w", name, err)
	}
	what := "ClusterSource " + cs.Name
	if werr := notReady(what, cs.DeletionTimestamp, cs.Generation, cs.Status.ObservedGeneration, cs.Status.Conditions); werr != nil {
		return identity{}, werr
	}
	if cs.Status.ServiceAccountName == "" || cs.Status.ServiceAccountNamespace == "" {
		return identity{}, &waitError{reason: ReasonSourceNotReady, message: what + " reports no ServiceAccount"}
	}
	sel, err := access.NamespaceSelector(&cs)
	if err != nil {
		return identity{}, &waitError{reason: ReasonSourceNotReady, message: fmt.Sprintf("%s: %v", what, err)}
	}
	var ns corev1.Namespace
	if err := c.Get(ctx, types.NamespacedName{Name: ch.Namespace}, &ns); err != nil {
		return identity{}, fmt.Errorf("reading namespace %s: %w", ch.Namespace, err)
	}
	if selected, _ := access.Selects(&cs, &ns); !selected {
		return identity{}, &waitError{reason: ReasonNamespaceNotSelected, message: fmt.Sprintf(
			"%s does not select namespace %s (its namespace selector is %q, and its source did not create it)", what, ch.Namespace, sel.String())}
	}
	return identity{kind: access.KindClusterSource, name: cs.Name,
		serviceAccount: types.NamespacedName{Namespace: cs.Status.ServiceAccountNamespace, Name: cs.Status.ServiceAccountName}}, nil
}

// notReady returns a *waitError unless the source is Ready for its current
// generation and not being deleted.
func notReady(what string, deleted *metav1.Time, generation, observed int64, conds []metav1.Condition) error {
	if deleted != nil {
		return &waitError{reason: ReasonSourceNotReady, message: what + " is being deleted"}
	}
	ready := meta.FindStatusCondition(conds, v1alpha1.ConditionReady)
	switch {
	case ready == nil || observed != generation || ready.ObservedGeneration != generation:
		return &waitError{reason: ReasonSourceNotReady, message: what + " is not provisioned yet"}
	case ready.Status != metav1.ConditionTrue:
		return &waitError{reason: ReasonSourceNotReady, message: fmt.Sprintf("%s is not Ready (%s): %s", what, ready.Reason, ready.Message)}
	}
	return nil
}
