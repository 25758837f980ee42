package sandbox

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"
)

// The aggregation layer trusts only what the front-proxy CA signed: the
// apiserver's proxy client, and not the cluster's ordinary clients.
func TestFrontProxyPKI(t *testing.T) {
	o, c := testCluster(t)
	frontCA := parseCert(t, mustRead(t, c.pki("front-proxy-ca.crt")))
	client := parseCert(t, mustRead(t, c.pki(frontProxyClient+".crt")))
	if err := client.CheckSignatureFrom(frontCA); err != nil {
		t.Errorf("front-proxy-client is not signed by the front-proxy CA: %v", err)
	}
	if client.Subject.CommonName != frontProxyClient {
		t.Errorf("front-proxy-client CN = %q", client.Subject.CommonName)
	}
	clusterCA := parseCert(t, mustRead(t, c.pki("ca.crt")))
	if client.CheckSignatureFrom(clusterCA) == nil || frontCA.Equal(clusterCA) {
		t.Error("the front-proxy CA must not be the cluster CA")
	}
	args := strings.Join(apiServerArgs(o, c), " ")
	for _, want := range []string{
		"--requestheader-client-ca-file=" + c.pki("front-proxy-ca.crt"),
		"--requestheader-allowed-names=" + frontProxyClient,
		"--proxy-client-cert-file=" + c.pki(frontProxyClient+".crt"),
		"--requestheader-username-headers=X-Remote-User",
	} {
		if !strings.Contains(args, want) {
			t.Errorf("apiserver args lack %q", want)
		}
	}
}

func TestMetricsServerFiles(t *testing.T) {
	o, c := testClusterWith(t, func(o *Options) { o.MetricsServer = true })
	c.Ports.MetricsServer = 7
	serving := parseCert(t, mustRead(t, filepath.Join(c.DataDir, metricsServerDataDir, "tls.crt")))
	if err := serving.VerifyHostname("metrics-server.kube-system.svc"); err != nil {
		t.Errorf("serving certificate is not for the Service the aggregator dials: %v", err)
	}
	if err := serving.CheckSignatureFrom(parseCert(t, mustRead(t, c.pki("ca.crt")))); err != nil {
		t.Errorf("serving certificate is not signed by the CA the APIService trusts: %v", err)
	}
	cfg, err := clientcmd.LoadFromFile(c.componentKubeconfig(ComponentMetricsServer))
	if err != nil {
		t.Fatal(err)
	}
	if cn := parseCert(t, cfg.AuthInfos[c.Name].ClientCertificateData).Subject.CommonName; cn != "system:metrics-server" {
		t.Errorf("metrics-server client CN = %q", cn)
	}
	args := strings.Join(metricsServerComponent.args(o, c), " ")
	for _, want := range []string{"--bind-address=127.0.0.1", "--secure-port=7", "--kubelet-certificate-authority=" + c.pki("ca.crt"), "--kubelet-use-node-status-port"} {
		if !strings.Contains(args, want) {
			t.Errorf("metrics-server args %q lack %q", args, want)
		}
	}
	if strings.Contains(args, "insecure") {
		t.Errorf("metrics-server must verify kubelets: %s", args)
	}

	// kwok serves each fake node's emulated /metrics/resource where the
	// node's annotation points metrics-server, with usage from annotations.
	kinds := map[string]string{}
	for _, d := range strings.Split(string(mustRead(t, filepath.Join(c.DataDir, kwokConfigFile))), "\n---\n") {
		var obj struct {
			Kind string `json:"kind"`
			Spec struct {
				Path string `json:"path"`
			} `json:"spec"`
		}
		if err := yaml.Unmarshal([]byte(d), &obj); err != nil {
			t.Fatalf("kwok configuration does not parse: %v\n%s", err, d)
		}
		kinds[obj.Kind] = obj.Spec.Path
	}
	if _, ok := kinds["ClusterResourceUsage"]; !ok {
		t.Errorf("kwok configuration has no ClusterResourceUsage: %v", kinds)
	}
	path, ok := kinds["Metric"]
	node := fakeNode(o, c, 1)
	if !ok || strings.ReplaceAll(path, "{nodeName}", node.Name) != node.Annotations[resourceMetricsPathAnnotation] {
		t.Errorf("kwok's Metric path %q does not match node annotation %q", path, node.Annotations[resourceMetricsPathAnnotation])
	}
}

// Without the option no cluster has metrics-server files or kwok metrics.
func TestNoMetricsServerByDefault(t *testing.T) {
	_, c := testCluster(t)
	if _, err := os.Stat(filepath.Join(c.DataDir, metricsServerDataDir)); !os.IsNotExist(err) {
		t.Errorf("metrics-server files written without the option: %v", err)
	}
	if strings.Contains(string(mustRead(t, filepath.Join(c.DataDir, kwokConfigFile))), "kind: Metric") {
		t.Error("kwok configuration has a Metric without the option")
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
