package sandbox

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"

	"github.com/fleetlet/fleetlet/pkg/source/webhook"
	"github.com/fleetlet/fleetlet/pkg/target/access"
)

// fleetlet is installed in every sandbox cluster with its Helm chart, in
// local-process mode: the chart makes the CRDs, the ServiceAccounts and
// their RBAC, the webhook configuration (a loopback URL), the PriorityClass
// and the admission policies; the manager and the candidate scheduler run as
// local processes authenticated with their ServiceAccounts' tokens, so that
// the chart's RBAC is what they can do.
const (
	binHelm = "helm"
	// ReleaseName is the Helm release of fleetlet in every sandbox cluster.
	ReleaseName = "fleetlet"
	// packagedChartGlob is the chart `make chart` packages into the bin
	// folder (fleetlet-VERSION.tgz, one at a time).
	packagedChartGlob = "fleetlet-*.tgz"
	// helmDir holds helm's cache, configuration and data, so that helm
	// touches nothing in the user's home.
	helmDir = "helm"
	// valuesFile is a cluster's chart values, in its data folder.
	valuesFile = "fleetlet-values.yaml"
	// helmTimeout bounds one helm command.
	helmTimeout = 2 * time.Minute
	// TokenExpiration is how long the ServiceAccount tokens the local
	// processes run with are valid; `start` issues new ones.
	TokenExpiration = 48 * time.Hour
)

// Chart components, as the chart labels its ServiceAccounts
// (app.kubernetes.io/component).
const (
	chartManager   = "manager"
	chartScheduler = "scheduler"
	chartCleanup   = "cleanup"
)

// chartValues are the values a sandbox cluster is installed with.
func chartValues(c *ClusterState) map[string]any {
	return map[string]any{
		"localProcesses": true,
		"clusterName":    c.Name,
		"webhook": map[string]any{
			// The URL the manager, run with --webhook-url-mode, serves and
			// writes its CA for (fleetletComponent).
			"url": webhookURL(c),
		},
		"manager": map[string]any{
			"rbac": map[string]any{
				// Every cluster is a target of SourceCluster (its
				// ClusterSource's ServiceAccount in the fleetlet
				// namespace): the manager may create pods as that
				// ServiceAccount, and as no one else.
				"impersonate": []map[string]string{{
					"namespace": FleetletNamespace,
					"name":      access.DefaultServiceAccountName(SourceCluster),
				}},
			},
		},
	}
}

// webhookURL is where the API server calls a cluster's manager.
func webhookURL(c *ClusterState) string {
	return "https://127.0.0.1:" + strconv.Itoa(c.Ports.FleetletWebhook) + webhook.Path
}

// helm runs bin/helm with the sandbox's own helm folders.
func (s *Sandbox) helm(ctx context.Context, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, helmTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(s.opts.BinDir, binHelm), args...)
	home := filepath.Join(s.opts.Dir, helmDir)
	cmd.Env = append(os.Environ(),
		"HELM_CACHE_HOME="+filepath.Join(home, "cache"),
		"HELM_CONFIG_HOME="+filepath.Join(home, "config"),
		"HELM_DATA_HOME="+filepath.Join(home, "data"),
	)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.Bytes(), fmt.Errorf("helm %s: %w: %s", args[0], err, strings.TrimSpace(stderr.String()))
	}
	return stdout.Bytes(), nil
}

// PackagedChart is the chart package in binDir that `make chart` made
// (fleetlet-VERSION.tgz, the release artefact): the sandbox installs it, so
// that every test on a sandbox proves the package, not the chart's folder.
func PackagedChart(binDir string) (string, error) {
	matches, err := filepath.Glob(filepath.Join(binDir, packagedChartGlob))
	if err != nil {
		return "", err
	}
	switch len(matches) {
	case 1:
		return matches[0], nil
	case 0:
		return "", fmt.Errorf("no packaged fleetlet chart (%s) in %s: run `make chart`", packagedChartGlob, binDir)
	default:
		return "", fmt.Errorf("%d packaged fleetlet charts in %s (%v): run `make chart`, which keeps one", len(matches), binDir, matches)
	}
}

