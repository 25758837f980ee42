package chaperon

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
	"github.com/fleetlet/fleetlet/pkg/target/access"
	"github.com/fleetlet/fleetlet/pkg/testenv"
)

var (
	// env is the target cluster's kube-apiserver (nil in -short mode).
	env *testenv.Env
	// k8sClient is an administrator's client, as the manager's is.
	k8sClient client.Client
	scheme    = runtime.NewScheme()
)

const (
	// waitTimeout bounds every wait on the controllers.
	waitTimeout = 30 * time.Second

	// testRecreateDelay is the chaperon controller's RecreateDelay here:
	// whole seconds, as lastTransitionTime keeps them.
	testRecreateDelay = 3 * time.Second

	// labelProvisioned marks the Sources the real Source controller
	// provisions in these tests; a test provisions any other Source by
	// hand, to give its ServiceAccount exactly the rights it wants.
	labelProvisioned = "fleetlet-test/provisioned"

	// clusterRoleSourcePods is what the tests bind to a source's
	// ServiceAccount where it may create pods: the one right the chaperon
	// controller's impersonation needs beyond the fleetlet-source role
	// (see the package documentation).
	clusterRoleSourcePods = "fleetlet-test-source-pods"

	// policyCreator refuses, in namespaces labelled labelCreatorCheck=<a
	// source>, the creation of a pod by anyone but that source's default
	// ServiceAccount, and names the creator in its message.
	policyCreator     = "fleetlet-test-creator"
	labelCreatorCheck = "fleetlet-test/creator"
)

func TestMain(m *testing.M) { os.Exit(runMain(m)) }

// runMain starts one control plane (the target cluster) and, against it,
// the real Source and ClusterSource controllers and the chaperon
// controller, each in a manager of its own.
func runMain(m *testing.M) int {
	flag.Parse()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, v1alpha1.AddToScheme} {
		if err := add(scheme); err != nil {
			panic(err)
		}
	}
	if testing.Short() {
		return m.Run() // unit tests only
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

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := setupCluster(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	done, err := startManagers(ctx)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	code := m.Run()
	cancel()
	if err := done(); err != nil {
		fmt.Fprintln(os.Stderr, "managers:", err)
	}
	return code
}

// setupCluster writes what every test shares: the source ClusterRoles, the
// pod-creating ClusterRole and the creator policy.
func setupCluster(ctx context.Context) error {
	if err := access.EnsureClusterRoles(ctx, k8sClient); err != nil {
		return err
	}
	podsRole := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: clusterRoleSourcePods},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"create"}}},
	}
	if err := k8sClient.Create(ctx, podsRole); err != nil {
		return err
	}
	policy := &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: policyCreator},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: ptrTo(admissionregistrationv1.Fail),
			MatchConstraints: &admissionregistrationv1.MatchResources{
				ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
					RuleWithOperations: admissionregistrationv1.RuleWithOperations{
						Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
						Rule: admissionregistrationv1.Rule{
							APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"},
						},
					},
				}},
			},
			Validations: []admissionregistrationv1.Validation{{
				Expression: fmt.Sprintf(`request.userInfo.username == "system:serviceaccount:" + namespaceObject.metadata.name + ":%s" + namespaceObject.metadata.labels[%q]`,
					v1alpha1.SourceServiceAccountPrefix, labelCreatorCheck),
				MessageExpression: fmt.Sprintf(`"pods here are created by source " + namespaceObject.metadata.labels[%q] + " only, not by " + request.userInfo.username`,
					labelCreatorCheck),
			}},
		},
	}
	if err := k8sClient.Create(ctx, policy); err != nil {
		return err
	}
	binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: policyCreator},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName:        policyCreator,
			ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny},
			MatchResources: &admissionregistrationv1.MatchResources{
				NamespaceSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{
					Key: labelCreatorCheck, Operator: metav1.LabelSelectorOpExists,
				}}},
			},
		},
	}
	return k8sClient.Create(ctx, binding)
}

// startManagers starts the managers and returns a function that waits for
// them to stop.
func startManagers(ctx context.Context) (func() error, error) {
	// The Source controllers see only the Sources labelled
	// labelProvisioned, so that a test can provision one by hand.
	sourceOpts := testenv.ControllerOptions()
	sourceOpts.Scheme = scheme
	sourceOpts.Cache = cache.Options{ByObject: map[client.Object]cache.ByObject{
		&v1alpha1.Source{}: {Label: labels.SelectorFromSet(labels.Set{labelProvisioned: "true"})},
	}}
	sourceMgr, err := ctrl.NewManager(env.Config, sourceOpts)
	if err != nil {
		return nil, err
	}
	if err := access.SetupWithManager(sourceMgr, 2*time.Second); err != nil {
		return nil, err
	}
	chaperonOpts := testenv.ControllerOptions()
	chaperonOpts.Scheme = scheme
	// As the fleetlet manager's: only heartbeat Leases are cached.
	chaperonOpts.Cache = cache.Options{ByObject: map[client.Object]cache.ByObject{
		&coordinationv1.Lease{}: HeartbeatLeaseCache(),
	}}
	chaperonMgr, err := ctrl.NewManager(env.Config, chaperonOpts)
	if err != nil {
		return nil, err
	}
	r := &PodChaperonReconciler{
		RetryInterval:          2 * time.Second,
		RejectedBackoffInitial: 200 * time.Millisecond,
		RejectedBackoffMax:     2 * time.Second,
		RecreateDelay:          testRecreateDelay,
	}
	if err := r.SetupWithManager(chaperonMgr); err != nil {
		return nil, err
	}
	return testenv.RunManagers(ctx, sourceMgr, chaperonMgr), nil
}

func ptrTo[T any](v T) *T { return &v }
