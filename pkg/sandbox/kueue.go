package sandbox

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// Kueue in the sandbox (Options.Kueue): the Kueue manager, built from its Go
// module by hack/build-kueue.sh, runs as a local process against the source
// cluster, with its CRDs and its webhooks from the same module. The webhooks
// are served on loopback and registered by URL, as fleetlet's are.
const (
	// ComponentKueue is the process name of the source's Kueue manager.
	ComponentKueue = "kueue"
	binKueue       = "kueue"
	// kueueConfigDir, in the bin folder, holds Kueue's CRDs (crd/) and its
	// webhook manifests (webhooks.yaml), copied from its module.
	kueueConfigDir = "kueue-config"
	// KueueNamespace is where Kueue keeps its own objects.
	KueueNamespace = "kueue-system"
	// KueueNamespaceLabel, "true" on a namespace, makes it Kueue's: its Jobs
	// and pods with a kueue.x-k8s.io/queue-name label are queued. Other
	// namespaces never meet Kueue's pod and Job webhooks.
	KueueNamespaceLabel = "sandbox.fleetlet.io/kueue"
	// kueueDataDir, in the source's data folder, holds Kueue's configuration
	// and its webhook serving certificate.
	kueueDataDir = "kueue"
	// kueueMetricsCertDir is where Kueue v0.17 reads its metrics serving
	// certificate when it does not manage certificates itself: a path
	// compiled into it (cmd/kueue/main.go). It must hold a valid pair or
	// Kueue exits at start; the sandbox writes one when it is missing.
	kueueMetricsCertDir = "/etc/kueue/metrics/certs"
)

// kueueComponent runs the Kueue manager with the configuration
// writeKueueFiles wrote. The on-demand visibility API (an aggregated API
// server of its own) is off: nothing here uses it.
var kueueComponent = component{
	name:   ComponentKueue,
	binary: binKueue,
	args: func(_ Options, c *ClusterState) []string {
		return []string{
			"--config=" + filepath.Join(c.DataDir, kueueDataDir, "config.yaml"),
			"--kubeconfig=" + c.componentKubeconfig(ComponentKueue),
			"--feature-gates=VisibilityOnDemand=false",
		}
	},
	ready: func(ctx context.Context, c *ClusterState) error {
		return managerReady(ctx, c.Ports.KueueHealth)
	},
}

// runsKueue tells whether the cluster runs Kueue: the source, with the
// option on.
func runsKueue(o Options, c *ClusterState) bool {
	return o.Kueue && !o.NoFleetlet && c.Name == SourceCluster
}

// kueueConfig is Kueue's Configuration: every server on loopback, no leader
// election, no certificate management of its own (the sandbox's CA signs its
// webhook certificate), Jobs and plain pods of the labelled namespaces only.
func kueueConfig(c *ClusterState) string {
	return fmt.Sprintf(`apiVersion: config.kueue.x-k8s.io/v1beta2
kind: Configuration
namespace: %s
health:
  healthProbeBindAddress: 127.0.0.1:%d
metrics:
  bindAddress: 127.0.0.1:%d
webhook:
  host: 127.0.0.1
  port: %d
  certDir: %s
leaderElection:
  leaderElect: false
internalCertManagement:
  enable: false
manageJobsWithoutQueueName: false
managedJobsNamespaceSelector:
  matchLabels:
    %s: "true"
integrations:
  frameworks:
  - batch/job
  - pod
`, KueueNamespace, c.Ports.KueueHealth, c.Ports.KueueMetrics, c.Ports.KueueWebhook,
		filepath.Join(c.DataDir, kueueDataDir), KueueNamespaceLabel)
}

