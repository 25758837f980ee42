package access

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
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
	"github.com/fleetlet/fleetlet/pkg/testenv"
)

var (
	env       *testenv.Env
	k8sClient client.Client
	scheme    = runtime.NewScheme()
)

// waitTimeout bounds every wait on the controllers.
const waitTimeout = 30 * time.Second

func TestMain(m *testing.M) { os.Exit(runMain(m)) }

// runMain starts one control plane (the target cluster) and the Source
// controllers against it.
func runMain(m *testing.M) int {
	flag.Parse()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, v1alpha1.AddToScheme} {
		if err := add(scheme); err != nil {
			panic(err)
		}
	}
	if _, err := testenv.FindBinaries("etcd", "kube-apiserver", "kubectl"); err != nil && testing.Short() {
		return m.Run()
	}
	root, err := testenv.ModuleRoot()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	env, err = testenv.Start(testenv.Options{CRDDirectoryPaths: []string{filepath.Join(root, "config", "crd", "bases")}})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() {
		if err := env.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "stopping the control plane:", err)
		}
	}()
	k8sClient, err = client.New(env.Config, client.Options{Scheme: scheme})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	logs := io.Discard
	if testing.Verbose() {
		logs = os.Stderr
	}
	ctrl.SetLogger(zap.New(zap.WriteTo(logs), zap.UseDevMode(true)))
	// The label-filtered RBAC cache: the controllers must see through it
	// to objects fleetlet did not create (pkg/connect's tests run them
	// with the full cache).
	opts := testenv.ControllerOptions()
	opts.Scheme = scheme
	opts.Cache = cache.Options{ByObject: CacheByObject()}
	mgr, err := ctrl.NewManager(env.Config, opts)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if err := SetupWithManager(mgr, 2*time.Second); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	ctx, cancel := context.WithCancel(context.Background())
	wait := testenv.RunManagers(ctx, mgr)
	code := m.Run()
	cancel()
	if err := wait(); err != nil {
		fmt.Fprintln(os.Stderr, "manager:", err)
	}
	return code
}

// newNamespace creates a namespace for one test, with labels.
func newNamespace(t *testing.T, labels map[string]string) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "src-", Labels: labels}}
	require.NoError(t, k8sClient.Create(context.Background(), ns))
	return ns.Name
}

func newSource(namespace, name string) *v1alpha1.Source {
	return &v1alpha1.Source{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}}
}

func newClusterSource(name, saNamespace string) *v1alpha1.ClusterSource {
	return &v1alpha1.ClusterSource{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       v1alpha1.ClusterSourceSpec{ServiceAccountNamespace: saNamespace},
	}
}

// readyReason returns the Ready condition's status and reason, requiring
// it to have observed generation.
func readyReason(conds []metav1.Condition, generation int64) (metav1.ConditionStatus, string, error) {
	c := meta.FindStatusCondition(conds, v1alpha1.ConditionReady)
	if c == nil {
		return "", "", fmt.Errorf("no Ready condition")
	}
	if c.ObservedGeneration != generation {
		return "", "", fmt.Errorf("the Ready condition observed generation %d, want %d", c.ObservedGeneration, generation)
	}
	return c.Status, c.Reason, nil
}

// waitSourceReady waits for the Source's Ready condition to have status and
// reason for its current generation.
func waitSourceReady(t *testing.T, key client.ObjectKey, status metav1.ConditionStatus, reason string) *v1alpha1.Source {
	t.Helper()
	var src v1alpha1.Source
	testenv.Eventually(t, waitTimeout, fmt.Sprintf("Source %s Ready=%s %s", key, status, reason), func() error {
		if err := k8sClient.Get(context.Background(), key, &src); err != nil {
			return err
		}
		s, r, err := readyReason(src.Status.Conditions, src.Generation)
		if err != nil {
			return err
		}
		if s != status || r != reason || src.Status.ObservedGeneration != src.Generation {
			return fmt.Errorf("got Ready=%s %s (%v)", s, r, src.Status.Conditions)
		}
		return nil
	})
	return &src
}

func waitClusterSourceReady(t *testing.T, name string, status metav1.ConditionStatus, reason string, namespaces int32) *v1alpha1.ClusterSource {
	t.Helper()
	var cs v1alpha1.ClusterSource
	testenv.Eventually(t, waitTimeout, fmt.Sprintf("ClusterSource %s Ready=%s %s with %d namespaces", name, status, reason, namespaces), func() error {
		if err := k8sClient.Get(context.Background(), client.ObjectKey{Name: name}, &cs); err != nil {
			return err
		}
		s, r, err := readyReason(cs.Status.Conditions, cs.Generation)
		if err != nil {
			return err
		}
		if s != status || r != reason || cs.Status.NamespaceCount != namespaces {
			return fmt.Errorf("got Ready=%s %s namespaceCount=%d (%v)", s, r, cs.Status.NamespaceCount, cs.Status.Conditions)
		}
		return nil
	})
	return &cs
}

// tokenConfig returns a client configuration authenticated as the
// ServiceAccount, with a real token issued by the API server (TokenRequest:
// envtest runs no token controller).
func tokenConfig(t *testing.T, namespace, name string) *rest.Config {
	t.Helper()
	cs := kubernetes.NewForConfigOrDie(env.Config)
	tr, err := cs.CoreV1().ServiceAccounts(namespace).CreateToken(context.Background(), name,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To(int64(3600))}}, metav1.CreateOptions{})
	require.NoError(t, err)
	return &rest.Config{
		Host:            env.Config.Host,
		BearerToken:     tr.Status.Token,
		QPS:             200,
		Burst:           400,
		TLSClientConfig: rest.TLSClientConfig{CAData: env.Config.CAData},
	}
}

// access is one question to the authorizer.
type access struct {
	verb, group, resource, subresource, namespace, name string
	allowed                                             bool
}

// checkAccess asks, as the identity of cfg, whether each access is allowed.
func checkAccess(t *testing.T, cfg *rest.Config, checks []access) {
	t.Helper()
	cs := kubernetes.NewForConfigOrDie(cfg)
	for _, c := range checks {
		review, err := cs.AuthorizationV1().SelfSubjectAccessReviews().Create(context.Background(), &authorizationv1.SelfSubjectAccessReview{
			Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{
				Verb: c.verb, Group: c.group, Resource: c.resource, Subresource: c.subresource, Namespace: c.namespace, Name: c.name,
			}},
		}, metav1.CreateOptions{})
		require.NoError(t, err)
		assert.Equalf(t, c.allowed, review.Status.Allowed, "can %s %s.%s/%s %s in %q (%s)", c.verb, c.resource, c.group, c.subresource, c.name, c.namespace,
			review.Status.Reason)
	}
}
