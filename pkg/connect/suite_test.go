package connect

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/fleetlet/fleetlet/pkg/target/access"
	"github.com/fleetlet/fleetlet/pkg/testenv"
)

// Two control planes: cluster A (the source) and cluster B (the target),
// where fleetlet's Source controllers run. Neither runs the token
// controller of kube-controller-manager: fakeTokenController plays it in
// B, with real tokens from the TokenRequest API.
var (
	envA, envB       *testenv.Env
	clientA, clientB client.Client
)

const waitTimeout = 30 * time.Second

func TestMain(m *testing.M) { os.Exit(runMain(m)) }

func runMain(m *testing.M) int {
	flag.Parse()
	if _, err := testenv.FindBinaries("etcd", "kube-apiserver", "kubectl"); err != nil && testing.Short() {
		return m.Run()
	}
	root, err := testenv.ModuleRoot()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	opts := testenv.Options{CRDDirectoryPaths: []string{filepath.Join(root, "config", "crd", "bases")}}
	for _, e := range []**testenv.Env{&envA, &envB} {
		if *e, err = testenv.Start(opts); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer func(e *testenv.Env) {
			if err := e.Stop(); err != nil {
				fmt.Fprintln(os.Stderr, "stopping a control plane:", err)
			}
		}(*e)
	}
	// The tests list a lot; the default client-side rate limit would
	// make them slow, not more telling.
	for _, e := range []*testenv.Env{envA, envB} {
		e.Config.QPS, e.Config.Burst = 200, 400
	}
	if clientA, err = client.New(envA.Config, client.Options{Scheme: Scheme()}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if clientB, err = client.New(envB.Config, client.Options{Scheme: Scheme()}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}

	logs := io.Discard
	if testing.Verbose() {
		logs = os.Stderr
	}
	ctrl.SetLogger(zap.New(zap.WriteTo(logs), zap.UseDevMode(true)))
	mgrOpts := testenv.ControllerOptions()
	mgrOpts.Scheme = Scheme()
	mgr, err := ctrl.NewManager(envB.Config, mgrOpts)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if err := access.SetupWithManager(mgr, 2*time.Second); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	ctx, cancel := context.WithCancel(context.Background())
	wait := testenv.RunManagers(ctx, mgr)
	tokensDone := make(chan struct{})
	go func() {
		defer close(tokensDone)
		fakeTokenController(ctx, envB)
	}()

	code := m.Run()
	cancel()
	if err := wait(); err != nil {
		fmt.Fprintln(os.Stderr, "manager:", err)
	}
	<-tokensDone
	return code
}

// fakeTokenController fills empty service-account token Secrets as
// kube-controller-manager's token controller does (token, ca.crt,
// namespace, the ServiceAccount's UID), but with a token from the
// TokenRequest API, which this API server validates.
func fakeTokenController(ctx context.Context, env *testenv.Env) {
	cs := kubernetes.NewForConfigOrDie(env.Config)
	sel := fields.OneTermEqualSelector("type", string(corev1.SecretTypeServiceAccountToken)).String()
	for ctx.Err() == nil {
		list, err := cs.CoreV1().Secrets("").List(ctx, metav1.ListOptions{FieldSelector: sel})
		if err == nil {
			for i := range list.Items {
				fillToken(ctx, cs, &list.Items[i])
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func fillToken(ctx context.Context, cs kubernetes.Interface, s *corev1.Secret) {
	if len(s.Data[corev1.ServiceAccountTokenKey]) > 0 {
		return
	}
	name := s.Annotations[corev1.ServiceAccountNameKey]
	sa, err := cs.CoreV1().ServiceAccounts(s.Namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return
	}
	tr, err := cs.CoreV1().ServiceAccounts(s.Namespace).CreateToken(ctx, name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To(int64(3600))},
	}, metav1.CreateOptions{})
	if err != nil {
		return
	}
	s.Data = map[string][]byte{
		corev1.ServiceAccountTokenKey:     []byte(tr.Status.Token),
		corev1.ServiceAccountRootCAKey:    envB.Config.CAData,
		corev1.ServiceAccountNamespaceKey: []byte(s.Namespace),
	}
	s.Annotations[corev1.ServiceAccountUIDKey] = string(sa.UID)
	_, _ = cs.CoreV1().Secrets(s.Namespace).Update(ctx, s, metav1.UpdateOptions{})
}
