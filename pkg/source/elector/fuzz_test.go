package elector

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
)

// FuzzParseClusterSelector: whatever a user writes in
// multicluster.fleetlet.io/cluster-selector, parsing never panics, and a
// selector it accepts is one Kubernetes can print and parse again.
func FuzzParseClusterSelector(f *testing.F) {
	for _, seed := range []string{
		"topology.kubernetes.io/region=eu",
		"topology.kubernetes.io/region in (eu, us),topology.kubernetes.io/zone!=eu-1a",
		"!topology.kubernetes.io/zone",
		"kubernetes.io/hostname=n1",
		"region=",
		"a=b,,c",
		"(",
		"",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, expr string) {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{v1alpha1.AnnotationClusterSelector: expr}}}
		sel, err := ParseClusterSelector(pod)
		if err != nil {
			return
		}
		again, err := labels.Parse(sel.String())
		require.NoError(t, err, "the selector %q it produced does not parse", sel.String())
		assert.Equal(t, sel.String(), again.String())
	})
}
