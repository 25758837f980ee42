package testenv

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// CandidateUnwritten checks, for d, that no scheduler wrote anything about an
// unbound candidate pod: no nominatedNodeName, no PodScheduled condition, no
// FailedScheduling Event (only the last once the pod is gone). The
// candidate scheduler writes none of them for a candidate that waits at
// Permit, loses the election, or is deleted.
func CandidateUnwritten(t TB, c client.Client, pod *corev1.Pod, d time.Duration) {
	t.Helper()
	ctx := context.Background()
	for end := time.Now().Add(d); ; time.Sleep(pollInterval) {
		if err := candidateWritten(ctx, c, client.ObjectKeyFromObject(pod)); err != nil {
			t.Fatalf("%s/%s: %v", pod.Namespace, pod.Name, err)
		}
		if time.Now().After(end) {
			return
		}
	}
}

func candidateWritten(ctx context.Context, c client.Client, key client.ObjectKey) error {
	got := &corev1.Pod{}
	err := c.Get(ctx, key, got)
	switch {
	case apierrors.IsNotFound(err):
		return failedScheduling(ctx, c, key)
	case err != nil:
		return err
	case got.Spec.NodeName != "":
		return fmt.Errorf("bound to %s", got.Spec.NodeName)
	case got.Status.NominatedNodeName != "":
		return fmt.Errorf("nominatedNodeName %s written", got.Status.NominatedNodeName)
	}
	for _, cond := range got.Status.Conditions {
		if cond.Type == corev1.PodScheduled {
			return fmt.Errorf("PodScheduled written: %s %s: %s", cond.Status, cond.Reason, cond.Message)
		}
	}
	return failedScheduling(ctx, c, key)
}

func failedScheduling(ctx context.Context, c client.Client, key client.ObjectKey) error {
	events := &corev1.EventList{}
	if err := c.List(ctx, events, client.InNamespace(key.Namespace)); err != nil {
		return err
	}
	for _, e := range events.Items {
		if e.InvolvedObject.Name == key.Name && e.Reason == "FailedScheduling" {
			return fmt.Errorf("FailedScheduling Event: %s", e.Message)
		}
	}
	return nil
}
