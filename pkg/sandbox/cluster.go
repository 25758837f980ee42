package sandbox

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// Component and binary names.
const (
	binEtcd              = "etcd"
	binAPIServer         = "kube-apiserver"
	binControllerManager = "kube-controller-manager"
	binScheduler         = "kube-scheduler"
	binKwok              = "kwok"
	binKubectl           = "kubectl"
)

// Files inside a cluster's data folder.
const (
	pkiDir              = "pki"
	etcdDataDir         = "etcd"
	kwokConfigFile      = "kwok.yaml"
	schedulerConfigFile = "kube-scheduler.yaml"
)

// Fixed network settings. Every cluster is its own world, so they may repeat.
const (
	serviceCIDR = "10.96.0.0/16"
	// serviceIP is the first address of serviceCIDR: the kubernetes Service.
	serviceIP = "10.96.0.1"
)

func (c *ClusterState) pki(name string) string { return filepath.Join(c.DataDir, pkiDir, name) }

// CAFile is the cluster's CA: it signs the apiserver's, kwok's and (through
// the controller manager's kubelet-serving signer) fleetlet's virtual
// nodes' serving certificates.
func (c *ClusterState) CAFile() string { return c.pki("ca.crt") }

func (c *ClusterState) componentKubeconfig(component string) string {
	return filepath.Join(c.DataDir, component+".kubeconfig")
}

func (c *ClusterState) logFile(component string) string {
	return filepath.Join(c.LogDir, component+".log")
}

// prepareCluster writes everything a new cluster needs before its first start:
// certificates, keys, kubeconfigs and component configuration.
func prepareCluster(o Options, c *ClusterState) error {
	for _, d := range []string{filepath.Join(c.DataDir, pkiDir), filepath.Join(c.DataDir, etcdDataDir), c.LogDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	if err := os.Chmod(filepath.Join(c.DataDir, etcdDataDir), 0o700); err != nil {
		return err
	}
	ca, err := newAuthority(c.Name + "-ca")
	if err != nil {
		return err
	}
	if err := ca.write(filepath.Join(c.DataDir, pkiDir), "ca"); err != nil {
		return err
	}
	loopback := []net.IP{net.ParseIP("127.0.0.1")}
	serving := map[string]certRequest{
		"apiserver": {
			CommonName: "kube-apiserver",
			DNSNames:   []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"},
			IPs:        append(loopback, net.ParseIP(serviceIP)),
			Server:     true,
		},
		"controller-manager-serving": {CommonName: "kube-controller-manager", DNSNames: []string{"localhost"}, IPs: loopback, Server: true},
		"scheduler-serving":          {CommonName: "kube-scheduler", DNSNames: []string{"localhost"}, IPs: loopback, Server: true},
		// kwok's kubelet API, which the apiserver verifies
		// (--kubelet-certificate-authority) as fleetlet's virtual nodes'.
		"kwok-serving": {CommonName: "kwok", IPs: loopback, Server: true},
		// The apiserver's identity when it calls kubelets (logs, exec).
		"apiserver-kubelet-client": {CommonName: "kube-apiserver-kubelet-client", Organization: []string{"system:masters"}, Client: true},
	}
	for name, req := range serving {
		kp, err := ca.issue(req)
		if err != nil {
			return err
		}
		if err := kp.write(filepath.Join(c.DataDir, pkiDir), name); err != nil {
			return err
		}
	}
	if err := writeFrontProxyPKI(c); err != nil {
		return err
	}
	saKey, saPub, err := newServiceAccountKey()
	if err != nil {
		return err
	}
	if err := os.WriteFile(c.pki("sa.key"), saKey, 0o600); err != nil {
		return err
	}
	if err := os.WriteFile(c.pki("sa.pub"), saPub, 0o644); err != nil {
		return err
	}

	// Client identities. The admin kubeconfig is the one users and tests get.
	clients := []struct {
		path string
		req  certRequest
	}{
		{c.Kubeconfig, certRequest{CommonName: "sandbox-admin", Organization: []string{"system:masters"}, Client: true}},
		{c.componentKubeconfig(binControllerManager), certRequest{CommonName: "system:kube-controller-manager", Client: true}},
		{c.componentKubeconfig(binScheduler), certRequest{CommonName: "system:kube-scheduler", Client: true}},
		// kwok plays every kubelet of the cluster; it needs to write any node
		// and pod status, so it runs as an administrator.
		{c.componentKubeconfig(binKwok), certRequest{CommonName: "kwok", Organization: []string{"system:masters"}, Client: true}},
	}
	for _, cl := range clients {
		kp, err := ca.issue(cl.req)
		if err != nil {
			return err
		}
		if err := clientcmd.WriteToFile(*kubeconfigFor(c.Name, c.APIServerURL, ca.CertPEM, kp), cl.path); err != nil {
			return fmt.Errorf("writing %s: %w", cl.path, err)
		}
	}

	if runsKueue(o, c) {
		if err := writeKueueFiles(c, ca); err != nil {
			return err
		}
	}
	if runsMetricsServer(o) {
		if err := writeMetricsServerFiles(c, ca); err != nil {
			return err
		}
	}
	if err := os.WriteFile(filepath.Join(c.DataDir, schedulerConfigFile), []byte(schedulerConfig(c)), 0o644); err != nil {
		return err
	}
	binDir, err := filepath.Abs(o.BinDir)
	if err != nil {
		return err
	}
	debugging, err := kwokDebugging(c, binDir)
	if err != nil {
		return err
	}
	if err := writeContainerLog(c); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(c.DataDir, kwokConfigFile), []byte(kwokStages(o.CompleteAfter)+"---\n"+debugging+kwokMetrics(o)), 0o644)
}

