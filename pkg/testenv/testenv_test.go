package testenv

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

var env *Env

func TestMain(m *testing.M) { os.Exit(StartMain(m, Options{}, &env)) }

// The control plane is really the Kubernetes version go.mod pins, and it
// stores what it is given.
func TestControlPlaneServesPinnedVersion(t *testing.T) {
	Need(t, env)
	cs, err := kubernetes.NewForConfig(env.Config)
	require.NoError(t, err)
	v, err := cs.Discovery().ServerVersion()
	require.NoError(t, err)
	assert.Falsef(t, v.GitVersion != "v1.37.2", "server version = %q, want v1.37.2 (version ldflags missing?)", v.GitVersion)
	ctx := context.Background()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "testenv-"}}
	got, err := cs.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{})
	require.NoError(t, err)
	if _, err := cs.CoreV1().Namespaces().Get(ctx, got.Name, metav1.GetOptions{}); err != nil {
		assert.Failf(t, "namespace", "namespace %s not found after create: %v", got.Name, err)
	}
}

func TestFindBinariesNamesWhatIsMissing(t *testing.T) {
	t.Setenv(BinDirEnv, t.TempDir())
	_, err := FindBinaries("etcd", "no-such-binary")
	require.Error(t, err, "FindBinaries succeeded in an empty folder")
	for _, want := range []string{"etcd", "no-such-binary", "make build"} {
		assert.Truef(t, strings.Contains(err.Error(), want), "error %q does not mention %q", err, want)
	}
}

type fakeTB struct {
	failed string
}

func (*fakeTB) Helper() {}
func (f *fakeTB) Fatalf(format string, args ...any) {
	f.failed = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func TestEventually(t *testing.T) {
	tries := 0
	Eventually(t, time.Second, "the third try", func() error {
		tries++
		if tries < 3 {
			return errors.New("not yet")
		}
		return nil
	})
	assert.Equal(t, 3, tries)

	tb := &fakeTB{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		EventuallyTrue(tb, 200*time.Millisecond, "never", func(context.Context) bool { return false }, func() string { return "last: nothing" })
	}()
	<-done
	assert.Contains(t, tb.failed, "never: still not true after 200ms")
	assert.Contains(t, tb.failed, "last: nothing")
}
