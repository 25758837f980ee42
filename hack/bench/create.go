package main

import (
	"context"
	"errors"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
)

// createBackoff spaces the tries of one creation an overloaded API server
// refused: about 50 s in all before the pod is counted as not created.
var createBackoff = wait.Backoff{Duration: 200 * time.Millisecond, Factor: 2, Jitter: 0.2, Steps: 9, Cap: 10 * time.Second}

// create makes one pod, trying again what an overloaded API server answers
// (timeouts, 429, 5xx, a dropped connection), and returns how many tries it
// took. AlreadyExists after a failed try is a success: that try's request
// was carried out although its answer was lost.
func create(ctx context.Context, cs kubernetes.Interface, pod *corev1.Pod) (tries int, err error) {
	err = retry.OnError(createBackoff, func(err error) bool { return ctx.Err() == nil && overloaded(err) }, func() error {
		tries++
		_, err := cs.CoreV1().Pods(pod.Namespace).Create(ctx, pod, metav1.CreateOptions{})
		if tries > 1 && apierrors.IsAlreadyExists(err) {
			return nil
		}
		return err
	})
	return tries, err
}

// overloaded: the error says the API server could not take the request
// now, not that the request is wrong.
func overloaded(err error) bool {
	return apierrors.IsTimeout(err) || apierrors.IsServerTimeout(err) || apierrors.IsTooManyRequests(err) ||
		apierrors.IsInternalError(err) || apierrors.IsServiceUnavailable(err) || apierrors.IsUnexpectedServerError(err) ||
		utilnet.IsConnectionReset(err) || utilnet.IsConnectionRefused(err) || utilnet.IsProbableEOF(err) ||
		errors.Is(err, context.DeadlineExceeded)
}