// kubeconfigFor builds a kubeconfig with inline credentials whose context and
// cluster are both named name.
func kubeconfigFor(name, server string, caPEM []byte, client keyPair) *clientcmdapi.Config {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters[name] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: caPEM}
	cfg.AuthInfos[name] = &clientcmdapi.AuthInfo{ClientCertificateData: client.CertPEM, ClientKeyData: client.KeyPEM}
	cfg.Contexts[name] = &clientcmdapi.Context{Cluster: name, AuthInfo: name, Namespace: "default"}
	cfg.CurrentContext = name
	return cfg
}

func schedulerConfig(c *ClusterState) string {
	return fmt.Sprintf(`apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection:
  kubeconfig: %q
  qps: 200
  burst: 400
leaderElection:
  leaderElect: false
`, c.componentKubeconfig(binScheduler))
}

// component is one program of a cluster's control plane.
type component struct {
	name string
	// binary is the program in BinDir; empty means name.
	binary string
	args   func(o Options, c *ClusterState) []string
	// ready returns nil once the component serves; nil means it is ready as
	// soon as it runs.
	ready func(ctx context.Context, c *ClusterState) error
	// memoryLimit is the chart's resources.limits.memory for the
	// component, if any: it runs with the soft memory limit a container
	// of that limit gives it (memoryEnv).
	memoryLimit string
}

// components are started in this order and stopped in the reverse one. The
// apiserver needs etcd; everything after it needs the apiserver.
var components = []component{
	{name: binEtcd, args: etcdArgs, ready: etcdReady},
	{name: binAPIServer, args: apiServerArgs, ready: apiServerReady},
	{name: binControllerManager, args: controllerManagerArgs, ready: func(ctx context.Context, c *ClusterState) error {
		return httpsHealthy(ctx, c, c.Ports.ControllerManager)
	}},
	{name: binScheduler, args: schedulerArgs, ready: func(ctx context.Context, c *ClusterState) error {
		return httpsHealthy(ctx, c, c.Ports.Scheduler)
	}},
	{name: binKwok, args: kwokArgs},
}

