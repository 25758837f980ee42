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
	if err != nil {
		t.Fatal(err)
	}
	out, err := s.helm(context.Background(), "template", ReleaseName, dir, "--namespace", FleetletNamespace, "--values", values)
	if err != nil {
		t.Fatal(err)
	}
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
			t.Fatalf("decoding %s: %v", doc, err)
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
		if kinds[k] != 0 {
			t.Errorf("%d %s rendered: the sandbox runs no pods (localProcesses)", kinds[k], k)
		}
	}
	if kinds["CustomResourceDefinition"] != 6 {
		t.Errorf("%d CRDs rendered, want 6", kinds["CustomResourceDefinition"])
	}
	// The manager serves the URL its flags give; the chart's configuration
	// must call the same one.
	mgr := strings.Join(fleetletComponent.args(s.opts, c), " ")
	for _, w := range []string{"--webhook-url-mode", "--webhook-host=127.0.0.1", "--webhook-port=9876"} {
		if !strings.Contains(mgr, w) {
			t.Errorf("manager args %q lack %q", mgr, w)
		}
	}
	// Both webhooks (pods, evictions) call the one handler.
	if want := []string{"https://127.0.0.1:9876/mutate-pods", "https://127.0.0.1:9876/mutate-pods"}; !slices.Equal(webhookURLs, want) {
		t.Errorf("webhook URLs %v, want %v", webhookURLs, want)
	}
	if serviceAccounts[chartManager] == "" || serviceAccounts[chartScheduler] == "" {
		t.Errorf("ServiceAccounts by component %v: the sandbox finds the manager's and the scheduler's by label", serviceAccounts)
	}
	if want := []string{FleetletNamespace + "/fleetlet-source-" + SourceCluster}; !slices.Equal(impersonated, want) {
		t.Errorf("the manager may impersonate %v, want %v", impersonated, want)
	}
	// The processes run with the ServiceAccounts' kubeconfigs, never the
	// administrator's.
	for _, comp := range []component{fleetletComponent, schedulerComponent} {
		a := strings.Join(comp.args(s.opts, c), " ")
		if strings.Contains(a, c.Kubeconfig) || !strings.Contains(a, c.componentKubeconfig(comp.name)) {
			t.Errorf("%s args %q: want %s, not the admin kubeconfig", comp.name, a, c.componentKubeconfig(comp.name))
		}
	}
}

func TestRenderCleanupHook(t *testing.T) {
	s, c := chartSandbox(t)
	h, err := s.renderCleanupHook(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, o := range h.objects {
		kinds = append(kinds, strings.TrimPrefix(strings.TrimPrefix(typeName(o), "*v1."), "*"))
	}
	// Hook-weight order: the ServiceAccount and ClusterRole, then the binding.
	if want := []string{"ServiceAccount", "ClusterRole", "ClusterRoleBinding"}; !slices.Equal(kinds, want) {
		t.Errorf("hook objects %v, want %v", kinds, want)
	}
	if h.serviceAccount != "fleetlet-cleanup" {
		t.Errorf("hook ServiceAccount %q", h.serviceAccount)
	}
	if want := []string{"cleanup", "--cluster-name=" + c.Name}; !slices.Equal(h.args, want) {
		t.Errorf("cleanup args %v, want %v", h.args, want)
	}
	if h.deadline != 300*time.Second {
		t.Errorf("deadline %s, want the Job's activeDeadlineSeconds 300s", h.deadline)
	}
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
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("parseCleanupHook = %v, want an error with %q", err, tc.want)
			}
		})
	}
}

func TestValidateNeedsHelm(t *testing.T) {
	bin := fakeBinDir(t, "exit 0")
	if err := os.Remove(filepath.Join(bin, binHelm)); err != nil {
		t.Fatal(err)
	}
	err := Options{Dir: "d", BinDir: bin}.Defaulted().Validate()
	if err == nil || !strings.Contains(err.Error(), "binary helm not found") || !strings.Contains(err.Error(), "make build") {
		t.Errorf("Validate without helm = %v", err)
	}
	if err := (Options{Dir: "d", BinDir: bin, NoFleetlet: true}).Defaulted().Validate(); err != nil {
		t.Errorf("Validate without helm and without fleetlet = %v", err)
	}
}

func TestChartValuesPerCluster(t *testing.T) {
	c := &ClusterState{Name: "cluster-3", Ports: Ports{FleetletWebhook: 4242}}
	v := chartValues(c)
	if v["clusterName"] != "cluster-3" || v["localProcesses"] != true {
		t.Errorf("values %v", v)
	}
	if got := v["webhook"].(map[string]any)["url"]; got != "https://127.0.0.1:"+strconv.Itoa(4242)+"/mutate-pods" {
		t.Errorf("webhook.url %v", got)
	}
}

func bufioReader(b []byte) *bufio.Reader { return bufio.NewReader(bytes.NewReader(b)) }

func typeName(v any) string { return fmt.Sprintf("%T", v) }
