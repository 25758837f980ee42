package testenv

import (
	"context"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
)

// Scheme knows Kubernetes' own kinds and fleetlet's.
func Scheme() *runtime.Scheme {
	s := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(s))
	utilruntime.Must(v1alpha1.AddToScheme(s))
	return s
}

// pollInterval is how often Eventually and EventuallyTrue try.
const pollInterval = 50 * time.Millisecond

// tryTimeout bounds one try: a request in flight when the deadline passes
// finishes, and the failure names the last state seen.
const tryTimeout = 30 * time.Second

// Eventually retries check until it returns nil; past timeout it fails the
// test with check's last error. The timeout only ends a test that would
// hang: what matters is the condition.
func Eventually(t TB, timeout time.Duration, what string, check func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := check()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: still not true after %s: %v", what, timeout, err)
		}
		time.Sleep(pollInterval)
	}
}

// EventuallyTrue retries cond, each try with a context of its own, until it
// holds; past timeout it fails the test, with what the dump functions say.
func EventuallyTrue(t TB, timeout time.Duration, what string, cond func(context.Context) bool, dump ...func() string) {
	t.Helper()
	Eventually(t, timeout, what, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), tryTimeout)
		defer cancel()
		if cond(ctx) {
			return nil
		}
		msg := "not yet"
		for _, d := range dump {
			msg += "; " + d()
		}
		return fmt.Errorf("%s", msg)
	})
}
