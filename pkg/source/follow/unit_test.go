package follow

import (
	"context"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
)

// A target that refuses a kind to this source is a refusal, so the target
// is filtered instead of retried forever.
func TestEnsureTargetForbidden(t *testing.T) {
	ctx := context.Background()
	src := fake.NewClientBuilder().WithObjects(
		&corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "data"}},
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "default"}},
	).Build()
	tgt := fake.NewClientBuilder().WithInterceptorFuncs(interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if obj.GetObjectKind().GroupVersionKind().Kind == "PersistentVolumeClaim" {
				return apierrors.NewForbidden(schema.GroupResource{Resource: "persistentvolumeclaims"}, key.Name, nil)
			}
			return c.Get(ctx, key, obj, opts...)
		},
	}).Build()
	f, err := New(Options{SourceName: "src", AllowedKinds: []string{"PersistentVolumeClaim"}, Source: src, SourceAPI: src, Mapper: testMapper()})
	require.NoError(t, err)
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p", UID: "u1",
		Annotations: map[string]string{v1alpha1.AnnotationFollow: "persistentvolumeclaim/data"}}}
	refs, err := Refs(pod, &corev1.PodSpec{})
	require.NoError(t, err)
	err = f.Ensure(ctx, tgt, "t", pod, refs, StageCandidate)
	var r *Refusal
	require.Falsef(t, !errors.As(err, &r) || r.Reason != ReasonForbidden || r.Object != "persistentvolumeclaim/data",
		"got %v, want a Forbidden refusal of persistentvolumeclaim/data", err)
	// Nothing was written: the default ServiceAccount is not in the target.
	var sas corev1.ServiceAccountList
	require.NoError(t, tgt.List(ctx, &sas))
	assert.Empty(t, cmp.Diff(0, len(sas.Items)), "ServiceAccounts written (-want +got)")
}
