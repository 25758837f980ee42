package webhook

import (
	"crypto/tls"
	"crypto/x509"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
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
	if mwc.Name != ConfigurationName || len(mwc.Webhooks) != 2 {
		t.Fatalf("name %q, %d webhooks", mwc.Name, len(mwc.Webhooks))
	}
	wh := mwc.Webhooks[0]
	if diff := cmp.Diff([]admissionregistrationv1.RuleWithOperations{{
		Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
		Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}, Scope: wh.Rules[0].Scope},
	}}, wh.Rules); diff != "" {
		t.Errorf("rules (-want,+got):\n%s", diff)
	}
	// Evictions: their own webhook, failing open (fleetlet down never
	// blocks a drain), on the same namespaces and handler.
	ev := mwc.Webhooks[1]
	if ev.Name != EvictionWebhookName || *ev.FailurePolicy != admissionregistrationv1.Ignore || len(ev.Rules) != 1 ||
		!cmp.Equal(ev.Rules[0].Resources, []string{"pods/eviction"}) || *ev.ClientConfig.URL != url || !cmp.Equal(ev.NamespaceSelector, wh.NamespaceSelector) {
		t.Errorf("eviction webhook: %s, failurePolicy %s, rules %+v, url %s", ev.Name, *ev.FailurePolicy, ev.Rules, *ev.ClientConfig.URL)
	}
	if *wh.FailurePolicy != admissionregistrationv1.Fail || *wh.ReinvocationPolicy != admissionregistrationv1.IfNeededReinvocationPolicy ||
		*wh.SideEffects != admissionregistrationv1.SideEffectClassNone || *wh.TimeoutSeconds != DefaultTimeoutSeconds {
		t.Errorf("failurePolicy %s, reinvocation %s, sideEffects %s, timeout %d", *wh.FailurePolicy, *wh.ReinvocationPolicy, *wh.SideEffects, *wh.TimeoutSeconds)
	}
	if *wh.ClientConfig.URL != url || string(wh.ClientConfig.CABundle) != "ca" {
		t.Errorf("client config %+v", wh.ClientConfig)
	}

	sel, err := metav1.LabelSelectorAsSelector(wh.NamespaceSelector)
	if err != nil {
		t.Fatal(err)
	}
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
		if got := sel.Matches(tc.ns); got != tc.want {
			t.Errorf("namespace %v selected = %v, want %v", tc.ns, got, tc.want)
		}
	}
	for _, mc := range wh.MatchConditions {
		if !strings.HasPrefix(mc.Expression, "!has(object.metadata.") {
			t.Errorf("match condition %s does not tolerate missing metadata: %s", mc.Name, mc.Expression)
		}
	}
}

func TestServerOptionsValidate(t *testing.T) {
	ok := DefaultServerOptions()
	ok.Namespace = "fleetlet-system"
	ok.SealKeys = StaticKeys(testKeys)
	if err := ok.Validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
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
			if err := o.Validate(); err == nil {
				t.Error("accepted")
			}
		})
	}
}

func TestLocalCA(t *testing.T) {
	now := time.Now()
	ca, err := newLocalCA(now, caValidity)
	if err != nil {
		t.Fatal(err)
	}
	certPEM, keyPEM, err := ca.issue([]string{"127.0.0.1"}, now, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	var h certHolder
	if _, err := h.GetCertificate(nil); err == nil {
		t.Error("a certificate before any was set")
	}
	if err := h.set(certPEM, keyPEM); err != nil {
		t.Fatal(err)
	}
	c, err := h.GetCertificate(nil)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca.certPEM)
	if _, err := c.Leaf.Verify(x509.VerifyOptions{DNSName: "127.0.0.1", Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
		t.Errorf("the serving certificate does not verify for 127.0.0.1: %v", err)
	}
	if got := h.notAfter(); got.Before(now.Add(59*time.Minute)) || got.After(now.Add(61*time.Minute)) {
		t.Errorf("notAfter %s, want in an hour", got)
	}
	if _, err := tls.X509KeyPair(certPEM, keyPEM); err != nil {
		t.Error(err)
	}
	if err := h.set(certPEM, []byte("junk")); err == nil {
		t.Error("a broken pair was loaded")
	}
}
