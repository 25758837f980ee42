package summary

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
)

// PriorityClassCandidateDescription is the description of the
// fleetlet-candidate PriorityClass.
const PriorityClassCandidateDescription = "Every fleetlet candidate pod has this class: " +
	"candidates never preempt other pods, and the Priority admission plugin accepts them. " +
	"Managed by fleetlet."

// CandidatePriorityClass returns the fleetlet-candidate PriorityClass as
// fleetlet wants it: value 0, preemptionPolicy Never, not the global default.
func CandidatePriorityClass() *schedulingv1.PriorityClass {
	never := corev1.PreemptNever
	return &schedulingv1.PriorityClass{
		// The managed-by label lets `fleetlet cleanup` tell a class the
		// manager created from one someone else made.
		ObjectMeta:       metav1.ObjectMeta{Name: v1alpha1.PriorityClassCandidate, Labels: map[string]string{"app.kubernetes.io/managed-by": "fleetlet"}},
		Value:            0,
		PreemptionPolicy: &never,
		GlobalDefault:    false,
		Description:      PriorityClassCandidateDescription,
	}
}

// +kubebuilder:rbac:groups=scheduling.k8s.io,resources=priorityclasses,verbs=get;create;patch

// EnsurePriorityClass creates the fleetlet-candidate PriorityClass if it is
// missing and corrects its description and globalDefault if someone changed
// them. Its value and preemptionPolicy are immutable in Kubernetes: if they
// differ, it returns an error that says so and changes nothing: it never
// deletes and recreates a class that someone deliberately changed, and that
// pods may already use.
//
// c should read from the API server, not from a manager's cache: the cache is
// not started before the manager is, and a Get through it would start a
// PriorityClass informer for one object.
func EnsurePriorityClass(ctx context.Context, c client.Client) error {
	log := ctrl.LoggerFrom(ctx)
	want := CandidatePriorityClass()
	got := &schedulingv1.PriorityClass{}
	err := c.Get(ctx, client.ObjectKeyFromObject(want), got)
	if apierrors.IsNotFound(err) {
		log.Info("Creating the PriorityClass", "priorityClass", want.Name)
		err = c.Create(ctx, want, client.FieldOwner(FieldOwner))
		if err == nil {
			return nil
		}
		if !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating PriorityClass %s: %w", want.Name, err)
		}
		// Another replica created it in between: check what it wrote.
		err = c.Get(ctx, client.ObjectKeyFromObject(want), got)
	}
	if err != nil {
		return fmt.Errorf("getting PriorityClass %s: %w", want.Name, err)
	}

	gotPolicy := corev1.PreemptLowerPriority // the API server's default
	if got.PreemptionPolicy != nil {
		gotPolicy = *got.PreemptionPolicy
	}
	if got.Value != want.Value || gotPolicy != *want.PreemptionPolicy {
		return fmt.Errorf("PriorityClass %s has value %d and preemptionPolicy %s, but fleetlet candidates need value %d and preemptionPolicy %s; "+
			"both fields are immutable, so fleetlet does not change them: delete it (kubectl delete priorityclass %s) and fleetlet creates it again when it next starts",
			got.Name, got.Value, gotPolicy, want.Value, *want.PreemptionPolicy, got.Name)
	}

	if got.Description == want.Description && got.GlobalDefault == want.GlobalDefault {
		return nil
	}
	log.Info("Correcting the PriorityClass", "priorityClass", got.Name,
		"globalDefault", got.GlobalDefault, "description", got.Description)
	patch := client.MergeFrom(got.DeepCopy())
	got.Description = want.Description
	got.GlobalDefault = want.GlobalDefault
	if err := c.Patch(ctx, got, patch, client.FieldOwner(FieldOwner)); err != nil {
		return fmt.Errorf("correcting PriorityClass %s: %w", got.Name, err)
	}
	return nil
}
