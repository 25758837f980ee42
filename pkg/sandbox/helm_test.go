package sandbox

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes/scheme"

	"github.com/fleetlet/fleetlet/pkg/testenv"
)

// chartSandbox is a Sandbox with the real bin/helm and one cluster, enough
// to render the chart as the sandbox installs it.
func chartSandbox(t *testing.T) (*Sandbox, *ClusterState) {
	t.Helper()
	bin := testenv.RequireBinaries(t, binHelm)
	o, c := testCluster(t)
	o.BinDir, o.FleetletBinDir = bin, bin
	c.Ports.FleetletWebhook = 9876
	return &Sandbox{opts: o, state: &State{Clusters: []ClusterState{*c}}, procs: map[int]*running{}}, c
}

// TestChartAsInstalled renders the embedded chart with the values a sandbox
// cluster is installed with and checks what the local processes rely on.
func TestChartAsInstalled(t *testing.T) {
	s, c := chartSandbox(t)
	dir, values, err := s.writeChart(c)
	require.NoError(t, err)
	out, err := s.helm(context.Background(), "template", ReleaseName, dir, "--namespace", FleetletNamespace, "--values", values)
	require.NoError(t, err)
	kinds := map[string]int{}
	var webhookURLs []string
	serviceAccounts := map[string]string{} // component → name
	var impersonated []string
	r := utilyaml.NewYAMLReader(bufioReader(out))
	for {
		doc, err := r.Read()
		if err != nil {
			break
		}
		if len(bytes.TrimSpace(bytes.TrimPrefix(bytes.TrimSpace(doc), []byte("---")))) == 0 {
			continue
		}
		obj, gvk, err := scheme.Codecs.UniversalDeserializer().Decode(doc, nil, nil)
		if err != nil {
			// CRDs are not in client-go's scheme.
			if strings.Contains(string(doc), "kind: CustomResourceDefinition") {
				kinds["CustomResourceDefinition"]++
				continue
			}
			require.FailNowf(t, "decoding", "%s: %v", doc, err)
		}
		kinds[gvk.Kind]++
		switch o := obj.(type) {
		case *admissionregistrationv1.MutatingWebhookConfiguration:
			for _, w := range o.Webhooks {
				if w.ClientConfig.URL != nil {
					webhookURLs = append(webhookURLs, *w.ClientConfig.URL)
				}
			}
		case *corev1.ServiceAccount:
			if o.Labels["app.kubernetes.io/instance"] == ReleaseName {
				serviceAccounts[o.Labels["app.kubernetes.io/component"]] = o.Name
			}
		case *rbacv1.Role:
			for _, rule := range o.Rules {
				if slices.Contains(rule.Verbs, "impersonate:serviceaccount") {
					for _, n := range rule.ResourceNames {
						impersonated = append(impersonated, o.Namespace+"/"+n)
					}
				}
			}
		}
	}
	for _, k := range []string{"Deployment", "Job", "Service", "PodDisruptionBudget"} {
		assert.Zerof(t, kinds[k], "%d %s rendered: the sandbox runs no pods (localProcesses)", kinds[k], k)
	}
	assert.Equal(t, 6, kinds["CustomResourceDefinition"], "CRDs rendered")
	// The manager serves the URL its flags give; the chart's configuration
	// must call the same one.
	mgr := strings.Join(fleetletComponent.args(s.opts, c), " ")
	for _, w := range []string{"--webhook-url-mode", "--webhook-host=127.0.0.1", "--webhook-port=9876"} {
		assert.Containsf(t, mgr, w, "manager args %q lack %q", mgr, w)
	}
	// Both webhooks (pods, evictions) call the one handler.
	assert.Equal(t, []string{"https://127.0.0.1:9876/mutate-pods", "https://127.0.0.1:9876/mutate-pods"}, webhookURLs, "webhook URLs")
	assert.Falsef(t, serviceAccounts[chartManager] == "" || serviceAccounts[chartScheduler] == "", "ServiceAccounts by component %v: the sandbox finds the manager's and the scheduler's by label", serviceAccounts)
	assert.Equal(t, []string{FleetletNamespace + "/fleetlet-source-" + SourceCluster}, impersonated, "the manager may impersonate")
	// The processes run with the ServiceAccounts' kubeconfigs, never the
	// administrator's.
	for _, comp := range []component{fleetletComponent, schedulerComponent} {
		a := strings.Join(comp.args(s.opts, c), " ")
		assert.Falsef(t, strings.Contains(a, c.Kubeconfig) || !strings.Contains(a, c.componentKubeconfig(comp.name)), "%s args %q: want %s, not the admin kubeconfig", comp.name, a, c.componentKubeconfig(comp.name))
	}
}