// writeChart finds the packaged chart and writes the cluster's values to its
// data folder, and returns both paths.
func (s *Sandbox) writeChart(c *ClusterState) (pkg, values string, err error) {
	pkg, err = PackagedChart(s.FleetletBinDir())
	if err != nil {
		return "", "", err
	}
	data, err := json.MarshalIndent(chartValues(c), "", "  ") // JSON is YAML
	if err != nil {
		return "", "", err
	}
	values = filepath.Join(c.DataDir, valuesFile)
	if err := os.WriteFile(values, data, 0o644); err != nil {
		return "", "", err
	}
	return pkg, values, nil
}

// installChart installs (or upgrades) the fleetlet release in a cluster,
// as `helm upgrade --install` with the cluster's administrator kubeconfig.
func (s *Sandbox) installChart(ctx context.Context, c *ClusterState) error {
	s.chartMu.Lock() // one values file per cluster
	defer s.chartMu.Unlock()
	pkg, values, err := s.writeChart(c)
	if err != nil {
		return err
	}
	if _, err := s.helm(ctx, "upgrade", "--install", ReleaseName, pkg,
		"--namespace", FleetletNamespace, "--create-namespace",
		"--kubeconfig", c.Kubeconfig, "--values", values); err != nil {
		return fmt.Errorf("installing the fleetlet chart: %w", err)
	}
	return nil
}

// issueCredentials writes, for the manager and the candidate scheduler, a
// kubeconfig with a fresh token of the chart's ServiceAccount for it.
func (s *Sandbox) issueCredentials(ctx context.Context, c *ClusterState) error {
	for _, p := range []struct{ component, process string }{
		{chartManager, ComponentManager},
		{chartScheduler, ComponentScheduler},
	} {
		sa, err := s.chartServiceAccount(ctx, c, p.component)
		if err != nil {
			return err
		}
		if err := s.writeTokenKubeconfig(ctx, c, sa, c.componentKubeconfig(p.process)); err != nil {
			return err
		}
	}
	return nil
}

// chartServiceAccount finds the release's ServiceAccount of one component
// by the labels the chart gives it.
func (s *Sandbox) chartServiceAccount(ctx context.Context, c *ClusterState, component string) (string, error) {
	cs, err := s.Client(c.Name)
	if err != nil {
		return "", err
	}
	sel := labels.SelectorFromSet(labels.Set{
		"app.kubernetes.io/instance":  ReleaseName,
		"app.kubernetes.io/component": component,
	})
	list, err := cs.CoreV1().ServiceAccounts(FleetletNamespace).List(ctx, metav1.ListOptions{LabelSelector: sel.String()})
	if err != nil {
		return "", fmt.Errorf("finding the %s ServiceAccount: %w", component, err)
	}
	if len(list.Items) != 1 {
		return "", fmt.Errorf("want one ServiceAccount labelled %s in %s, found %d: is the fleetlet chart installed?", sel, FleetletNamespace, len(list.Items))
	}
	return list.Items[0].Name, nil
}

// writeTokenKubeconfig requests a token of a ServiceAccount in the fleetlet
// namespace (TokenExpiration) and writes a kubeconfig that uses it.
func (s *Sandbox) writeTokenKubeconfig(ctx context.Context, c *ClusterState, serviceAccount, path string) error {
	cs, err := s.Client(c.Name)
	if err != nil {
		return err
	}
	tr, err := cs.CoreV1().ServiceAccounts(FleetletNamespace).CreateToken(ctx, serviceAccount, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To(int64(TokenExpiration / time.Second))},
	}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("requesting a token of ServiceAccount %s/%s: %w", FleetletNamespace, serviceAccount, err)
	}
	ca, err := os.ReadFile(c.pki("ca.crt"))
	if err != nil {
		return err
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters[c.Name] = &clientcmdapi.Cluster{Server: c.APIServerURL, CertificateAuthorityData: ca}
	cfg.AuthInfos[serviceAccount] = &clientcmdapi.AuthInfo{Token: tr.Status.Token}
	cfg.Contexts[c.Name] = &clientcmdapi.Context{Cluster: c.Name, AuthInfo: serviceAccount, Namespace: FleetletNamespace}
	cfg.CurrentContext = c.Name
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return os.Chmod(path, 0o600)
}

