package vnode

import (
	"os"
	"testing"

	"github.com/fleetlet/fleetlet/pkg/testenv"
)

// env is the package's one kube-apiserver; nodes are cluster-scoped, so each
// test uses target names of its own.
var env *testenv.Env

func TestMain(m *testing.M) { os.Exit(testenv.StartMain(m, testenv.Options{}, &env)) }
