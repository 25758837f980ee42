package testenv

import (
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// Kubeconfig is a kubeconfig with cfg's inline credentials (client
// certificate or token, CA data), as fleetlet accepts them in a Target's
// Secret, whose context's namespace is namespace; server, when set,
// replaces cfg's host (an unreachable one, say).
func Kubeconfig(t TB, cfg *rest.Config, namespace, server string) []byte {
	t.Helper()
	if server == "" {
		server = cfg.Host
	}
	kc := clientcmdapi.NewConfig()
	kc.Clusters["t"] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["t"] = &clientcmdapi.AuthInfo{ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData, Token: cfg.BearerToken}
	kc.Contexts["t"] = &clientcmdapi.Context{Cluster: "t", AuthInfo: "t", Namespace: namespace}
	kc.CurrentContext = "t"
	data, err := clientcmd.Write(*kc)
	if err != nil {
		t.Fatalf("writing a kubeconfig: %v", err)
	}
	return data
}

// TB is what Kubeconfig needs of a test.
type TB interface {
	Helper()
	Fatalf(format string, args ...any)
}
