package services_test

import (
	"context"
	"os"
	"testing"

	"github.com/go-logr/logr/testr"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
	"github.com/fleetlet/fleetlet/pkg/source/follow"
	"github.com/fleetlet/fleetlet/pkg/testenv"
)

// Two real control planes: the source, where the Services and proxies live,
// and a target, where the copies go.
var sourceEnv, targetEnv *testenv.Env

const sourceName = "src"

func TestMain(m *testing.M) {
	os.Exit(testenv.StartMainWithCRDs(m, &sourceEnv, &targetEnv))
}

type fixture struct {
	source, target client.Client
	ns             string
}

// setup makes a namespace, enabled in the source and present in the
// target.
func setup(t *testing.T) *fixture {
	t.Helper()
	testenv.Need(t, sourceEnv)
	newClient := func(cfg *rest.Config) client.Client {
		c, err := client.New(cfg, client.Options{Scheme: testenv.Scheme()})
		require.NoError(t, err)
		return c
	}
	f := &fixture{source: newClient(sourceEnv.Config), target: newClient(targetEnv.Config)}
	ctx := context.Background()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "services-", Labels: map[string]string{v1alpha1.LabelEnabled: v1alpha1.LabelEnabledValue}}}
	require.NoError(t, f.source.Create(ctx, ns))
	f.ns = ns.Name
	require.NoError(t, f.target.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: f.ns}}))
	return f
}

// follower is a Follower of this source reading the source uncached, with
// the source's discovery for kinds.
func (f *fixture) follower(t *testing.T) *follow.Follower {
	t.Helper()
	hc, err := rest.HTTPClientFor(sourceEnv.Config)
	require.NoError(t, err)
	mapper, err := apiutil.NewDynamicRESTMapper(sourceEnv.Config, hc)
	require.NoError(t, err)
	fl, err := follow.New(follow.Options{
		SourceName: sourceName, AllowedKinds: []string{"ConfigMap", "Secret", "ServiceAccount"},
		Source: f.source, SourceAPI: f.source, Mapper: mapper,
		Logger: testr.New(t),
	})
	require.NoError(t, err)
	return fl
}

// proxy creates a proxy pod in the source, with the delegate finalizer;
// the test's end removes the finalizer and deletes it.
func (f *fixture) proxy(t *testing.T, name string) *corev1.Pod {
	t.Helper()
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: name, Finalizers: []string{v1alpha1.FinalizerDelegate}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}},
	}
	require.NoError(t, f.source.Create(context.Background(), p))
	t.Cleanup(func() {
		ctx := context.Background()
		var cur corev1.Pod
		if err := f.source.Get(ctx, client.ObjectKeyFromObject(p), &cur); apierrors.IsNotFound(err) {
			return
		}
		cur.Finalizers = nil
		require.NoError(t, client.IgnoreNotFound(f.source.Update(ctx, &cur)))
		require.NoError(t, client.IgnoreNotFound(f.source.Delete(ctx, &cur)))
	})
	return p
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

func webService(typ corev1.ServiceType) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Labels: map[string]string{"app": "web"}},
		Spec: corev1.ServiceSpec{
			Type:     typ,
			Selector: map[string]string{"app": "web"},
			Ports:    []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080)}},
		},
	}
}
