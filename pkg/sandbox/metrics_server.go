package sandbox

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	apiregistrationv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	aggregatorclient "k8s.io/kube-aggregator/pkg/client/clientset_generated/clientset"
	kwokresource "sigs.k8s.io/kwok/kustomize/metrics/resource"
	kwokusage "sigs.k8s.io/kwok/kustomize/metrics/usage"
)

// metrics-server in the sandbox (Options.MetricsServer): in every cluster,
// metrics-server (bin/metrics-server, `make metrics-server`) runs as a local
// process and is registered through the apiserver's aggregation layer, as
// in a real cluster, so that `kubectl top` and the HPA controller reach it
// through the apiserver. An APIService can only name a Service, and an
// Endpoints cannot hold 127.0.0.1, so the Service is an ExternalName to
// localhost: the aggregator dials localhost on the APIService's port and
// verifies the serving certificate for the Service's name.
//
// It scrapes every node's kubelet at its InternalIP and status port,
// verifying the kubelet's serving certificate with the cluster CA: kwok's
// fake nodes serve kwok's emulated /metrics/resource (kwokMetrics), and
// fleetlet's virtual nodes their delegates' usage.
const (
	// ComponentMetricsServer is the process name of a cluster's metrics-server.
	ComponentMetricsServer = "metrics-server"
	binMetricsServer       = "metrics-server"
	// MetricsServerService is the Service, in kube-system, the APIService
	// names; its serving certificate is for this Service.
	MetricsServerService = "metrics-server"
	metricsAPIService    = "v1beta1.metrics.k8s.io"
	metricsServerDataDir = "metrics-server"
	// MetricResolution is how often metrics-server scrapes every node: its
	// minimum, so that tests see usage soon.
	MetricResolution = "10s"
)

// metricsServerComponent runs metrics-server on the cluster's loopback port.
var metricsServerComponent = component{
	name:   ComponentMetricsServer,
	binary: binMetricsServer,
	args: func(_ Options, c *ClusterState) []string {
		dir := filepath.Join(c.DataDir, metricsServerDataDir)
		kubeconfig := c.componentKubeconfig(ComponentMetricsServer)
		return []string{
			"--bind-address=127.0.0.1",
			"--secure-port=" + strconv.Itoa(c.Ports.MetricsServer),
			"--tls-cert-file=" + filepath.Join(dir, "tls.crt"),
			"--tls-private-key-file=" + filepath.Join(dir, "tls.key"),
			"--kubeconfig=" + kubeconfig,
			"--authentication-kubeconfig=" + kubeconfig,
			"--authorization-kubeconfig=" + kubeconfig,
			"--kubelet-use-node-status-port",
			"--kubelet-preferred-address-types=InternalIP",
			"--kubelet-certificate-authority=" + c.pki("ca.crt"),
			"--metric-resolution=" + MetricResolution,
			// Below 90 % of the resolution, as metrics-server requires.
			"--kubelet-request-timeout=5s",
		}
	},
	ready: func(ctx context.Context, c *ClusterState) error {
		client, err := caClient(c)
		if err != nil {
			return err
		}
		return httpGetOK(ctx, client, fmt.Sprintf("https://127.0.0.1:%d/livez", c.Ports.MetricsServer), "ok")
	},
}

// Annotations that set the usage kwok emulates for one pod, read by kwok's
// own usage-from-annotation ClusterResourceUsage (CPU defaults to 1m, memory
// to 1Mi). The e2e raises and lowers them to drive an autoscaler.
const (
	AnnotationUsageCPU    = "kwok.x-k8s.io/usage-cpu"
	AnnotationUsageMemory = "kwok.x-k8s.io/usage-memory"
)

// kwokResourceMetricsPath is where kwok serves a fake node's emulated
// /metrics/resource (kwok's metrics-resource Metric); metrics-server reads a
// node's path from the annotation metrics.k8s.io/resource-metrics-path.
const resourceMetricsPathAnnotation = "metrics.k8s.io/resource-metrics-path"

func kwokResourceMetricsPath(node string) string {
	return "/metrics/nodes/" + node + "/metrics/resource"
}

// kwokMetrics is the kwok configuration of emulated usage, as kwok's module
// ships it: its Metric for a kubelet's /metrics/resource and its
// ClusterResourceUsage that reads each pod's usage from annotations. Empty
// without metrics-server.
func kwokMetrics(o Options) string {
	if !runsMetricsServer(o) {
		return ""
	}
	return "\n---\n" + kwokresource.DefaultMetricsResource + "\n---\n" + kwokusage.DefaultUsageFromAnnotation
}