func etcdArgs(_ Options, c *ClusterState) []string {
	client := fmt.Sprintf("http://127.0.0.1:%d", c.Ports.EtcdClient)
	peer := fmt.Sprintf("http://127.0.0.1:%d", c.Ports.EtcdPeer)
	return []string{
		"--name=" + c.Name,
		"--data-dir=" + filepath.Join(c.DataDir, etcdDataDir),
		"--listen-client-urls=" + client,
		"--advertise-client-urls=" + client,
		"--listen-peer-urls=" + peer,
		"--initial-advertise-peer-urls=" + peer,
		"--initial-cluster=" + c.Name + "=" + peer,
		// A sandbox trades durability after a machine crash for speed: the
		// benchmarks create thousands of pods.
		"--unsafe-no-fsync=true",
		"--log-level=warn",
	}
}

func apiServerArgs(o Options, c *ClusterState) []string {
	return []string{
		"--etcd-servers=" + fmt.Sprintf("http://127.0.0.1:%d", c.Ports.EtcdClient),
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(c.Ports.APIServer),
		"--tls-cert-file=" + c.pki("apiserver.crt"),
		"--tls-private-key-file=" + c.pki("apiserver.key"),
		"--client-ca-file=" + c.pki("ca.crt"),
		"--authorization-mode=Node,RBAC",
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file=" + c.pki("sa.pub"),
		"--service-account-signing-key-file=" + c.pki("sa.key"),
		"--service-cluster-ip-range=" + serviceCIDR,
		"--kubelet-client-certificate=" + c.pki("apiserver-kubelet-client.crt"),
		"--kubelet-client-key=" + c.pki("apiserver-kubelet-client.key"),
		// Kubelets' serving certificates are verified: kwok's is issued by
		// the cluster CA, fleetlet's virtual nodes' by the controller
		// manager's kubelet-serving signer, with the same CA.
		"--kubelet-certificate-authority=" + c.pki("ca.crt"),
		// On loopback the endpoint reconciler refuses the advertise address and
		// the apiserver exits; nothing in the sandbox needs that Endpoints.
		"--endpoint-reconciler-type=none",
		"--allow-privileged=true",
		"--default-not-ready-toleration-seconds=" + strconv.Itoa(o.TolerationSeconds),
		"--default-unreachable-toleration-seconds=" + strconv.Itoa(o.TolerationSeconds),
		"--profiling=false",
		"--max-requests-inflight=800",
		"--max-mutating-requests-inflight=400",
		// The aggregation layer (metrics.k8s.io): the apiserver proxies to
		// an aggregated server as front-proxy-client, and tells it who
		// asked in these headers, which the server trusts from a client
		// the front-proxy CA signed.
		"--requestheader-client-ca-file=" + c.pki("front-proxy-ca.crt"),
		"--requestheader-allowed-names=" + frontProxyClient,
		"--requestheader-username-headers=X-Remote-User",
		"--requestheader-group-headers=X-Remote-Group",
		"--requestheader-extra-headers-prefix=X-Remote-Extra-",
		"--proxy-client-cert-file=" + c.pki(frontProxyClient+".crt"),
		"--proxy-client-key-file=" + c.pki(frontProxyClient+".key"),
	}
}

func controllerManagerArgs(o Options, c *ClusterState) []string {
	kubeconfig := c.componentKubeconfig(binControllerManager)
	return []string{
		"--kubeconfig=" + kubeconfig,
		"--authentication-kubeconfig=" + kubeconfig,
		"--authorization-kubeconfig=" + kubeconfig,
		"--bind-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(c.Ports.ControllerManager),
		"--tls-cert-file=" + c.pki("controller-manager-serving.crt"),
		"--tls-private-key-file=" + c.pki("controller-manager-serving.key"),
		"--leader-elect=false",
		// Every default controller; node IPAM has no pod network to manage.
		"--controllers=*,-node-ipam-controller",
		"--use-service-account-credentials=true",
		"--service-account-private-key-file=" + c.pki("sa.key"),
		"--root-ca-file=" + c.pki("ca.crt"),
		"--cluster-signing-cert-file=" + c.pki("ca.crt"),
		"--cluster-signing-key-file=" + c.pki("ca.key"),
		"--node-monitor-grace-period=" + o.NodeMonitorGracePeriod.String(),
		// HorizontalPodAutoscalers act every 5 s rather than 15 s, so that
		// autoscaling tests finish sooner.
		"--horizontal-pod-autoscaler-sync-period=5s",
		"--kube-api-qps=200",
		"--kube-api-burst=400",
		"--profiling=false",
	}
}

