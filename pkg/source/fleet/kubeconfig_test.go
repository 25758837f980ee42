package fleet

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// safeKubeconfig is an acceptable kubeconfig with two contexts; each case
// changes it.
func safeKubeconfig() *clientcmdapi.Config {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["c"] = &clientcmdapi.Cluster{Server: "https://127.0.0.1:6443", CertificateAuthorityData: []byte("CA")}
	cfg.AuthInfos["u"] = &clientcmdapi.AuthInfo{Token: "secret-token"}
	cfg.Contexts["ctx"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: "u"}
	cfg.Clusters["other"] = &clientcmdapi.Cluster{Server: "https://10.0.0.1", CertificateAuthorityData: []byte("CA2")}
	cfg.AuthInfos["other"] = &clientcmdapi.AuthInfo{ClientCertificateData: []byte("CERT"), ClientKeyData: []byte("KEY")}
	cfg.Contexts["second"] = &clientcmdapi.Context{Cluster: "other", AuthInfo: "other"}
	cfg.CurrentContext = "ctx"
	return cfg
}

func TestRESTConfigFromKubeconfig(t *testing.T) {
	tests := []struct {
		name    string
		mutate  func(*clientcmdapi.Config)
		context string
		// wantErr is a substring of the error; empty means success.
		wantErr    string
		wantUnsafe bool
		wantHost   string
	}{
		{name: "token, current context", wantHost: "https://127.0.0.1:6443"},
		{name: "client certificate, named context", context: "second", wantHost: "https://10.0.0.1"},
		{name: "unknown context", context: "nope", wantErr: `no context "nope"`},
		{name: "no current context", mutate: func(c *clientcmdapi.Config) { c.CurrentContext = "" }, wantErr: "no current context"},
		{name: "exec plugin", mutate: func(c *clientcmdapi.Config) {
			c.AuthInfos["u"].Exec = &clientcmdapi.ExecConfig{Command: "/bin/steal", APIVersion: "client.authentication.k8s.io/v1"}
		}, wantErr: "exec", wantUnsafe: true},
		{name: "auth provider", mutate: func(c *clientcmdapi.Config) {
			c.AuthInfos["u"].AuthProvider = &clientcmdapi.AuthProviderConfig{Name: "gcp"}
		}, wantErr: "auth-provider", wantUnsafe: true},
		{name: "token file", mutate: func(c *clientcmdapi.Config) {
			c.AuthInfos["u"].TokenFile = "/var/run/secrets/kubernetes.io/serviceaccount/token"
		}, wantErr: "tokenFile", wantUnsafe: true},
		{name: "client certificate path", mutate: func(c *clientcmdapi.Config) { c.AuthInfos["u"].ClientCertificate = "/etc/cert" }, wantErr: "client-certificate", wantUnsafe: true},
		{name: "client key path", mutate: func(c *clientcmdapi.Config) { c.AuthInfos["u"].ClientKey = "/etc/key" }, wantErr: "client-key", wantUnsafe: true},
		{name: "impersonation", mutate: func(c *clientcmdapi.Config) { c.AuthInfos["u"].Impersonate = "system:admin" }, wantErr: "impersonation", wantUnsafe: true},
		{name: "basic auth", mutate: func(c *clientcmdapi.Config) { c.AuthInfos["u"].Username = "admin" }, wantErr: "username/password", wantUnsafe: true},
		{name: "CA file path", mutate: func(c *clientcmdapi.Config) { c.Clusters["c"].CertificateAuthority = "/etc/ca" }, wantErr: "certificate-authority", wantUnsafe: true},
		{name: "proxy", mutate: func(c *clientcmdapi.Config) { c.Clusters["c"].ProxyURL = "http://evil:3128" }, wantErr: "proxy-url", wantUnsafe: true},
		{name: "insecure TLS", mutate: func(c *clientcmdapi.Config) { c.Clusters["c"].InsecureSkipTLSVerify = true }, wantErr: "insecure-skip-tls-verify", wantUnsafe: true},
		{name: "plain http", mutate: func(c *clientcmdapi.Config) { c.Clusters["c"].Server = "http://127.0.0.1:8080" }, wantErr: "not an https URL", wantUnsafe: true},
		{name: "no CA data", mutate: func(c *clientcmdapi.Config) { c.Clusters["c"].CertificateAuthorityData = nil }, wantErr: "no certificate-authority-data"},
		{name: "no credentials", mutate: func(c *clientcmdapi.Config) { c.AuthInfos["u"].Token = "" }, wantErr: "no inline credentials"},
		{name: "certificate without key", mutate: func(c *clientcmdapi.Config) {
			c.AuthInfos["u"] = &clientcmdapi.AuthInfo{ClientCertificateData: []byte("CERT")}
		}, wantErr: "both client-certificate-data and client-key-data"},
		{name: "missing cluster", mutate: func(c *clientcmdapi.Config) { delete(c.Clusters, "c") }, wantErr: `cluster "c", which is not defined`},
		{name: "several refusals at once", mutate: func(c *clientcmdapi.Config) {
			c.AuthInfos["u"].Exec = &clientcmdapi.ExecConfig{Command: "x", APIVersion: "client.authentication.k8s.io/v1"}
			c.AuthInfos["u"].TokenFile = "/t"
		}, wantErr: "exec, tokenFile", wantUnsafe: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := safeKubeconfig()
			if tc.mutate != nil {
				tc.mutate(cfg)
			}
			data, err := clientcmd.Write(*cfg)
			require.NoError(t, err)
			got, err := RESTConfigFromKubeconfig(data, tc.context)
			if tc.wantErr != "" {
				require.Errorf(t, err, "accepted, want an error with %q", tc.wantErr)
				assert.Truef(t, strings.Contains(err.Error(), tc.wantErr), "error = %q, want it to contain %q", err, tc.wantErr)
				assert.Falsef(t, errors.Is(err, ErrUnsafeKubeconfig) != tc.wantUnsafe, "errors.Is(err, ErrUnsafeKubeconfig) = %t, want %t", !tc.wantUnsafe, tc.wantUnsafe)
				return
			}
			require.NoError(t, err)
			assert.Falsef(t, got.Host != tc.wantHost, "host = %q, want %q", got.Host, tc.wantHost)
			assert.Falsef(t, got.ExecProvider != nil || got.AuthProvider != nil || got.BearerTokenFile != "" || got.CertFile != "" || got.KeyFile != "" || got.CAFile != "" || got.Proxy != nil || got.Insecure, "unsafe field set in %+v", got)
		})
	}
}

func TestRESTConfigFromKubeconfigCopiesCredentials(t *testing.T) {
	data, err := clientcmd.Write(*safeKubeconfig())
	require.NoError(t, err)
	got, err := RESTConfigFromKubeconfig(data, "second")
	require.NoError(t, err)
	want := [][]byte{[]byte("CA2"), []byte("CERT"), []byte("KEY")}
	assert.Empty(t, cmp.Diff(want, [][]byte{got.CAData, got.CertData, got.KeyData}), "credentials (-want,+got)")
	assert.Falsef(t, got.BearerToken != "", "bearer token %q leaked from another user", got.BearerToken)
	if _, err := RESTConfigFromKubeconfig(nil, ""); err == nil {
		assert.Fail(t, "empty kubeconfig accepted")
	}
	if _, err := RESTConfigFromKubeconfig([]byte("{not yaml"), ""); err == nil || !strings.Contains(err.Error(), "does not parse") {
		assert.Failf(t, "garbage kubeconfig", "garbage kubeconfig: %v", err)
	}
}