// Uninstall removes fleetlet from every cluster as `helm uninstall` would
// with the chart's post-delete hook, and leaves the clusters running:
// SourceCluster first (its cleanup deletes its chaperons in the targets
// with the credentials they gave it, which fleetlet's RBAC there still
// honours), then the others. See uninstallCluster.
func (s *Sandbox) Uninstall(ctx context.Context) error {
	unlock, err := lockDir(s.opts.Dir)
	if err != nil {
		return err
	}
	defer unlock()
	if s.opts.NoFleetlet {
		return errors.New("this sandbox runs no fleetlet")
	}
	start := time.Now()
	names := s.ClusterNames()
	for i, n := range names {
		if n == SourceCluster {
			names = append(append([]string{n}, names[:i]...), names[i+1:]...)
			break
		}
	}
	for _, name := range names {
		s.mu.Lock()
		c, err := s.state.Cluster(name)
		s.mu.Unlock()
		if err != nil {
			return err
		}
		if c.Uninstalled {
			continue
		}
		if c.Stopped {
			return fmt.Errorf("%s is stopped: start it first", name)
		}
		if err := s.uninstallCluster(ctx, c); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
	}
	fmt.Fprintf(s.opts.Out, "fleetlet uninstalled from %v in %s\n", names, time.Since(start).Round(100*time.Millisecond))
	return nil
}

// uninstallCluster does, in one cluster, what `helm uninstall` does to a
// release installed with Deployments, in Helm's order:
//
//  1. the manager and the candidate scheduler stop (their Deployments are
//     deleted with the release);
//  2. `helm uninstall` deletes the release's objects (with localProcesses
//     the chart renders no hook: kwok only pretends to run pods);
//  3. the post-delete hook: its ServiceAccount and RBAC, rendered from the
//     chart, are created in hook-weight order, `fleetlet cleanup` runs as a
//     local process with the Job's arguments and a token of that
//     ServiceAccount, and the hook objects are deleted once it succeeded
//     (hook-delete-policy hook-succeeded; a failed hook's stay, as Helm
//     leaves them).
func (s *Sandbox) uninstallCluster(ctx context.Context, c *ClusterState) error {
	start := time.Now()
	if err := s.stopComponentsOf(c, s.opts.StopGracePeriod, ComponentManager, ComponentScheduler); err != nil {
		return err
	}
	if _, err := s.helm(ctx, "uninstall", ReleaseName, "--namespace", FleetletNamespace,
		"--kubeconfig", c.Kubeconfig, "--wait", "--timeout", helmTimeout.String()); err != nil {
		return err
	}
	hook, err := s.renderCleanupHook(ctx, c)
	if err != nil {
		return err
	}
	if err := s.runCleanupHook(ctx, c, hook); err != nil {
		return err
	}
	s.mu.Lock()
	c.Uninstalled = true
	err = s.state.save()
	s.mu.Unlock()
	fmt.Fprintf(s.opts.Out, "%s: fleetlet uninstalled in %s\n", c.Name, time.Since(start).Round(100*time.Millisecond))
	return err
}

// stopComponentsOf stops the named components of a cluster the caller has
// locked, and records it.
func (s *Sandbox) stopComponentsOf(c *ClusterState, grace time.Duration, names ...string) error {
	s.mu.Lock()
	var keep, stop []Process
	for _, p := range c.Processes {
		if contains(names, p.Component) {
			stop = append(stop, p)
		} else {
			keep = append(keep, p)
		}
	}
	s.mu.Unlock()
	var errs []error
	for _, p := range stop {
		if err := stopProcess(p, stopGrace(p.Component, grace)); err != nil {
			errs = append(errs, err)
			keep = append(keep, p)
			continue
		}
		s.reap(p.PID)
	}
	s.mu.Lock()
	c.Processes = keep
	errs = append(errs, s.state.save())
	s.mu.Unlock()
	return errors.Join(errs...)
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}
