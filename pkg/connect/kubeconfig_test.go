package connect

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/fleetlet/fleetlet/pkg/source/fleet"
)

const testCA = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----"

// What connect writes is what a Target accepts: parsed by the very
// function the source's target registry uses.
func TestKubeconfigPassesTheTargetSanitiser(t *testing.T) {
	in := KubeconfigInput{Name: "cluster-2", Server: "https://10.0.0.2:6443", CAData: []byte(testCA + "\n"), Token: "tok", Namespace: "fleetlet-system"}
	data, err := Kubeconfig(in)
	require.NoError(t, err)
	cfg, err := fleet.RESTConfigFromKubeconfig(data, "")
	require.NoErrorf(t, err, "the produced kubeconfig is refused\n%s", data)
	want := &rest.Config{Host: in.Server, BearerToken: "tok", TLSClientConfig: rest.TLSClientConfig{CAData: in.CAData, CertData: []byte{}, KeyData: []byte{}}}
	assert.Empty(t, cmp.Diff(want, cfg, cmp.Comparer(func(a, b []byte) bool { return string(a) == string(b) })), "rest config (-want,+got)")
	// The context namespace tells the source where its heartbeat Lease
	// goes; the named context works as well as the current one.
	_, err = fleet.RESTConfigFromKubeconfig(data, "cluster-2")
	assert.NoError(t, err, "context cluster-2")
	loaded, err := clientcmd.Load(data)
	require.NoError(t, err)
	ns := loaded.Contexts[loaded.CurrentContext].Namespace
	assert.Equalf(t, "fleetlet-system", ns, "context namespace = %q, want fleetlet-system", ns)
	// Nothing but the server, the CA and the token.
	for _, refused := range []string{"exec", "auth-provider", "tokenFile", "client-certificate:", "certificate-authority:", "proxy-url", "insecure-skip-tls-verify"} {
		assert.NotContainsf(t, string(data), refused, "kubeconfig contains %q:\n%s", refused, data)
	}
}

func TestKubeconfigRefuses(t *testing.T) {
	ok := KubeconfigInput{Name: "t", Server: "https://h:1", CAData: []byte(testCA), Token: "x"}
	tests := []struct {
		name   string
		mutate func(*KubeconfigInput)
		want   string
	}{
		{name: "plain http", mutate: func(in *KubeconfigInput) { in.Server = "http://h:1" }, want: "not an https URL"},
		{name: "no server", mutate: func(in *KubeconfigInput) { in.Server = "" }, want: "not an https URL"},
		{name: "no token", mutate: func(in *KubeconfigInput) { in.Token = "" }, want: "no token"},
		{name: "no CA", mutate: func(in *KubeconfigInput) { in.CAData = nil }, want: "no CA"},
		{name: "no name", mutate: func(in *KubeconfigInput) { in.Name = "" }, want: "no name"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := ok
			tt.mutate(&in)
			_, err := Kubeconfig(in)
			assert.ErrorContainsf(t, err, tt.want, "error = %v, want one mentioning %q", err, tt.want)
		})
	}
}

func TestServerURL(t *testing.T) {
	tests := []struct {
		host, want, wantErr string
	}{
		{host: "https://10.0.0.1:6443", want: "https://10.0.0.1:6443"},
		{host: "127.0.0.1:6443", want: "https://127.0.0.1:6443"},
		{host: "https://rancher.example/k8s/clusters/c-1", want: "https://rancher.example/k8s/clusters/c-1"},
		{host: "http://127.0.0.1:8080", wantErr: "not an https URL"},
		{host: "", wantErr: "names no server"},
	}
	for _, tt := range tests {
		t.Run(tt.host, func(t *testing.T) {
			got, err := ServerURL(&rest.Config{Host: tt.host})
			if tt.wantErr != "" {
				assert.ErrorContainsf(t, err, tt.wantErr, "error = %v, want %q", err, tt.wantErr)
				return
			}
			assert.Falsef(t, err != nil || got != tt.want, "ServerURL(%q) = %q, %v; want %q", tt.host, got, err, tt.want)
		})
	}
}

func TestCABundle(t *testing.T) {
	other := strings.ReplaceAll(testCA, "MIIB", "MIIC")
	tests := []struct {
		name      string
		secretCA  string
		contextCA string
		want      string
		wantErr   bool
	}{
		{name: "secret only", secretCA: testCA + "\n", want: testCA + "\n"},
		{name: "same CA once", secretCA: testCA + "\n", contextCA: testCA, want: testCA + "\n"},
		{name: "different CAs both", secretCA: testCA, contextCA: other + "\n", want: testCA + "\n" + other + "\n"},
		{name: "context only", contextCA: other, want: other + "\n"},
		{name: "none", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := caBundle([]byte(tt.secretCA), &rest.Config{TLSClientConfig: rest.TLSClientConfig{CAData: []byte(tt.contextCA)}})
			require.Equalf(t, tt.wantErr, err != nil, "error = %v, want error %v", err, tt.wantErr)
			assert.Empty(t, cmp.Diff(tt.want, string(got)), "bundle (-want,+got)")
		})
	}
}

func TestOptionsValidate(t *testing.T) {
	cfg := &rest.Config{Host: "https://h"}
	ok := Options{Source: cfg, Target: cfg, SourceName: "cluster-1", TargetName: "cluster-2"}
	tests := []struct {
		name   string
		mutate func(*Options)
		want   string
	}{
		{name: "valid"},
		{name: "self needs no target", mutate: func(o *Options) { o.Self, o.Target, o.SourceName = true, nil, "" }},
		{name: "no source config", mutate: func(o *Options) { o.Source = nil }, want: "source cluster"},
		{name: "no target config", mutate: func(o *Options) { o.Target = nil }, want: "target cluster"},
		{name: "source name not a label value", mutate: func(o *Options) { o.SourceName = "admin@cluster" }, want: "source name"},
		{name: "source name too long", mutate: func(o *Options) { o.SourceName = strings.Repeat("a", 64) }, want: "source name"},
		{name: "bad target name", mutate: func(o *Options) { o.TargetName = "Cluster_2" }, want: "target name"},
		{name: "bad namespace", mutate: func(o *Options) { o.Namespace = "a/b" }, want: "namespace"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := ok
			if tt.mutate != nil {
				tt.mutate(&o)
			}
			o.defaults()
			err := o.validate()
			if tt.want == "" {
				assert.NoError(t, err, "unexpected error")
				return
			}
			assert.ErrorContainsf(t, err, tt.want, "error = %v, want one mentioning %q", err, tt.want)
		})
	}
}
