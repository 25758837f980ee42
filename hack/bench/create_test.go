package main

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// TestCreateRetriesAnOverloadedServer: "http: Handler timeout" (a 504 the
// apiserver sends under a burst) and 429 are tried again; a lost answer to a
// request that was carried out counts as created; a refusal is not retried.
func TestCreateRetriesAnOverloadedServer(t *testing.T) {
	old := createBackoff
	t.Cleanup(func() { createBackoff = old })
	createBackoff.Duration = 0

	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "bench"}}
	gr := corev1.Resource("pods")
	for _, tc := range []struct {
		name      string
		answers   []error
		wantTries int
		wantErr   bool
	}{
		{"handler timeout, then created", []error{apierrors.NewTimeoutError("http: Handler timeout", 0), nil}, 2, false},
		{"429 twice, then created", []error{apierrors.NewTooManyRequests("slow down", 1), apierrors.NewTooManyRequests("slow down", 1), nil}, 3, false},
		{"lost answer: AlreadyExists after a timeout", []error{apierrors.NewServerTimeout(gr, "create", 1), apierrors.NewAlreadyExists(gr, "p")}, 2, false},
		{"AlreadyExists at once is an error", []error{apierrors.NewAlreadyExists(gr, "p")}, 1, true},
		{"a refusal is not retried", []error{apierrors.NewForbidden(gr, "p", errors.New("no"))}, 1, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cs := fake.NewClientset()
			calls := 0
			cs.PrependReactor("create", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
				err := tc.answers[min(calls, len(tc.answers)-1)]
				calls++
				return true, pod, err
			})
			tries, err := create(context.Background(), cs, pod)
			require.Falsef(t, tries != tc.wantTries || (err != nil) != tc.wantErr,
				"create = %d tries, %v; want %d tries, error %t", tries, err, tc.wantTries, tc.wantErr)
		})
	}
}
