package proxy

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// PeekWait bounds Peek's wait for a cache that has not synced yet.
const PeekWait = time.Second

// Peek reads a pod from a cache without copying it, for code that runs on
// an informer's event goroutine (a filter of news): the wait for a cache
// not synced yet is bounded by PeekWait. The pod is the cache's: read it,
// never change it.
func Peek(r client.Reader, nn types.NamespacedName) (*corev1.Pod, error) {
	ctx, cancel := context.WithTimeout(context.Background(), PeekWait)
	defer cancel()
	var p corev1.Pod
	if err := r.Get(ctx, nn, &p, client.UnsafeDisableDeepCopy); err != nil {
		return nil, err
	}
	return &p, nil
}
