package follow_test

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
	"github.com/fleetlet/fleetlet/pkg/source/follow"
	"github.com/fleetlet/fleetlet/pkg/testenv"
)

// Two real control planes: the source, where proxy pods and the objects
// they reference live, and a target, where the copies go. Neither runs
// kube-controller-manager: namespaces have no "default" ServiceAccount
// unless a test creates one.
var sourceEnv, targetEnv *testenv.Env

const sourceName = "src"

func TestMain(m *testing.M) {
	os.Exit(func() int {
		return testenv.StartMainWithCRDs(m, &sourceEnv, &targetEnv)
	}())
}

type fixture struct {
	source, target client.Client
	ns             string
}

func newClient(t *testing.T, cfg *rest.Config) client.Client {
	t.Helper()
	c, err := client.New(cfg, client.Options{Scheme: testenv.Scheme()})
	require.NoError(t, err)
	return c
}

// setup makes a namespace, enabled in the source and present in the
// target.
func setup(t *testing.T) *fixture {
	t.Helper()
	testenv.Need(t, sourceEnv)
	f := &fixture{source: newClient(t, sourceEnv.Config), target: newClient(t, targetEnv.Config)}
	ctx := context.Background()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "follow-", Labels: map[string]string{v1alpha1.LabelEnabled: v1alpha1.LabelEnabledValue}}}
	require.NoError(t, f.source.Create(ctx, ns))
	f.ns = ns.Name
	// The namespace stops mattering to later tests' collection passes.
	t.Cleanup(func() {
		patch := client.MergeFrom(ns.DeepCopy())
		delete(ns.Labels, v1alpha1.LabelEnabled)
		assert.NoError(t, f.source.Patch(context.Background(), ns, patch))
	})
	require.NoError(t, f.target.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: f.ns}}))
	return f
}

// follower is a Follower of this source reading the source uncached,
// with the source's discovery for kinds.
func (f *fixture) follower(t *testing.T, allowed ...string) *follow.Follower {
	t.Helper()
	if len(allowed) == 0 {
		allowed = []string{"ConfigMap", "Secret", "ServiceAccount"}
	}
	hc, err := rest.HTTPClientFor(sourceEnv.Config)
	require.NoError(t, err)
	mapper, err := apiutil.NewDynamicRESTMapper(sourceEnv.Config, hc)
	require.NoError(t, err)
	fl, err := follow.New(follow.Options{
		SourceName: sourceName, AllowedKinds: allowed,
		Source: f.source, SourceAPI: f.source, Mapper: mapper,
		Logger: testr.New(t),
	})
	require.NoError(t, err)
	return fl
}

// proxy creates a proxy pod in the source, with the delegate finalizer.
func (f *fixture) proxy(t *testing.T, name string, annotations map[string]string) *corev1.Pod {
	t.Helper()
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: name, Annotations: annotations, Finalizers: []string{v1alpha1.FinalizerDelegate}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}},
	}
	require.NoError(t, f.source.Create(context.Background(), p))
	t.Cleanup(func() { f.forget(t, p) })
	return p
}

// forget removes the finalizers and deletes the pod: a proxy gone.
func (f *fixture) forget(t *testing.T, p *corev1.Pod) {
	t.Helper()
	ctx := context.Background()
	var cur corev1.Pod
	err := f.source.Get(ctx, client.ObjectKeyFromObject(p), &cur)
	if apierrors.IsNotFound(err) {
		return
	}
	require.NoError(t, err)
	cur.Finalizers = nil
	require.NoError(t, client.IgnoreNotFound(f.source.Update(ctx, &cur)))
	require.NoError(t, client.IgnoreNotFound(f.source.Delete(ctx, &cur)))
	err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		err := f.source.Get(ctx, client.ObjectKeyFromObject(p), &corev1.Pod{})
		return apierrors.IsNotFound(err), nil
	})
	require.NoError(t, err, "pod %s not gone", p.Name)
}

func (f *fixture) create(t *testing.T, c client.Client, obj client.Object) {
	t.Helper()
	obj.SetNamespace(f.ns)
	require.NoError(t, c.Create(context.Background(), obj))
}

// get reads obj from c; false when it does not exist.
func (f *fixture) get(t *testing.T, c client.Client, name string, obj client.Object) bool {
	t.Helper()
	err := c.Get(context.Background(), client.ObjectKey{Namespace: f.ns, Name: name}, obj)
	if apierrors.IsNotFound(err) {
		return false
	}
	require.NoError(t, err)
	return true
}

func refusal(t *testing.T, err error, want follow.Reason) *follow.Refusal {
	t.Helper()
	var r *follow.Refusal
	require.Truef(t, errors.As(err, &r), "got %v, want a *Refusal %s", err, want)
	require.Equal(t, want, r.Reason, "refusal (%s)", r.Message)
	return r
}