// runsMetricsServer tells whether the cluster runs metrics-server: every
// cluster, with the option on.
func runsMetricsServer(o Options) bool { return o.MetricsServer }

// writeMetricsServerFiles writes, before a cluster's first start,
// metrics-server's serving certificate (for its Service's name, and for
// 127.0.0.1, where the sandbox asks whether it is live) and its kubeconfig.
// It acts as a cluster administrator (system:masters), like kwok: a test
// component of the sandbox; its kubelet calls are authorized by the
// kubelets as any administrator's (nodes/metrics).
func writeMetricsServerFiles(c *ClusterState, ca *authority) error {
	dir := filepath.Join(c.DataDir, metricsServerDataDir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	svc := MetricsServerService + "." + metav1.NamespaceSystem + ".svc"
	serving, err := ca.issue(certRequest{CommonName: svc, DNSNames: []string{svc}, IPs: []net.IP{net.ParseIP("127.0.0.1")}, Server: true})
	if err != nil {
		return err
	}
	if err := serving.write(dir, "tls"); err != nil {
		return err
	}
	client, err := ca.issue(certRequest{CommonName: "system:metrics-server", Organization: []string{"system:masters"}, Client: true})
	if err != nil {
		return err
	}
	return clientcmd.WriteToFile(*kubeconfigFor(c.Name, c.APIServerURL, ca.CertPEM, client), c.componentKubeconfig(ComponentMetricsServer))
}

// startMetricsServer starts metrics-server, registers it (install: a new
// cluster) and waits until the aggregator calls its API Available.
func (s *Sandbox) startMetricsServer(ctx context.Context, c *ClusterState, install bool, watch []*running) error {
	if err := s.startComponent(ctx, c, metricsServerComponent, watch); err != nil {
		return err
	}
	cfg, err := s.RESTConfig(c.Name)
	if err != nil {
		return err
	}
	agg, err := aggregatorclient.NewForConfig(cfg)
	if err != nil {
		return err
	}
	if install {
		cs, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			return err
		}
		if err := registerMetricsServer(ctx, c, cs, agg); err != nil {
			return err
		}
	}
	return s.waitFor(ctx, c, "the metrics API to be Available", watch, func(ctx context.Context) error {
		return apiServiceAvailable(ctx, agg, metricsAPIService)
	})
}

// registerMetricsServer creates the ExternalName Service and the APIService
// of metrics.k8s.io, trusting the cluster CA for metrics-server's serving
// certificate.
func registerMetricsServer(ctx context.Context, c *ClusterState, cs kubernetes.Interface, agg aggregatorclient.Interface) error {
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: MetricsServerService, Namespace: metav1.NamespaceSystem},
		Spec:       corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: "localhost"},
	}
	if _, err := cs.CoreV1().Services(metav1.NamespaceSystem).Create(ctx, svc, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating Service %s: %w", MetricsServerService, err)
	}
	caPEM, err := os.ReadFile(c.pki("ca.crt"))
	if err != nil {
		return err
	}
	port := int32(c.Ports.MetricsServer)
	api := &apiregistrationv1.APIService{
		ObjectMeta: metav1.ObjectMeta{Name: metricsAPIService},
		Spec: apiregistrationv1.APIServiceSpec{
			Group:                "metrics.k8s.io",
			Version:              "v1beta1",
			Service:              &apiregistrationv1.ServiceReference{Namespace: metav1.NamespaceSystem, Name: MetricsServerService, Port: &port},
			CABundle:             caPEM,
			GroupPriorityMinimum: 100,
			VersionPriority:      100,
		},
	}
	if _, err := agg.ApiregistrationV1().APIServices().Create(ctx, api, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating APIService %s: %w", metricsAPIService, err)
	}
	return nil
}

// apiServiceAvailable returns nil once the aggregator has reached the
// APIService's server.
func apiServiceAvailable(ctx context.Context, agg aggregatorclient.Interface, name string) error {
	a, err := agg.ApiregistrationV1().APIServices().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	for _, cond := range a.Status.Conditions {
		if cond.Type == apiregistrationv1.Available {
			if cond.Status == apiregistrationv1.ConditionTrue {
				return nil
			}
			return fmt.Errorf("APIService %s is not Available: %s: %s", name, cond.Reason, cond.Message)
		}
	}
	return fmt.Errorf("APIService %s has no Available condition yet", name)
}
