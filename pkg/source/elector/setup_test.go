package elector

import (
	"errors"
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/stretchr/testify/assert"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
	"github.com/fleetlet/fleetlet/pkg/source/fleet"
)

// TestAffected: a target's change requeues a gated proxy only when it may
// change where the proxy goes.
func TestAffected(t *testing.T) {
	ready := fleet.View{Present: true, Ready: true, Free: rl("cpu", "4")}
	roomy := ready
	roomy.Free = rl("cpu", "5")
	busier := ready
	busier.Free = rl("cpu", "3")
	notReady := ready
	notReady.Ready = false
	withElected := func(status corev1.ConditionStatus, reason string) *corev1.Pod {
		p := &corev1.Pod{}
		p.Status.Conditions = []corev1.PodCondition{{Type: v1alpha1.ConditionElected, Status: status, Reason: reason}}
		return p
	}
	pending := withElected(corev1.ConditionFalse, reasonNoClusters)
	electing := &corev1.Pod{}
	elected := withElected(corev1.ConditionTrue, reasonElected)
	invalid := withElected(corev1.ConditionFalse, reasonInvalidSpec)
	for _, tc := range []struct {
		name          string
		before, after fleet.View
		pod           *corev1.Pod
		want          bool
	}{
		{"load moved, pending", ready, busier, pending, false},
		{"load moved, electing", ready, busier, electing, false},
		{"room grew, pending", ready, roomy, pending, true},
		{"room grew, electing", ready, roomy, electing, false},
		{"room grew, elected", ready, roomy, elected, false},
		{"room grew, invalid spec", ready, roomy, invalid, false},
		{"not ready, electing", ready, notReady, electing, true},
		{"not ready, elected", ready, notReady, elected, true},
		{"ready again, pending", notReady, ready, pending, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := affected(fleet.Change{Before: tc.before, After: tc.after}, tc.pod)
			assert.Falsef(t, got != tc.want, "affected = %v, want %v", got, tc.want)
		})
	}
}

// TestIsNamespaceNotFound: a create in a namespace the target lacks is told
// from a kind it does not serve.
func TestIsNamespaceNotFound(t *testing.T) {
	assert.True(t, isNamespaceNotFound(fmt.Errorf("creating: %w", apierrors.NewNotFound(schema.GroupResource{Resource: "namespaces"}, "shop"))), "a missing namespace not recognised")
	assert.False(t, isNamespaceNotFound(apierrors.NewNotFound(schema.GroupResource{Group: "multicluster.fleetlet.io", Resource: "podchaperons"}, "")), "a kind the target does not serve taken for a missing namespace")
	assert.False(t, isNamespaceNotFound(errors.New("connection refused")), "a transport error taken for a missing namespace")
}
