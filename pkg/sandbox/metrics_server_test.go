package sandbox

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"
)

// The aggregation layer trusts only what the front-proxy CA signed: the
// apiserver's proxy client, and not the cluster's ordinary clients.
func TestFrontProxyPKI(t *testing.T) {
	o, c := testCluster(t)
	frontCA := parseCert(t, mustRead(t, c.pki("front-proxy-ca.crt")))
	client := parseCert(t, mustRead(t, c.pki(frontProxyClient+".crt")))
	assert.NoError(t, client.CheckSignatureFrom(frontCA), "front-proxy-client is not signed by the front-proxy CA")
	assert.Equal(t, frontProxyClient, client.Subject.CommonName, "front-proxy-client CN")
	clusterCA := parseCert(t, mustRead(t, c.pki("ca.crt")))
	assert.False(t, client.CheckSignatureFrom(clusterCA) == nil || frontCA.Equal(clusterCA), "the front-proxy CA must not be the cluster CA")
	args := strings.Join(apiServerArgs(o, c), " ")
	for _, want := range []string{
		"--requestheader-client-ca-file=" + c.pki("front-proxy-ca.crt"),
		"--requestheader-allowed-names=" + frontProxyClient,
		"--proxy-client-cert-file=" + c.pki(frontProxyClient+".crt"),
		"--requestheader-username-headers=X-Remote-User",
	} {
		assert.Containsf(t, args, want, "apiserver args lack %q", want)
	}
}

func TestMetricsServerFiles(t *testing.T) {
	o, c := testClusterWith(t, func(o *Options) { o.MetricsServer = true })
	c.Ports.MetricsServer = 7
	serving := parseCert(t, mustRead(t, filepath.Join(c.DataDir, metricsServerDataDir, "tls.crt")))
	assert.NoError(t, serving.VerifyHostname("metrics-server.kube-system.svc"), "serving certificate is not for the Service the aggregator dials")
	assert.NoError(t, serving.CheckSignatureFrom(parseCert(t, mustRead(t, c.pki("ca.crt")))), "serving certificate is not signed by the CA the APIService trusts")
	cfg, err := clientcmd.LoadFromFile(c.componentKubeconfig(ComponentMetricsServer))
	require.NoError(t, err)
	assert.Equal(t, "system:metrics-server", parseCert(t, cfg.AuthInfos[c.Name].ClientCertificateData).Subject.CommonName, "metrics-server client CN")
	args := strings.Join(metricsServerComponent.args(o, c), " ")
	for _, want := range []string{"--bind-address=127.0.0.1", "--secure-port=7", "--kubelet-certificate-authority=" + c.pki("ca.crt"), "--kubelet-use-node-status-port"} {
		assert.Containsf(t, args, want, "metrics-server args %q lack %q", args, want)
	}
	assert.NotContainsf(t, args, "insecure", "metrics-server must verify kubelets: %s", args)

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
		require.NoError(t, yaml.Unmarshal([]byte(d), &obj), "kwok configuration does not parse:\n%s", d)
		kinds[obj.Kind] = obj.Spec.Path
	}
	assert.Contains(t, kinds, "ClusterResourceUsage", "kwok configuration has no ClusterResourceUsage")
	path, ok := kinds["Metric"]
	node := fakeNode(o, c, 1)
	assert.Falsef(t, !ok || strings.ReplaceAll(path, "{nodeName}", node.Name) != node.Annotations[resourceMetricsPathAnnotation],
		"kwok's Metric path %q does not match node annotation %q", path, node.Annotations[resourceMetricsPathAnnotation])
}

// Without the option no cluster has metrics-server files or kwok metrics.
func TestNoMetricsServerByDefault(t *testing.T) {
	_, c := testCluster(t)
	_, err := os.Stat(filepath.Join(c.DataDir, metricsServerDataDir))
	assert.Truef(t, os.IsNotExist(err), "metrics-server files written without the option: %v", err)
	assert.NotContains(t, string(mustRead(t, filepath.Join(c.DataDir, kwokConfigFile))), "kind: Metric", "kwok configuration has a Metric without the option")
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	return b
}
