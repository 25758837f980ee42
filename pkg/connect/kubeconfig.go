package connect

import (
	"bytes"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// KubeconfigInput is what a source's kubeconfig for a target holds.
type KubeconfigInput struct {
	// Name names the cluster, user and context in the file (the Target's
	// name).
	Name string
	// Server is the target API server's https URL.
	Server string
	// CAData is the PEM bundle the server certificate is checked against.
	CAData []byte
	// Token is the bearer token of the source's ServiceAccount.
	Token string
	// Namespace is the namespace of that ServiceAccount, the context's
	// namespace: the source renews its heartbeat Lease there.
	Namespace string
}

// Kubeconfig writes a kubeconfig with inline credentials and CA data only,
// the one form a Target accepts (see fleet.RESTConfigFromKubeconfig).
func Kubeconfig(in KubeconfigInput) ([]byte, error) {
	switch {
	case in.Name == "":
		return nil, errors.New("kubeconfig: no name")
	case in.Token == "":
		return nil, errors.New("kubeconfig: no token")
	case len(in.CAData) == 0:
		return nil, errors.New("kubeconfig: no CA data")
	}
	if err := checkServer(in.Server); err != nil {
		return nil, err
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters[in.Name] = &clientcmdapi.Cluster{Server: in.Server, CertificateAuthorityData: in.CAData}
	cfg.AuthInfos[in.Name] = &clientcmdapi.AuthInfo{Token: in.Token}
	cfg.Contexts[in.Name] = &clientcmdapi.Context{Cluster: in.Name, AuthInfo: in.Name, Namespace: in.Namespace}
	cfg.CurrentContext = in.Name
	return clientcmd.Write(*cfg)
}

// ServerURL is the https URL of the API server cfg talks to.
func ServerURL(cfg *rest.Config) (string, error) {
	host := cfg.Host
	if host == "" {
		return "", errors.New("the client configuration names no server")
	}
	if !strings.Contains(host, "://") {
		host = "https://" + host
	}
	return host, checkServer(host)
}

func checkServer(server string) error {
	u, err := url.Parse(server)
	if err != nil {
		return fmt.Errorf("server %q: %w", server, err)
	}
	if u.Scheme != "https" || u.Host == "" {
		return fmt.Errorf("server %q is not an https URL: a target is only reached over TLS", server)
	}
	return nil
}

// caBundle joins the CA of the token Secret (the cluster's root CA, as the
// token controller writes it) with the CA the client configuration already
// trusts for the same server, when they differ: the server URL comes from
// that configuration, whose CA may be another one (a load balancer's).
func caBundle(secretCA []byte, cfg *rest.Config) ([]byte, error) {
	contextCA := cfg.CAData
	if len(contextCA) == 0 && cfg.CAFile != "" {
		b, err := os.ReadFile(cfg.CAFile)
		if err != nil {
			return nil, fmt.Errorf("reading the target's CA file: %w", err)
		}
		contextCA = b
	}
	out := bytes.TrimSpace(secretCA)
	if extra := bytes.TrimSpace(contextCA); len(extra) > 0 && !bytes.Contains(out, extra) {
		if len(out) > 0 {
			out = append(append(append([]byte(nil), out...), '\n'), extra...)
		} else {
			out = extra
		}
	}
	if len(out) == 0 {
		return nil, errors.New("no CA certificate: the token Secret has no ca.crt and the target's kubeconfig context has no certificate-authority data")
	}
	return append(append([]byte(nil), out...), '\n'), nil
}