func TestRenderCleanupHook(t *testing.T) {
	s, c := chartSandbox(t)
	h, err := s.renderCleanupHook(context.Background(), c)
	require.NoError(t, err)
	var kinds []string
	for _, o := range h.objects {
		kinds = append(kinds, strings.TrimPrefix(strings.TrimPrefix(typeName(o), "*v1."), "*"))
	}
	// Hook-weight order: the ServiceAccount and ClusterRole, then the binding.
	assert.Equal(t, []string{"ServiceAccount", "ClusterRole", "ClusterRoleBinding"}, kinds, "hook objects")
	assert.Equal(t, "fleetlet-cleanup", h.serviceAccount, "hook ServiceAccount")
	assert.Equal(t, []string{"cleanup", "--cluster-name=" + c.Name}, h.args, "cleanup args")
	assert.Equal(t, 300*time.Second, h.deadline, "deadline, want the Job's activeDeadlineSeconds 300s")
}

func TestParseCleanupHookRefuses(t *testing.T) {
	sa := "apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: c\n  annotations:\n    helm.sh/hook-weight: \"-10\"\n"
	job := func(args string) string {
		return "apiVersion: batch/v1\nkind: Job\nmetadata:\n  name: c\n  annotations:\n    helm.sh/hook-weight: \"0\"\nspec:\n  template:\n    spec:\n      containers:\n        - name: c\n          image: x\n          args: " + args + "\n"
	}
	for _, tc := range []struct {
		name, manifest, want string
	}{
		{"an unknown kind", sa + "---\n" + job(`["cleanup"]`) + "---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\n  annotations:\n    helm.sh/hook-weight: \"1\"\n", "does not know how to run a *v1.ConfigMap"},
		{"another command", sa + "---\n" + job(`["manager"]`), "want `fleetlet cleanup`"},
		{"no Job", sa, "no ServiceAccount or no Job"},
		{"no weight", "apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: c\n", "hook weight"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parseCleanupHook([]byte(tc.manifest))
			assert.ErrorContainsf(t, err, tc.want, "parseCleanupHook = %v, want an error with %q", err, tc.want)
		})
	}
}

func TestValidateNeedsHelm(t *testing.T) {
	bin := fakeBinDir(t, "exit 0")
	require.NoError(t, os.Remove(filepath.Join(bin, binHelm)))
	err := Options{Dir: "d", BinDir: bin}.Defaulted().Validate()
	assert.Falsef(t, err == nil || !strings.Contains(err.Error(), "binary helm not found") || !strings.Contains(err.Error(), "make build"), "Validate without helm = %v", err)
	assert.NoError(t, (Options{Dir: "d", BinDir: bin, NoFleetlet: true}).Defaulted().Validate(), "Validate without helm and without fleetlet")
}

func TestChartValuesPerCluster(t *testing.T) {
	c := &ClusterState{Name: "cluster-3", Ports: Ports{FleetletWebhook: 4242}}
	v := chartValues(c)
	assert.Falsef(t, v["clusterName"] != "cluster-3" || v["localProcesses"] != true, "values %v", v)
	assert.Equal(t, "https://127.0.0.1:"+strconv.Itoa(4242)+"/mutate-pods", v["webhook"].(map[string]any)["url"], "webhook.url")
}

func bufioReader(b []byte) *bufio.Reader { return bufio.NewReader(bytes.NewReader(b)) }

func typeName(v any) string { return fmt.Sprintf("%T", v) }
