package follow

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
)

// FuzzFollowAnnotation: whatever multicluster.fleetlet.io/follow holds,
// reading it never panics; it is either refused as Malformed or every object
// it names has a kind and a valid name.
func FuzzFollowAnnotation(f *testing.F) {
	for _, seed := range []string{
		"configmap/extra,secret/tls",
		"persistentvolumeclaim/data, configmap.example.com/x",
		"configmap/",
		"/x",
		"configmap/Not_Valid",
		",,,",
		"a/b/c",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, value string) {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", Annotations: map[string]string{v1alpha1.AnnotationFollow: value}}}
		refs, err := Refs(pod, &corev1.PodSpec{})
		if err != nil {
			var refusal *Refusal
			require.True(t, errors.As(err, &refusal), "an error that is not a Refusal: %v", err)
			assert.Equal(t, ReasonMalformed, refusal.Reason)
			return
		}
		for _, r := range refs {
			assert.NotEmpty(t, r.Kind)
			assert.Empty(t, validation.IsDNS1123Subdomain(r.Name), "name %q", r.Name)
		}
	})
}
