package devices

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
)

// Need is what a pod's resource claims ask for.
type Need struct {
	// Exact are the devices per DeviceClass its exact requests ask for
	// (a request for all devices of a class counts one).
	Exact map[string]int32
	// OneOf are the firstAvailable requests: each needs one of its
	// classes.
	OneOf [][]string
	// Shared are the ResourceClaims the pod shares with others, as read
	// from the source.
	Shared []*resourcev1.ResourceClaim
}

// None tells a pod that asks for no device.
func (n Need) None() bool { return len(n.Exact) == 0 && len(n.OneOf) == 0 && len(n.Shared) == 0 }

// Home is the target the pod's shared claims are placed in ("" when none
// is), and the claim that says so. apart says why no target will do:
// two of its claims are placed in different targets.
func (n Need) Home() (target, claim, apart string) {
	for _, c := range n.Shared {
		t := c.Annotations[v1alpha1.AnnotationTarget]
		switch {
		case t == "":
		case target == "":
			target, claim = t, c.Name
		case t != target:
			return "", "", fmt.Sprintf("its resource claims %s and %s are allocated in different targets (%s, %s)", claim, c.Name, target, t)
		}
	}
	return target, claim, ""
}

// Place records target on the pod's shared claims that are not placed yet,
// each with its resourceVersion as precondition: two pods that share a
// claim never place it in two targets (a conflict: read again).
func Place(ctx context.Context, c client.Client, shared []*resourcev1.ResourceClaim, target string) error {
	for _, claim := range shared {
		if claim.Annotations[v1alpha1.AnnotationTarget] != "" {
			continue
		}
		patched := claim.DeepCopy()
		if patched.Annotations == nil {
			patched.Annotations = map[string]string{}
		}
		patched.Annotations[v1alpha1.AnnotationTarget] = target
		if err := c.Patch(ctx, patched, client.MergeFromWithOptions(claim, client.MergeFromWithOptimisticLock{})); err != nil {
			return fmt.Errorf("recording target %s on resource claim %s: %w", target, claim.Name, err)
		}
		claim.Annotations = patched.Annotations
	}
	return nil
}

// Read reads the claim specs the pod's spec names in the source (its
// ResourceClaimTemplates and shared ResourceClaims) and returns what they
// ask for. A template or claim that does not exist is skipped.
func Read(ctx context.Context, c client.Reader, namespace string, spec *corev1.PodSpec) (Need, error) {
	var n Need
	if spec == nil {
		return n, nil
	}
	for _, rc := range spec.ResourceClaims {
		var claim *resourcev1.ResourceClaimSpec
		var err error
		switch {
		case rc.ResourceClaimTemplateName != nil:
			var t resourcev1.ResourceClaimTemplate
			err = c.Get(ctx, types.NamespacedName{Namespace: namespace, Name: *rc.ResourceClaimTemplateName}, &t)
			claim = &t.Spec.Spec
		case rc.ResourceClaimName != nil:
			shared := &resourcev1.ResourceClaim{}
			err = c.Get(ctx, types.NamespacedName{Namespace: namespace, Name: *rc.ResourceClaimName}, shared)
			claim = &shared.Spec
			if err == nil {
				n.Shared = append(n.Shared, shared)
			}
		default:
			continue
		}
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return n, fmt.Errorf("reading resource claim %s of the pod: %w", rc.Name, err)
		}
		n.add(claim)
	}
	return n, nil
}

func (n *Need) add(spec *resourcev1.ResourceClaimSpec) {
	for _, r := range spec.Devices.Requests {
		switch {
		case r.Exactly != nil:
			count := int32(1)
			if r.Exactly.AllocationMode != resourcev1.DeviceAllocationModeAll && r.Exactly.Count > 0 {
				count = int32(r.Exactly.Count)
			}
			if n.Exact == nil {
				n.Exact = map[string]int32{}
			}
			n.Exact[r.Exactly.DeviceClassName] += count
		case len(r.FirstAvailable) > 0:
			var classes []string
			for _, s := range r.FirstAvailable {
				classes = append(classes, s.DeviceClassName)
			}
			n.OneOf = append(n.OneOf, classes)
		}
	}
}

// Why says why a target with this summary cannot run the pod: a
// DeviceClass it asks for that the target does not serve. "" when it can,
// or when the summary counts no devices (the target's scheduler decides).
func (n Need) Why(s *v1alpha1.ClusterSummaryStatus) string {
	if n.None() || s == nil || !s.DevicesCounted {
		return ""
	}
	var missing []string
	for class := range n.Exact {
		if _, ok := s.DeviceClass(class); !ok {
			missing = append(missing, class)
		}
	}
	for _, classes := range n.OneOf {
		if !slices.ContainsFunc(classes, func(c string) bool { _, ok := s.DeviceClass(c); return ok }) {
			missing = append(missing, strings.Join(classes, " or "))
		}
	}
	if len(missing) == 0 {
		return ""
	}
	sort.Strings(missing)
	return fmt.Sprintf("it serves no DeviceClass %s (the pod's resource claims ask for it)", strings.Join(missing, ", "))
}

// Short tells that the summary counts fewer free devices of a class than
// the pod's exact requests ask for. False when the summary counts no
// devices.
func (n Need) Short(s *v1alpha1.ClusterSummaryStatus) bool {
	if len(n.Exact) == 0 || s == nil || !s.DevicesCounted {
		return false
	}
	for class, want := range n.Exact {
		if c, ok := s.DeviceClass(class); !ok || c.Free() < want {
			return true
		}
	}
	return false
}