// writeKueueFiles writes, before the source's first start, Kueue's
// configuration, its webhook serving certificate (tls.crt and tls.key, for
// 127.0.0.1) and its kubeconfig. Kueue acts as a cluster administrator
// (system:masters): it is a test component of the sandbox, not something
// fleetlet ships, and its own RBAC lives in its chart.
func writeKueueFiles(c *ClusterState, ca *authority) error {
	dir := filepath.Join(c.DataDir, kueueDataDir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	serving, err := ca.issue(certRequest{CommonName: "kueue-webhook", IPs: []net.IP{net.ParseIP("127.0.0.1")}, Server: true})
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "tls.crt"), serving.CertPEM, 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "tls.key"), serving.KeyPEM, 0o600); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "config.yaml"), []byte(kueueConfig(c)), 0o644); err != nil {
		return err
	}
	client, err := ca.issue(certRequest{CommonName: "kueue", Organization: []string{"system:masters"}, Client: true})
	if err != nil {
		return err
	}
	return clientcmd.WriteToFile(*kubeconfigFor(c.Name, c.APIServerURL, ca.CertPEM, client), c.componentKubeconfig(ComponentKueue))
}

// ensureKueueMetricsCert writes the sandbox's Kueue serving pair where Kueue
// reads its metrics certificate, unless a pair is there already.
func ensureKueueMetricsCert(c *ClusterState) error {
	if _, err := os.Stat(filepath.Join(kueueMetricsCertDir, "tls.key")); err == nil {
		return nil
	}
	if err := os.MkdirAll(kueueMetricsCertDir, 0o755); err != nil {
		return fmt.Errorf("kueue reads its metrics certificate from %s (compiled in), which cannot be written: %w", kueueMetricsCertDir, err)
	}
	for _, f := range []string{"tls.crt", "tls.key"} {
		b, err := os.ReadFile(filepath.Join(c.DataDir, kueueDataDir, f))
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(kueueMetricsCertDir, f), b, 0o600); err != nil {
			return err
		}
	}
	return nil
}

// startKueue installs Kueue's CRDs and namespace (install: a new cluster),
// starts the Kueue manager and, once it serves, registers its webhooks.
func (s *Sandbox) startKueue(ctx context.Context, c *ClusterState, install bool, watch []*running) error {
	if err := ensureKueueMetricsCert(c); err != nil {
		return err
	}
	cfg, err := s.RESTConfig(c.Name)
	if err != nil {
		return err
	}
	if install {
		if err := s.installKueueCRDs(ctx, c); err != nil {
			return err
		}
		cs, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			return err
		}
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: KueueNamespace}}
		if _, err := cs.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
	}
	if err := s.startComponent(ctx, c, kueueComponent, watch); err != nil {
		return err
	}
	if !install {
		return nil
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	return s.registerKueueWebhooks(ctx, c, cs)
}

// installKueueCRDs creates Kueue's CRDs and waits until they are
// established.
func (s *Sandbox) installKueueCRDs(ctx context.Context, c *ClusterState) error {
	cfg, err := s.RESTConfig(c.Name)
	if err != nil {
		return err
	}
	ext, err := apiextensionsclient.NewForConfig(cfg)
	if err != nil {
		return err
	}
	files, err := filepath.Glob(filepath.Join(s.opts.BinDir, kueueConfigDir, "crd", "*.yaml"))
	if err != nil || len(files) == 0 {
		return fmt.Errorf("no Kueue CRDs in %s (run `make kueue`)", filepath.Join(s.opts.BinDir, kueueConfigDir, "crd"))
	}
	for _, f := range files {
		var crd apiextensionsv1.CustomResourceDefinition
		if err := decodeFile(f, func(d *utilyaml.YAMLOrJSONDecoder) error { return d.Decode(&crd) }); err != nil {
			return err
		}
		if _, err := ext.ApiextensionsV1().CustomResourceDefinitions().Create(ctx, &crd, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating CRD %s: %w", crd.Name, err)
		}
		if err := s.waitFor(ctx, c, "CRD "+crd.Name+" to be established", nil, func(ctx context.Context) error {
			return crdEstablished(ctx, ext, crd.Name)
		}); err != nil {
			return err
		}
	}
	return nil
}

