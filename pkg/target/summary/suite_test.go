package summary

import (
	"os"
	"testing"

	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
	"github.com/fleetlet/fleetlet/pkg/testenv"
)

// env is the package's kube-apiserver (nil in -short mode without binaries).
var env *testenv.Env

// scheme knows the built-in types and fleetlet's.
var scheme = runtime.NewScheme()

func TestMain(m *testing.M) {
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		panic(err)
	}
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		panic(err)
	}
	os.Exit(testenv.StartMainWithCRDs(m, &env))
}
