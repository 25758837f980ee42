package webhook

import (
	"context"
	"crypto/rand"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
	"github.com/fleetlet/fleetlet/pkg/testenv"
)

// The integration tests share one kube-apiserver and one fleetlet manager
// serving the webhook in URL mode on loopback, as in the local sandbox.
var (
	env       *testenv.Env
	k8sClient client.Client
	mgr       ctrl.Manager
	sealKeys  Keys
	scheme    = runtime.NewScheme()
)

const (
	// fleetletNamespace is the manager's namespace in the tests.
	fleetletNamespace = "fleetlet-system"
	// waitTimeout bounds every wait on the API server or the manager.
	waitTimeout = 60 * time.Second
)

func TestMain(m *testing.M) { os.Exit(runMain(m)) }

func runMain(m *testing.M) int {
	flag.Parse()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		panic(err)
	}
	if _, err := testenv.FindBinaries("etcd", "kube-apiserver", "kubectl"); err != nil && testing.Short() {
		return m.Run()
	}
	// A `go test -fuzz` worker process only runs the fuzz target: no
	// control plane of its own.
	if f := flag.Lookup("test.fuzzworker"); f != nil && f.Value.String() == "true" {
		return m.Run()
	}
	logs := io.Discard
	if testing.Verbose() {
		logs = os.Stderr
	}
	ctrl.SetLogger(zap.New(zap.WriteTo(logs), zap.UseDevMode(true)))

	var err error
	env, err = testenv.Start(testenv.Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() {
		if err := env.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "stopping the control plane:", err)
		}
	}()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done, err := startManager(ctx)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	code := m.Run()
	cancel()
	if err := <-done; err != nil {
		fmt.Fprintln(os.Stderr, "the manager failed:", err)
		if code == 0 {
			code = 1
		}
	}
	return code
}

// startManager starts a manager with the webhook in URL mode and waits
// until it is ready and the API server calls it.
func startManager(ctx context.Context) (<-chan error, error) {
	var err error
	k8sClient, err = client.New(env.Config, client.Options{Scheme: scheme})
	if err != nil {
		return nil, err
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: fleetletNamespace}}
	if err := k8sClient.Create(ctx, ns); err != nil {
		return nil, err
	}
	// The seal key Secret, as the chart makes it.
	key := make([]byte, MinKeyLength)
	if _, err := rand.Read(key); err != nil {
		return nil, err
	}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: fleetletNamespace, Name: DefaultSealKeySecretName},
		Data: map[string][]byte{SealKeyDataKey: key}}
	if err := k8sClient.Create(ctx, secret); err != nil {
		return nil, err
	}
	keys := NewSecretKeys(k8sClient, fleetletNamespace, DefaultSealKeySecretName, nil)
	if err := keys.Load(ctx); err != nil {
		return nil, err
	}
	if sealKeys, err = keys.Keys(); err != nil {
		return nil, err
	}
	port, probe := freePort(), fmt.Sprintf("127.0.0.1:%d", freePort())
	mgr, err = ctrl.NewManager(env.Config, ctrl.Options{
		Scheme:                 scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: probe,
	})
	if err != nil {
		return nil, err
	}
	o := DefaultServerOptions()
	o.Namespace = fleetletNamespace
	o.SealKeys = StaticKeys(sealKeys)
	o.Host = "127.0.0.1"
	o.Port = port
	o.URL = "https://127.0.0.1:" + strconv.Itoa(port) + Path
	if err := Setup(ctx, mgr, o); err != nil {
		return nil, err
	}
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	if err := waitReady(ctx, probe); err != nil {
		return nil, err
	}
	// The API server's view of webhook configurations follows an
	// informer: wait until it calls ours.
	nsName, err := newNamespaceNamed(ctx, "warmup", map[string]string{v1alpha1.LabelEnabled: v1alpha1.LabelEnabledValue})
	if err != nil {
		return nil, err
	}
	err = poll(ctx, func() (bool, error) {
		pod := makePod(nsName, "warmup").obj()
		if err := k8sClient.Create(ctx, pod, client.DryRunAll); err != nil {
			return false, nil
		}
		return len(pod.Spec.SchedulingGates) > 0, nil
	})
	return done, err
}

// freePort returns a loopback address's port nobody listens on.
func freePort() int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// waitReady waits for the manager's /readyz on probe (host:port).
func waitReady(ctx context.Context, probe string) error {
	url := "http://" + probe + "/readyz"
	var last string
	err := poll(ctx, func() (bool, error) {
		resp, err := http.Get(url)
		if err != nil {
			last = err.Error()
			return false, nil
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		last = string(b)
		return resp.StatusCode == http.StatusOK, nil
	})
	if err != nil {
		return fmt.Errorf("the manager is not ready (%s): %w", last, err)
	}
	return nil
}

// poll calls f until it returns true, an error, or waitTimeout passes.
func poll(ctx context.Context, f func() (bool, error)) error {
	ctx, cancel := context.WithTimeout(ctx, waitTimeout)
	defer cancel()
	for {
		ok, err := f()
		if err != nil || ok {
			return err
		}
		select {
		case <-ctx.Done():
			return errors.New("timed out")
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// newNamespaceNamed creates a namespace (generated name from prefix) with
// labels and the default ServiceAccount pods need (no controller manager
// makes it here).
func newNamespaceNamed(ctx context.Context, prefix string, labels map[string]string) (string, error) {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: prefix + "-", Labels: labels}}
	if err := k8sClient.Create(ctx, ns); err != nil {
		return "", err
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "default"}}
	if err := k8sClient.Create(ctx, sa); err != nil {
		return "", err
	}
	return ns.Name, nil
}

// newNamespace is newNamespaceNamed for a test.
func newNamespace(t *testing.T, labels map[string]string) string {
	t.Helper()
	name, err := newNamespaceNamed(context.Background(), "webhook", labels)
	require.NoError(t, err)
	return name
}

// enabled are the labels of an enabled namespace.
func enabled(extra ...string) map[string]string {
	l := map[string]string{v1alpha1.LabelEnabled: v1alpha1.LabelEnabledValue}
	for i := 0; i+1 < len(extra); i += 2 {
		l[extra[i]] = extra[i+1]
	}
	return l
}