// registerKueueWebhooks registers Kueue's webhooks from its manifests, by
// URL on loopback with the cluster's CA: those for Kueue's own resources,
// pods and Jobs (the integrations the configuration turns on: a webhook of
// another, with no handler behind it, would refuse every object of its
// kind), the pod and Job ones for Kueue's namespaces only.
func (s *Sandbox) registerKueueWebhooks(ctx context.Context, c *ClusterState, cs kubernetes.Interface) error {
	ca, err := os.ReadFile(c.pki("ca.crt"))
	if err != nil {
		return err
	}
	base := "https://127.0.0.1:" + strconv.Itoa(c.Ports.KueueWebhook)
	var mutating admissionregistrationv1.MutatingWebhookConfiguration
	var validating admissionregistrationv1.ValidatingWebhookConfiguration
	if err := decodeFile(filepath.Join(s.opts.BinDir, kueueConfigDir, "webhooks.yaml"), func(d *utilyaml.YAMLOrJSONDecoder) error {
		if err := d.Decode(&mutating); err != nil {
			return err
		}
		return d.Decode(&validating)
	}); err != nil {
		return err
	}
	mutating.Name, validating.Name = "kueue-mutating-webhook-configuration", "kueue-validating-webhook-configuration"
	var mw []admissionregistrationv1.MutatingWebhook
	for _, w := range mutating.Webhooks {
		if keep, workload := kueueWebhookKept(w.Rules); keep {
			w.ClientConfig, w.NamespaceSelector = kueueClientConfig(base, w.ClientConfig, ca), kueueNamespaces(workload)
			mw = append(mw, w)
		}
	}
	var vw []admissionregistrationv1.ValidatingWebhook
	for _, w := range validating.Webhooks {
		if keep, workload := kueueWebhookKept(w.Rules); keep {
			w.ClientConfig, w.NamespaceSelector = kueueClientConfig(base, w.ClientConfig, ca), kueueNamespaces(workload)
			vw = append(vw, w)
		}
	}
	mutating.Webhooks, validating.Webhooks = mw, vw
	if _, err := cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(ctx, &mutating, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("registering Kueue's mutating webhooks: %w", err)
	}
	if _, err := cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(ctx, &validating, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("registering Kueue's validating webhooks: %w", err)
	}
	return nil
}

// kueueWebhookKept tells whether a webhook of Kueue's manifests is
// registered (Kueue's own resources, pods, Jobs), and whether it is one of a
// workload (pods, Jobs).
func kueueWebhookKept(rules []admissionregistrationv1.RuleWithOperations) (keep, workload bool) {
	for _, r := range rules {
		for _, g := range r.APIGroups {
			for _, res := range r.Resources {
				switch {
				case g == "kueue.x-k8s.io":
					keep = true
				case (g == "" && res == "pods") || (g == "batch" && res == "jobs"):
					keep, workload = true, true
				default:
					return false, false
				}
			}
		}
	}
	return keep, workload
}

func kueueClientConfig(base string, in admissionregistrationv1.WebhookClientConfig, ca []byte) admissionregistrationv1.WebhookClientConfig {
	path := ""
	if in.Service != nil && in.Service.Path != nil {
		path = *in.Service.Path
	}
	url := base + path
	return admissionregistrationv1.WebhookClientConfig{URL: &url, CABundle: ca}
}

func kueueNamespaces(workload bool) *metav1.LabelSelector {
	if !workload {
		return nil
	}
	return &metav1.LabelSelector{MatchLabels: map[string]string{KueueNamespaceLabel: "true"}}
}

// decodeFile opens a YAML file and hands a decoder of it to decode.
func decodeFile(path string, decode func(*utilyaml.YAMLOrJSONDecoder) error) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := decode(utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(b), 4096)); err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("decoding %s: %w", path, err)
	}
	return nil
}

func crdEstablished(ctx context.Context, ext apiextensionsclient.Interface, name string) error {
	got, err := ext.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	for _, cond := range got.Status.Conditions {
		if cond.Type == apiextensionsv1.Established && cond.Status == apiextensionsv1.ConditionTrue {
			return nil
		}
	}
	return fmt.Errorf("CRD %s not established", name)
}
