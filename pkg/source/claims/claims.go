package claims

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
)

// Names lists the claims the user's spec mounts (its persistentVolumeClaim
// volumes), sorted, each once.
func Names(spec *corev1.PodSpec) []string {
	if spec == nil {
		return nil
	}
	var names []string
	for _, v := range spec.Volumes {
		if v.PersistentVolumeClaim != nil && v.PersistentVolumeClaim.ClaimName != "" {
			names = append(names, v.PersistentVolumeClaim.ClaimName)
		}
	}
	sort.Strings(names)
	return slices.Compact(names)
}

// TargetOf is the target a source claim is placed in, "" if none.
func TargetOf(c *corev1.PersistentVolumeClaim) string {
	return c.Annotations[v1alpha1.AnnotationTarget]
}

// Placement is where a pod's claims are.
type Placement struct {
	// Target is the key of the target every placed claim names; "" when
	// none is placed.
	Target string
	// Claims are the source claims the pod mounts, by name order.
	Claims []*corev1.PersistentVolumeClaim
	// Placed names, for each placed claim, its target.
	Placed map[string]string
}

// Unplaced are the claims not placed yet.
func (p Placement) Unplaced() []*corev1.PersistentVolumeClaim {
	var out []*corev1.PersistentVolumeClaim
	for _, c := range p.Claims {
		if TargetOf(c) == "" {
			out = append(out, c)
		}
	}
	return out
}

// Probing tells whether the pod mounts claims and none is placed: its
// target is chosen by probe candidates first.
func (p Placement) Probing() bool { return len(p.Claims) > 0 && p.Target == "" }

// Why says that a target is not the claims' own; "" when it is, or when
// the pod mounts no placed claim.
func (p Placement) Why(target string) string {
	if p.Target == "" || p.Target == target {
		return ""
	}
	return fmt.Sprintf("its claim %s is kept in target %s", p.placedName(), p.Target)
}

// Holds is what the claims' own target is told when it cannot take the
// pod now: the pod waits for it.
func (p Placement) Holds(reason string) string {
	return fmt.Sprintf("waiting for this target, which holds claim %s: %s", p.placedName(), reason)
}

func (p Placement) placedName() string {
	for _, c := range p.Claims {
		if TargetOf(c) != "" {
			return c.Name
		}
	}
	return ""
}

// Problem is why a pod's claims cannot be placed anywhere now: a claim
// missing in the source, or claims kept in different targets.
type Problem struct {
	Reason  string
	Message string
}

func (p *Problem) Error() string { return p.Message }

// Problem reasons, fit for the Elected condition and Events.
const (
	ReasonClaimNotFound = "ClaimNotFound"
	ReasonClaimsApart   = "ClaimsInDifferentTargets"
	ReasonClaimDeleting = "ClaimBeingDeleted"
)

// Read finds where the named claims of a namespace are. A claim missing or
// being deleted, or claims placed in different targets, is a *Problem.
func Read(ctx context.Context, c client.Reader, namespace string, names []string) (Placement, error) {
	p := Placement{Placed: map[string]string{}}
	for _, name := range names {
		var pvc corev1.PersistentVolumeClaim
		if err := c.Get(ctx, types.NamespacedName{Namespace: namespace, Name: name}, &pvc); err != nil {
			if apierrors.IsNotFound(err) {
				return p, &Problem{Reason: ReasonClaimNotFound, Message: fmt.Sprintf("persistentvolumeclaim %q not found", name)}
			}
			return p, err
		}
		if pvc.DeletionTimestamp != nil {
			return p, &Problem{Reason: ReasonClaimDeleting, Message: fmt.Sprintf("persistentvolumeclaim %q is being deleted", name)}
		}
		p.Claims = append(p.Claims, &pvc)
		if t := TargetOf(&pvc); t != "" {
			p.Placed[name] = t
		}
	}
	for _, name := range slices.Sorted(maps.Keys(p.Placed)) {
		t := p.Placed[name]
		if p.Target == "" {
			p.Target = t
			continue
		}
		if t != p.Target {
			var parts []string
			for _, n := range slices.Sorted(maps.Keys(p.Placed)) {
				parts = append(parts, n+" in "+p.Placed[n])
			}
			return p, &Problem{Reason: ReasonClaimsApart, Message: "the pod's claims are kept in different targets (" + strings.Join(parts, ", ") + "); no target has them all"}
		}
	}
	return p, nil
}

// Place records target on each claim that has none, with the claim's
// resourceVersion as a precondition: two pods that share a claim never
// place it twice. A claim placed meanwhile elsewhere fails the call.
func Place(ctx context.Context, c client.Client, claims []*corev1.PersistentVolumeClaim, target string) error {
	for _, pvc := range claims {
		if t := TargetOf(pvc); t != "" {
			if t != target {
				return fmt.Errorf("claim %s is kept in target %s, not %s", pvc.Name, t, target)
			}
			continue
		}
		patched := pvc.DeepCopy()
		if patched.Annotations == nil {
			patched.Annotations = map[string]string{}
		}
		patched.Annotations[v1alpha1.AnnotationTarget] = target
		if err := c.Patch(ctx, patched, client.MergeFromWithOptions(pvc, client.MergeFromWithOptimisticLock{})); err != nil {
			return fmt.Errorf("recording target %s on claim %s: %w", target, pvc.Name, err)
		}
	}
	return nil
}

// HeldIn names a claim the pod mounts that is kept in target, "" if none:
// such a pod, evicted, would only wait for that target again.
func HeldIn(ctx context.Context, c client.Reader, pod *corev1.Pod, target string) (string, error) {
	for _, name := range Names(&pod.Spec) {
		var pvc corev1.PersistentVolumeClaim
		err := c.Get(ctx, types.NamespacedName{Namespace: pod.Namespace, Name: name}, &pvc)
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return "", err
		}
		if TargetOf(&pvc) == target {
			return name, nil
		}
	}
	return "", nil
}
