package kubeletapi

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/virtual-kubelet/virtual-kubelet/errdefs"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
	"github.com/fleetlet/fleetlet/pkg/indexer"
	"github.com/fleetlet/fleetlet/pkg/proxy"
)

type fakeTargets map[string]*rest.Config

func (f fakeTargets) TargetConfig(ns, name string) (*rest.Config, bool) {
	c, ok := f[ns+"/"+name]
	return c, ok
}

func proxyPod(name, node string, rec *proxy.Record) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: name}, Spec: corev1.PodSpec{NodeName: node}}
	if rec != nil {
		p.Status.Conditions = []corev1.PodCondition{{Type: v1alpha1.ConditionElected, Status: corev1.ConditionTrue, Message: rec.Message()}}
	}
	return p
}

func sourceWith(objs ...client.Object) client.Reader {
	return fake.NewClientBuilder().WithObjects(objs...).
		WithIndex(&corev1.Pod{}, indexer.ActivePodNodeName.Field, indexer.ActivePodNodeName.Extract).Build()
}

func TestDelegateOf(t *testing.T) {
	rec := proxy.Record{TargetName: "cluster-2", Chaperon: "web-1-abc"}
	gone := proxy.Record{TargetName: "cluster-9", Chaperon: "web-4-abc"}
	h := &nodeHandlers{node: "fleetlet-cluster-2", targets: fakeTargets{"/cluster-2": {Host: "https://cluster-2"}}, source: sourceWith(
		proxyPod("web-1", "fleetlet-cluster-2", &rec),
		proxyPod("web-2", "fleetlet-cluster-3", &rec),
		proxyPod("web-3", "fleetlet-cluster-2", nil),
		proxyPod("web-4", "fleetlet-cluster-2", &gone),
	)}
	ctx := context.Background()
	d, err := h.delegateOf(ctx, "apps", "web-1")
	assert.Falsef(t, err != nil || d.name != "web-1-abc" || d.namespace != "apps" || d.config.Host != "https://cluster-2", "web-1: %+v, %v", d, err)
	for name, check := range map[string]func(error) bool{
		"missing": errdefs.IsNotFound,
		"web-2":   errdefs.IsNotFound, // bound to another node
		"web-3":   errdefs.IsNotFound, // no election record
		"web-4":   func(err error) bool { var u *unreachableError; return errors.As(err, &u) },
	} {
		_, err := h.delegateOf(ctx, "apps", name)
		assert.Falsef(t, err == nil || !check(err), "%s: %v", name, err)
	}
	pods, err := h.pods(ctx)
	assert.Falsef(t, err != nil || len(pods) != 3, "pods of the node: %d, %v; want web-1, web-3, web-4", len(pods), err)
}

// fakeAuthn authenticates a bearer token naming the user.
type fakeAuthn struct{}

func (fakeAuthn) AuthenticateRequest(r *http.Request) (*authenticator.Response, bool, error) {
	name, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok {
		return nil, false, nil
	}
	return &authenticator.Response{User: &user.DefaultInfo{Name: name}}, true, nil
}

// fakeAuthz allows user "proxy" nodes/proxy and user "stats" nodes/stats,
// on node fleetlet-a only.
type fakeAuthz struct{}

func (fakeAuthz) Authorize(_ context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
	if a.GetName() == "fleetlet-a" && a.GetUser().GetName() == a.GetSubresource() {
		return authorizer.DecisionAllow, "", nil
	}
	return authorizer.DecisionNoOpinion, "", nil
}

func TestFilter(t *testing.T) {
	a := &Auth{authn: fakeAuthn{}, authz: fakeAuthz{}}
	ok := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusTeapot) })
	cases := []struct {
		node, user, path string
		want             int
	}{
		{"fleetlet-a", "", "/pods", http.StatusUnauthorized},
		{"fleetlet-a", "proxy", "/pods", http.StatusTeapot},
		{"fleetlet-a", "proxy", "/containerLogs/ns/p/c", http.StatusTeapot},
		{"fleetlet-a", "stats", "/containerLogs/ns/p/c", http.StatusForbidden},
		{"fleetlet-a", "stats", "/stats/summary", http.StatusTeapot},
		{"fleetlet-a", "proxy", "/stats/summary", http.StatusForbidden},
		{"fleetlet-b", "proxy", "/pods", http.StatusForbidden},
	}
	for _, tc := range cases {
		r := httptest.NewRequest(http.MethodGet, tc.path, nil)
		if tc.user != "" {
			r.Header.Set("Authorization", "Bearer "+tc.user)
		}
		w := httptest.NewRecorder()
		a.filter(tc.node, ok).ServeHTTP(w, r)
		assert.Equal(t, tc.want, w.Code, "%s as %q at %s: %s", tc.path, tc.user, tc.node, w.Body)
	}
}
