package testenv

import (
	"sync"
	"testing"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
)

// Logger logs to t (at verbosity v) until quiet is called, then drops
// everything. A controller-runtime manager may still log from its stop
// procedure's goroutines after Start returned, and logging to a finished
// test panics: register quiet with t.Cleanup after the cleanup that stops
// the manager, so that it runs first.
func Logger(t testing.TB, v int) (log logr.Logger, quiet func()) {
	var mu sync.Mutex
	done := false
	log = funcr.New(func(prefix, args string) {
		mu.Lock()
		defer mu.Unlock()
		if !done {
			t.Log(prefix, args)
		}
	}, funcr.Options{Verbosity: v})
	return log, func() {
		mu.Lock()
		defer mu.Unlock()
		done = true
	}
}
