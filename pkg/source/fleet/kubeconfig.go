package fleet

import (
	"errors"
	"fmt"
	"net/url"
	"strings"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// ErrUnsafeKubeconfig marks a kubeconfig that asks for something fleetlet
// never does with a Target's credentials: run a program, read a file, use a
// proxy, skip TLS verification.
var ErrUnsafeKubeconfig = errors.New("unsafe kubeconfig")

// RESTConfigFromKubeconfig turns the untrusted kubeconfig of a Target into a
// client configuration. Only a server URL with inline credentials (a bearer
// token, or a client certificate and key) and inline CA data is accepted:
// exec plugins, auth providers, file paths, proxies, impersonation, basic
// auth and insecure TLS are refused, and the configuration is built field by
// field so that nothing else in the file (or the environment) is read.
// contextName selects a context; empty means the current context.
func RESTConfigFromKubeconfig(data []byte, contextName string) (*rest.Config, error) {
	if len(data) == 0 {
		return nil, errors.New("kubeconfig is empty")
	}
	cfg, err := clientcmd.Load(data)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig does not parse: %w", err)
	}
	if contextName == "" {
		contextName = cfg.CurrentContext
	}
	if contextName == "" {
		return nil, errors.New("kubeconfig has no current context and the Target names none")
	}
	kctx, ok := cfg.Contexts[contextName]
	if !ok || kctx == nil {
		return nil, fmt.Errorf("kubeconfig has no context %q", contextName)
	}
	cluster, ok := cfg.Clusters[kctx.Cluster]
	if !ok || cluster == nil {
		return nil, fmt.Errorf("kubeconfig context %q names cluster %q, which is not defined", contextName, kctx.Cluster)
	}
	user, ok := cfg.AuthInfos[kctx.AuthInfo]
	if !ok || user == nil {
		return nil, fmt.Errorf("kubeconfig context %q names user %q, which is not defined", contextName, kctx.AuthInfo)
	}
	if err := checkCluster(kctx.Cluster, cluster); err != nil {
		return nil, err
	}
	if err := checkUser(kctx.AuthInfo, user); err != nil {
		return nil, err
	}
	return &rest.Config{
		Host:        cluster.Server,
		BearerToken: user.Token,
		TLSClientConfig: rest.TLSClientConfig{
			ServerName: cluster.TLSServerName,
			CAData:     append([]byte(nil), cluster.CertificateAuthorityData...),
			CertData:   append([]byte(nil), user.ClientCertificateData...),
			KeyData:    append([]byte(nil), user.ClientKeyData...),
		},
	}, nil
}

func checkCluster(name string, c *clientcmdapi.Cluster) error {
	var refused []string
	if c.CertificateAuthority != "" {
		refused = append(refused, "certificate-authority (a file path; use certificate-authority-data)")
	}
	if c.ProxyURL != "" {
		refused = append(refused, "proxy-url")
	}
	if c.InsecureSkipTLSVerify {
		refused = append(refused, "insecure-skip-tls-verify")
	}
	if len(refused) > 0 {
		return fmt.Errorf("%w: cluster %q sets %s", ErrUnsafeKubeconfig, name, strings.Join(refused, ", "))
	}
	if c.Server == "" {
		return fmt.Errorf("kubeconfig cluster %q has no server", name)
	}
	u, err := url.Parse(c.Server)
	if err != nil {
		return fmt.Errorf("kubeconfig cluster %q: server %q: %w", name, c.Server, err)
	}
	if u.Scheme != "https" || u.Host == "" {
		return fmt.Errorf("%w: cluster %q server %q is not an https URL", ErrUnsafeKubeconfig, name, c.Server)
	}
	if len(c.CertificateAuthorityData) == 0 {
		return fmt.Errorf("kubeconfig cluster %q has no certificate-authority-data", name)
	}
	return nil
}

func checkUser(name string, u *clientcmdapi.AuthInfo) error {
	var refused []string
	if u.Exec != nil {
		refused = append(refused, "exec")
	}
	if u.AuthProvider != nil {
		refused = append(refused, "auth-provider")
	}
	if u.TokenFile != "" {
		refused = append(refused, "tokenFile")
	}
	if u.ClientCertificate != "" {
		refused = append(refused, "client-certificate (a file path; use client-certificate-data)")
	}
	if u.ClientKey != "" {
		refused = append(refused, "client-key (a file path; use client-key-data)")
	}
	if u.Impersonate != "" || u.ImpersonateUID != "" || len(u.ImpersonateGroups) > 0 || len(u.ImpersonateUserExtra) > 0 {
		refused = append(refused, "impersonation")
	}
	if u.Username != "" || u.Password != "" {
		refused = append(refused, "username/password")
	}
	if len(refused) > 0 {
		return fmt.Errorf("%w: user %q sets %s", ErrUnsafeKubeconfig, name, strings.Join(refused, ", "))
	}
	hasCert := len(u.ClientCertificateData) > 0 || len(u.ClientKeyData) > 0
	if hasCert && (len(u.ClientCertificateData) == 0 || len(u.ClientKeyData) == 0) {
		return fmt.Errorf("kubeconfig user %q needs both client-certificate-data and client-key-data", name)
	}
	if !hasCert && u.Token == "" {
		return fmt.Errorf("kubeconfig user %q has no inline credentials (token, or client-certificate-data and client-key-data)", name)
	}
	return nil
}
