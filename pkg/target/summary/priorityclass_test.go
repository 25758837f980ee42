package summary

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
	"github.com/fleetlet/fleetlet/pkg/testenv"
)

// wantedPriorityClass is what EnsurePriorityClass must leave behind.
type wantedPriorityClass struct {
	Value            int32
	PreemptionPolicy corev1.PreemptionPolicy
	GlobalDefault    bool
	Description      string
}

func getPriorityClass(t *testing.T, c client.Client) (*schedulingv1.PriorityClass, wantedPriorityClass) {
	t.Helper()
	pc := &schedulingv1.PriorityClass{}
	require.NoError(t, c.Get(t.Context(), client.ObjectKey{Name: v1alpha1.PriorityClassCandidate}, pc))
	return pc, wantedPriorityClass{
		Value:            pc.Value,
		PreemptionPolicy: ptr.Deref(pc.PreemptionPolicy, ""),
		GlobalDefault:    pc.GlobalDefault,
		Description:      pc.Description,
	}
}

func TestEnsurePriorityClass(t *testing.T) {
	testenv.Need(t, env)
	ctx := t.Context()
	c := newClient(t)
	want := wantedPriorityClass{
		Value:            0,
		PreemptionPolicy: corev1.PreemptNever,
		Description:      PriorityClassCandidateDescription,
	}
	deleteIt := func(ctx context.Context, t *testing.T) {
		t.Helper()
		pc := &schedulingv1.PriorityClass{}
		pc.Name = v1alpha1.PriorityClassCandidate
		require.NoError(t, client.IgnoreNotFound(c.Delete(ctx, pc)))
	}
	t.Cleanup(func() { deleteIt(context.Background(), t) })

	t.Run("created when missing", func(t *testing.T) {
		deleteIt(ctx, t)
		require.NoError(t, EnsurePriorityClass(ctx, c))
		_, got := getPriorityClass(t, c)
		assert.Empty(t, cmp.Diff(want, got), "PriorityClass (-want,+got)")
	})

	t.Run("left alone when right", func(t *testing.T) {
		before, _ := getPriorityClass(t, c)
		require.NoError(t, EnsurePriorityClass(ctx, c))
		after, _ := getPriorityClass(t, c)
		assert.Equal(t, before.ResourceVersion, after.ResourceVersion, "resourceVersion changed: EnsurePriorityClass wrote an object that was right")
	})

	t.Run("mutable fields corrected, others' labels kept", func(t *testing.T) {
		pc, _ := getPriorityClass(t, c)
		patch := client.MergeFrom(pc.DeepCopy())
		pc.Description = "changed by hand"
		pc.GlobalDefault = true
		pc.Labels = map[string]string{"team": "platform"}
		require.NoError(t, c.Patch(ctx, pc, patch))
		require.NoError(t, EnsurePriorityClass(ctx, c))
		got, gotFields := getPriorityClass(t, c)
		assert.Empty(t, cmp.Diff(want, gotFields), "PriorityClass (-want,+got)")
		assert.Equalf(t, "platform", got.Labels["team"], "labels = %v, want team=platform kept", got.Labels)
	})

	for _, tc := range []struct {
		name   string
		pc     *schedulingv1.PriorityClass
		errHas []string
	}{
		{
			name:   "another value is reported, not changed",
			pc:     &schedulingv1.PriorityClass{Value: 1000, PreemptionPolicy: ptr.To(corev1.PreemptNever)},
			errHas: []string{"value 1000", "immutable", "kubectl delete priorityclass " + v1alpha1.PriorityClassCandidate},
		},
		{
			name:   "another preemption policy is reported, not changed",
			pc:     &schedulingv1.PriorityClass{Value: 0}, // the API server defaults PreemptLowerPriority
			errHas: []string{"preemptionPolicy PreemptLowerPriority", "immutable"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			deleteIt(ctx, t)
			tc.pc.Name = v1alpha1.PriorityClassCandidate
			require.NoError(t, c.Create(ctx, tc.pc))
			before, beforeFields := getPriorityClass(t, c)
			err := EnsurePriorityClass(ctx, c)
			require.Error(t, err, "EnsurePriorityClass succeeded with a wrong immutable field")
			for _, s := range tc.errHas {
				assert.Containsf(t, err.Error(), s, "error %q does not say %q", err, s)
			}
			after, afterFields := getPriorityClass(t, c)
			assert.Falsef(t, after.UID != before.UID || after.ResourceVersion != before.ResourceVersion,
				"the PriorityClass was changed or recreated: %+v -> %+v", beforeFields, afterFields)
		})
	}
}
