package fleet

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// FuzzRESTConfigFromKubeconfig: whatever a kubeconfig Secret holds, the
// sanitiser never panics, and what it accepts has a server and inline
// credentials only: no exec plugin, auth provider, file, proxy,
// impersonation, basic auth or insecure TLS gets through.
func FuzzRESTConfigFromKubeconfig(f *testing.F) {
	good := clientcmdapi.NewConfig()
	good.Clusters["c"] = &clientcmdapi.Cluster{Server: "https://127.0.0.1:6443", CertificateAuthorityData: []byte("ca")}
	good.AuthInfos["u"] = &clientcmdapi.AuthInfo{Token: "t"}
	good.Contexts["x"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: "u", Namespace: "team"}
	good.CurrentContext = "x"
	seed, err := clientcmd.Write(*good)
	require.NoError(f, err)
	f.Add(seed)
	f.Add([]byte("apiVersion: v1\nkind: Config\ncurrent-context: x\ncontexts: [{name: x, context: {cluster: c, user: u}}]\nclusters: [{name: c, cluster: {server: 'https://a', insecure-skip-tls-verify: true}}]\nusers: [{name: u, user: {exec: {command: /bin/sh, apiVersion: client.authentication.k8s.io/v1}}}]\n"))
	f.Add([]byte("{}"))
	f.Add([]byte(""))
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := RESTConfigFromKubeconfig(data, "")
		if err != nil {
			return
		}
		assert.NotEmpty(t, cfg.Host)
		assert.Nil(t, cfg.ExecProvider)
		assert.Nil(t, cfg.AuthProvider)
		assert.Nil(t, cfg.Proxy)
		assert.False(t, cfg.Insecure)
		assert.Empty(t, cfg.Username+cfg.Password, "basic auth")
		assert.Empty(t, cfg.Impersonate.UserName)
		assert.Empty(t, cfg.CAFile+cfg.CertFile+cfg.KeyFile+cfg.BearerTokenFile, "a file path")
	})
}
