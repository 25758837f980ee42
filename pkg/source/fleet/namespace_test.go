package fleet_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/assert"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
	"github.com/fleetlet/fleetlet/pkg/source/fleet"
)

// A namespace created on demand carries the source's Pod Security labels
// and the keys the source namespace lists, never fleetlet's own keys, and
// names its source.
func TestOnDemandNamespace(t *testing.T) {
	src := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
		Name: "team-a",
		Labels: map[string]string{
			"pod-security.kubernetes.io/enforce":         "baseline",
			"pod-security.kubernetes.io/enforce-version": "latest",
			"team":                "a",
			"cost-center":         "42",
			"unlisted":            "x",
			v1alpha1.LabelEnabled: "true",
			"source.multicluster.fleetlet.io/cluster-1": "true",
			corev1.LabelMetadataName:                    "team-a",
		},
		Annotations: map[string]string{
			v1alpha1.AnnotationTargetLabels:      "team, cost-center,missing,multicluster.fleetlet.io/enabled,source.multicluster.fleetlet.io/cluster-1,kubernetes.io/metadata.name",
			v1alpha1.AnnotationTargetAnnotations: "owner",
			"owner":                              "alice@example.com",
			"note":                               "not listed",
		},
	}}
	want := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
		Name: "team-a",
		Labels: map[string]string{
			v1alpha1.LabelCreatedBySource:                "cluster-1",
			"pod-security.kubernetes.io/enforce":         "baseline",
			"pod-security.kubernetes.io/enforce-version": "latest",
			"team":        "a",
			"cost-center": "42",
		},
		Annotations: map[string]string{"owner": "alice@example.com"},
	}}
	assert.Empty(t, cmp.Diff(want, fleet.OnDemandNamespace(src, "cluster-1")), "OnDemandNamespace (-want,+got)")

	bare := fleet.OnDemandNamespace(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "plain"}}, "cluster-1")
	diff := cmp.Diff(map[string]string{v1alpha1.LabelCreatedBySource: "cluster-1"}, bare.Labels)
	assert.Falsef(t, diff != "" || bare.Annotations != nil, "a bare namespace: labels (-want,+got):\n%s, annotations %v", diff, bare.Annotations)
}
