package webhook

import (
	"crypto/tls"
	"crypto/x509"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
)

func TestMutatingWebhookConfiguration(t *testing.T) {
	url := "https://127.0.0.1:9443/mutate-pods"
	mwc := MutatingWebhookConfiguration(ConfigurationOptions{
		FleetletNamespace: "fleetlet-system",
		ClientConfig:      admissionregistrationv1.WebhookClientConfig{URL: &url, CABundle: []byte("ca")},
	})
	require.Falsef(t, mwc.Name != ConfigurationName || len(mwc.Webhooks) != 2, "name %q, %d webhooks", mwc.Name, len(mwc.Webhooks))
	wh := mwc.Webhooks[0]
	assert.Empty(t, cmp.Diff([]admissionregistrationv1.RuleWithOperations{{
		Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
		Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}, Scope: wh.Rules[0].Scope},
	}}, wh.Rules), "rules (-want,+got)")
	// Evictions: their own webhook, failing open (fleetlet down never
	// blocks a drain), on the same namespaces and handler.
	ev := mwc.Webhooks[1]
	assert.Falsef(t, ev.Name != EvictionWebhookName || *ev.FailurePolicy != admissionregistrationv1.Ignore || len(ev.Rules) != 1 ||
		!cmp.Equal(ev.Rules[0].Resources, []string{"pods/eviction"}) || *ev.ClientConfig.URL != url || !cmp.Equal(ev.NamespaceSelector, wh.NamespaceSelector),
		"eviction webhook: %s, failurePolicy %s, rules %+v, url %s", ev.Name, *ev.FailurePolicy, ev.Rules, *ev.ClientConfig.URL)
	assert.Falsef(t, *wh.FailurePolicy != admissionregistrationv1.Fail || *wh.ReinvocationPolicy != admissionregistrationv1.IfNeededReinvocationPolicy ||
		*wh.SideEffects != admissionregistrationv1.SideEffectClassNone || *wh.TimeoutSeconds != DefaultTimeoutSeconds,
		"failurePolicy %s, reinvocation %s, sideEffects %s, timeout %d", *wh.FailurePolicy, *wh.ReinvocationPolicy, *wh.SideEffects, *wh.TimeoutSeconds)
	assert.Falsef(t, *wh.ClientConfig.URL != url || string(wh.ClientConfig.CABundle) != "ca", "client config %+v", wh.ClientConfig)

	sel, err := metav1.LabelSelectorAsSelector(wh.NamespaceSelector)
	require.NoError(t, err)
	ns := func(name string, enabled bool) labels.Set {
		l := labels.Set{corev1.LabelMetadataName: name}
		if enabled {
			l[v1alpha1.LabelEnabled] = v1alpha1.LabelEnabledValue
		}
		return l
	}
	for _, tc := range []struct {
		ns   labels.Set
		want bool
	}{
		{ns("team-a", true), true},
		{ns("team-a", false), false},
		{labels.Set{corev1.LabelMetadataName: "team-a", v1alpha1.LabelEnabled: "yes"}, false},
		{ns("kube-system", true), false},
		{ns("fleetlet-system", true), false},
	} {
		assert.Equal(t, tc.want, sel.Matches(tc.ns), "namespace %v selected", tc.ns)
	}
	for _, mc := range wh.MatchConditions {
		assert.Falsef(t, !strings.HasPrefix(mc.Expression, "!has(object.metadata."), "match condition %s does not tolerate missing metadata: %s", mc.Name, mc.Expression)
	}
}

func TestServerOptionsValidate(t *testing.T) {
	ok := DefaultServerOptions()
	ok.Namespace = "fleetlet-system"
	ok.SealKeys = StaticKeys(testKeys)
	require.NoError(t, ok.Validate(), "defaults")
	cases := map[string]func(o *ServerOptions){
		"no namespace":              func(o *ServerOptions) { o.Namespace = "" },
		"no seal keys":              func(o *ServerOptions) { o.SealKeys = nil },
		"bad port":                  func(o *ServerOptions) { o.Port = 70000 },
		"http URL":                  func(o *ServerOptions) { o.URL = "http://127.0.0.1:9443/mutate-pods" },
		"renew before > validity":   func(o *ServerOptions) { o.CertRenewBefore = 2 * o.CertValidity },
		"no rotation, no cert dir":  func(o *ServerOptions) { o.CertRotation = false },
		"rotation without a secret": func(o *ServerOptions) { o.CertSecretName = "" },
		"timeout too long":          func(o *ServerOptions) { o.TimeoutSeconds = 31 },
	}
	for name, change := range cases {
		t.Run(name, func(t *testing.T) {
			o := ok
			change(&o)
			err := o.Validate()
			assert.Error(t, err, "accepted")
		})
	}
}

func TestLocalCA(t *testing.T) {
	now := time.Now()
	ca, err := newLocalCA(now, caValidity)
	require.NoError(t, err)
	certPEM, keyPEM, err := ca.issue([]string{"127.0.0.1"}, now, time.Hour)
	require.NoError(t, err)
	var h certHolder
	_, err = h.GetCertificate(nil)
	assert.Error(t, err, "a certificate before any was set")
	require.NoError(t, h.set(certPEM, keyPEM))
	c, err := h.GetCertificate(nil)
	require.NoError(t, err)
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca.certPEM)
	_, err = c.Leaf.Verify(x509.VerifyOptions{DNSName: "127.0.0.1", Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
	assert.NoError(t, err, "the serving certificate does not verify for 127.0.0.1")
	notAfter := h.notAfter()
	assert.Falsef(t, notAfter.Before(now.Add(59*time.Minute)) || notAfter.After(now.Add(61*time.Minute)), "notAfter %s, want in an hour", notAfter)
	_, err = tls.X509KeyPair(certPEM, keyPEM)
	assert.NoError(t, err)
	err = h.set(certPEM, []byte("junk"))
	assert.Error(t, err, "a broken pair was loaded")
}
