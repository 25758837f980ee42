package kubeletapi

import (
	"os"
	"testing"

	"github.com/fleetlet/fleetlet/pkg/testenv"
)

// env is the package's kube-apiserver, for the CSR flow (the tests play
// the kubelet-serving signer).
var env *testenv.Env

func TestMain(m *testing.M) { os.Exit(testenv.StartMain(m, testenv.Options{}, &env)) }
