package testenv

import (
	"context"

	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
)

// UnreadClient is a client whose every Get fails as a cache that has not
// synced in time does (context.DeadlineExceeded): for code that must keep
// what it cannot tell.
func UnreadClient() client.Client {
	return fake.NewClientBuilder().WithInterceptorFuncs(interceptor.Funcs{
		Get: func(context.Context, client.WithWatch, client.ObjectKey, client.Object, ...client.GetOption) error {
			return context.DeadlineExceeded
		},
	}).Build()
}