func schedulerArgs(_ Options, c *ClusterState) []string {
	kubeconfig := c.componentKubeconfig(binScheduler)
	return []string{
		"--config=" + filepath.Join(c.DataDir, schedulerConfigFile),
		"--authentication-kubeconfig=" + kubeconfig,
		"--authorization-kubeconfig=" + kubeconfig,
		"--bind-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(c.Ports.Scheduler),
		"--tls-cert-file=" + c.pki("scheduler-serving.crt"),
		"--tls-private-key-file=" + c.pki("scheduler-serving.key"),
		"--profiling=false",
	}
}

func kwokArgs(_ Options, c *ClusterState) []string {
	return []string{
		"--kubeconfig=" + c.componentKubeconfig(binKwok),
		"--config=" + filepath.Join(c.DataDir, kwokConfigFile),
		"--manage-all-nodes=false",
		"--manage-nodes-with-label-selector=" + KwokNodeSelector,
		"--node-lease-duration-seconds=40",
		"--node-ip=127.0.0.1",
		// The fake nodes' kubelet API (logs, exec, attach,
		// port-forward), which they advertise.
		"--server-address=127.0.0.1:" + strconv.Itoa(c.Ports.KwokServer),
		"--tls-cert-file=" + c.pki("kwok-serving.crt"),
		"--tls-private-key-file=" + c.pki("kwok-serving.key"),
		"--node-port=" + strconv.Itoa(c.Ports.KwokServer),
		"--cidr=" + c.PodCIDR,
	}
}

// etcdReady asks etcd's /health endpoint.
func etcdReady(ctx context.Context, c *ClusterState) error {
	return httpGetOK(ctx, http.DefaultClient, fmt.Sprintf("http://127.0.0.1:%d/health", c.Ports.EtcdClient), `"health":"true"`)
}

// apiServerReady asks the apiserver's /readyz as the administrator.
func apiServerReady(ctx context.Context, c *ClusterState) error {
	cfg, err := clientcmd.LoadFromFile(c.Kubeconfig)
	if err != nil {
		return err
	}
	auth := cfg.AuthInfos[c.Name]
	if auth == nil {
		return fmt.Errorf("%s has no user %q", c.Kubeconfig, c.Name)
	}
	cert, err := tls.X509KeyPair(auth.ClientCertificateData, auth.ClientKeyData)
	if err != nil {
		return err
	}
	client, err := caClient(c, cert)
	if err != nil {
		return err
	}
	return httpGetOK(ctx, client, c.APIServerURL+"/readyz", "ok")
}

// httpsHealthy asks a component's /healthz on its secure port, verifying the
// serving certificate the sandbox issued.
func httpsHealthy(ctx context.Context, c *ClusterState, port int) error {
	client, err := caClient(c)
	if err != nil {
		return err
	}
	return httpGetOK(ctx, client, fmt.Sprintf("https://127.0.0.1:%d/healthz", port), "ok")
}

func caClient(c *ClusterState, certs ...tls.Certificate) (*http.Client, error) {
	caPEM, err := os.ReadFile(c.pki("ca.crt"))
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, fmt.Errorf("no certificate in %s", c.pki("ca.crt"))
	}
	return &http.Client{
		Timeout:   5 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, Certificates: certs, MinVersion: tls.VersionTLS12}},
	}, nil
}

func httpGetOK(ctx context.Context, client *http.Client, url, want string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), want) {
		return fmt.Errorf("GET %s: %d %s", url, resp.StatusCode, strings.TrimSpace(string(body)))
	}
	return nil
}
