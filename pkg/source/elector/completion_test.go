package elector

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
)

// The mark that elects a chaperon adds fleetlet's delegate-pod finalizer in
// the same write (once), keeping any other, and deleting a chaperon that
// carries it needs no propagation.
func TestMarkAddsTheDelegatePodFinalizer(t *testing.T) {
	at := time.Date(2026, 12, 5, 20, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name string
		had  []string
		want []string
	}{
		{name: "none", want: []string{v1alpha1.FinalizerDelegatePod}},
		{name: "another kept", had: []string{"example.com/keep"}, want: []string{"example.com/keep", v1alpha1.FinalizerDelegatePod}},
		{name: "once", had: []string{v1alpha1.FinalizerDelegatePod}, want: nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pc := &v1alpha1.PodChaperon{ObjectMeta: metav1.ObjectMeta{Finalizers: tc.had}}
			raw, err := markPatch(pc, at)
			require.NoError(t, err)
			var got struct {
				Metadata struct {
					Annotations map[string]string `json:"annotations"`
					Finalizers  []string          `json:"finalizers"`
				} `json:"metadata"`
			}
			require.NoError(t, json.Unmarshal(raw, &got))
			assert.Equal(t, tc.want, got.Metadata.Finalizers, "finalizers")
			assert.Equal(t, map[string]string{v1alpha1.AnnotationElected: "true", v1alpha1.AnnotationElectedAt: "2026-12-05T20:00:00Z"}, got.Metadata.Annotations)
			assert.Equal(t, tc.had, pc.Finalizers, "the cached chaperon's finalizers, untouched")
			if got.Metadata.Finalizers != nil {
				pc.Finalizers = got.Metadata.Finalizers
			}
			assert.Equal(t, metav1.DeletePropagationBackground, chaperonPropagation(pc), "deleting the marked chaperon")
		})
	}
	assert.Equal(t, metav1.DeletePropagationForeground, chaperonPropagation(&v1alpha1.PodChaperon{}), "deleting a chaperon never marked, or marked by an earlier release")

	// A chaperon being deleted: the mark alone (the API server refuses a
	// new finalizer on it, and a stale list would drop the garbage
	// collector's).
	deleting := &v1alpha1.PodChaperon{ObjectMeta: metav1.ObjectMeta{DeletionTimestamp: &metav1.Time{Time: at}, Finalizers: []string{metav1.FinalizerDeleteDependents}}}
	raw, err := markPatch(deleting, at)
	require.NoError(t, err)
	assert.JSONEq(t, `{"metadata":{"annotations":{"multicluster.fleetlet.io/elected":"true","multicluster.fleetlet.io/elected-at":"2026-12-05T20:00:00Z"}}}`, string(raw), "the mark of a chaperon being deleted")
}
