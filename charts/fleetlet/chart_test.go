// Package chart_test checks the fleetlet Helm chart with the helm binary
// built in bin/ (FLEETLET_BIN_DIR): lint, rendering, the values schema's
// refusals as a user sees them, the templates that matter (webhook, RBAC,
// hooks, URL mode, scheduler configuration), the CRDs against the generated
// ones, and, against a real kube-apiserver, that the API server accepts the
// rendered chart and that its admission policies hold.
package chart_test

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/kubernetes/pkg/scheduler/apis/config/validation"
	"sigs.k8s.io/yaml"

	"github.com/fleetlet/fleetlet/config"
	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
	"github.com/fleetlet/fleetlet/pkg/source/webhook"
	"github.com/fleetlet/fleetlet/pkg/target/access"
	"github.com/fleetlet/fleetlet/pkg/target/candidate"
	"github.com/fleetlet/fleetlet/pkg/target/summary"
	"github.com/fleetlet/fleetlet/pkg/testenv"
)

const (
	releaseName = "fl"
	releaseNS   = "fleetlet-system"
	clusterName = "cluster-1"
	managerSA   = "fl-fleetlet-manager"
	schedulerSA = "fl-fleetlet-scheduler"
)

// helmBin returns bin/helm, failing the test when it is missing (skipping in
// -short mode).
func helmBin(t *testing.T) string {
	t.Helper()
	return filepath.Join(testenv.RequireBinaries(t, "helm"), "helm")
}

func chartDir(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// helm runs helm with args and returns stdout, or stderr as the error.
func helm(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(helmBin(t), args...)
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+t.TempDir(), "HELM_CONFIG_HOME="+t.TempDir(), "HELM_DATA_HOME="+t.TempDir())
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("helm %s: %w: %s", strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String(), nil
}

// valuesFile writes values (YAML) to a file for -f.
func valuesFile(t *testing.T, values string) string {
	t.Helper()
	f := filepath.Join(t.TempDir(), "values.yaml")
	if err := os.WriteFile(f, []byte(values), 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

// render runs helm template with the base values plus the given ones.
func render(t *testing.T, values string) (string, error) {
	t.Helper()
	args := []string{"template", releaseName, chartDir(t), "--namespace", releaseNS, "--set", "clusterName=" + clusterName}
	if values != "" {
		args = append(args, "-f", valuesFile(t, values))
	}
	return helm(t, args...)
}

var scheme = func() *runtime.Scheme {
	s := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(s))
	utilruntime.Must(apiextensionsv1.AddToScheme(s))
	utilruntime.Must(v1alpha1.AddToScheme(s))
	return s
}()

// manifests decodes every document of a rendering: kinds the scheme knows
// into their types, strictly (an unknown field fails), the others
// (cert-manager, prometheus-operator) as unstructured.
type manifests []runtime.Object

func decode(t *testing.T, out string) manifests {
	t.Helper()
	strict := serializer.NewCodecFactory(scheme, serializer.EnableStrict).UniversalDeserializer()
	r := utilyaml.NewYAMLReader(bufio.NewReader(strings.NewReader(out)))
	var objs manifests
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if len(bytes.TrimSpace(stripComments(doc))) == 0 {
			continue
		}
		u := &unstructured.Unstructured{}
		if err := yaml.Unmarshal(doc, &u.Object); err != nil {
			t.Fatalf("a rendered document is not YAML: %v\n%s", err, doc)
		}
		if u.GetKind() == "" || u.GetAPIVersion() == "" || u.GetName() == "" {
			t.Fatalf("a rendered document has no kind, apiVersion or name:\n%s", doc)
		}
		if !scheme.Recognizes(u.GroupVersionKind()) {
			objs = append(objs, u)
			continue
		}
		obj, _, err := strict.Decode(doc, nil, nil)
		if err != nil {
			t.Fatalf("decoding %s %s: %v", u.GetKind(), u.GetName(), err)
		}
		objs = append(objs, obj)
	}
	return objs
}

func stripComments(doc []byte) []byte {
	var out []byte
	for _, line := range bytes.Split(doc, []byte("\n")) {
		if !bytes.HasPrefix(bytes.TrimSpace(line), []byte("#")) {
			out = append(append(out, line...), '\n')
		}
	}
	return out
}

// find returns the object of type T named name (and namespace, if given).
func find[T runtime.Object](t *testing.T, objs manifests, name string) T {
	t.Helper()
	for _, o := range objs {
		if typed, ok := o.(T); ok {
			if m, ok := any(typed).(interface{ GetName() string }); ok && m.GetName() == name {
				return typed
			}
		}
	}
	var zero T
	t.Fatalf("no %T named %s in the rendering", zero, name)
	return zero
}

func has[T runtime.Object](objs manifests, name string) bool {
	for _, o := range objs {
		if typed, ok := o.(T); ok {
			if m, ok := any(typed).(interface{ GetName() string }); ok && m.GetName() == name {
				return true
			}
		}
	}
	return false
}

func mustRender(t *testing.T, values string) manifests {
	t.Helper()
	out, err := render(t, values)
	if err != nil {
		t.Fatal(err)
	}
	return decode(t, out)
}

func TestLint(t *testing.T) {
	for _, values := range []string{"", "localProcesses: true\nwebhook:\n  url: https://127.0.0.1:9443/mutate-pods\n", "webhook:\n  certManager:\n    enabled: true\nserviceMonitor:\n  enabled: true\n"} {
		args := []string{"lint", "--strict", chartDir(t), "--set", "clusterName=" + clusterName}
		if values != "" {
			args = append(args, "-f", valuesFile(t, values))
		}
		if out, err := helm(t, args...); err != nil {
			t.Errorf("helm lint with %q: %v\n%s", values, err, out)
		}
	}
}

func TestRenderDefaults(t *testing.T) {
	objs := mustRender(t, "")
	kinds := map[string]int{}
	for _, o := range objs {
		kinds[o.GetObjectKind().GroupVersionKind().Kind]++
	}
	for kind, n := range map[string]int{
		"CustomResourceDefinition": 6, "Deployment": 2, "PodDisruptionBudget": 2, "MutatingWebhookConfiguration": 1,
		"PriorityClass": 1, "ValidatingAdmissionPolicy": 10, "ValidatingAdmissionPolicyBinding": 10, "Job": 1,
	} {
		if kinds[kind] != n {
			t.Errorf("%d %s rendered, want %d", kinds[kind], kind, n)
		}
	}
	manager := find[*appsv1.Deployment](t, objs, managerSA)
	if *manager.Spec.Replicas != 2 {
		t.Errorf("manager replicas = %d, want 2", *manager.Spec.Replicas)
	}
	c := manager.Spec.Template.Spec.Containers[0]
	for _, want := range []string{
		"--cluster-name=" + clusterName, "--leader-elect=true", "--follow-allowed-kinds=ConfigMap,Secret,ServiceAccount",
		"--webhook-cert-rotation=true", "--webhook-service-name=fleetlet-webhook", "--election-deadline=2s",
		"--delegate-recreate-delay=1m", "--target-probe-timeout=5s", "--webhook-timeout=10s",
	} {
		if !slices.Contains(c.Args, want) {
			t.Errorf("manager args %v lack %s", c.Args, want)
		}
	}
	sc := c.SecurityContext
	if sc == nil || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation || !*sc.ReadOnlyRootFilesystem || !*sc.RunAsNonRoot ||
		len(sc.Capabilities.Drop) != 1 || sc.Capabilities.Drop[0] != "ALL" || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("manager security context is not restricted: %+v", sc)
	}
	if c.ReadinessProbe == nil || c.LivenessProbe == nil {
		t.Error("manager has no probes")
	}
	if manager.Spec.Template.Annotations["checksum/config"] == "" {
		t.Error("manager pods have no checksum/config annotation")
	}
	// A change of a setting changes the checksum, so the pods restart.
	other := find[*appsv1.Deployment](t, mustRender(t, "manager:\n  timeouts:\n    electionDeadline: 3s\n"), managerSA)
	if other.Spec.Template.Annotations["checksum/config"] == manager.Spec.Template.Annotations["checksum/config"] {
		t.Error("the checksum annotation did not change with the manager's settings")
	}
	scheduler := find[*appsv1.Deployment](t, objs, schedulerSA)
	if scheduler.Spec.Template.Annotations["checksum/config"] == "" {
		t.Error("scheduler pods have no checksum/config annotation")
	}
	if scheduler.Spec.Template.Spec.ServiceAccountName != schedulerSA || manager.Spec.Template.Spec.ServiceAccountName != managerSA {
		t.Error("the Deployments do not run as their ServiceAccounts")
	}
	pc := find[*schedulingv1.PriorityClass](t, objs, "fleetlet-candidate")
	want := summary.CandidatePriorityClass()
	if pc.Value != want.Value || *pc.PreemptionPolicy != *want.PreemptionPolicy || pc.GlobalDefault != want.GlobalDefault || pc.Description != want.Description {
		t.Errorf("PriorityClass %+v differs from what the manager ensures %+v", pc, want)
	}
	for k, v := range want.Labels {
		if pc.Labels[k] != v {
			t.Errorf("PriorityClass label %s = %q, want %q", k, pc.Labels[k], v)
		}
	}
}

// The chart's CRDs are the generated ones: files/crds is a copy of
// config/crd/bases, and the rendered CRDs only add labels and the keep policy.
func TestCRDsAreTheGenerated(t *testing.T) {
	gen, err := filepath.Glob("../../config/crd/bases/*.yaml")
	if err != nil || len(gen) == 0 {
		t.Fatalf("no generated CRDs: %v", err)
	}
	copies, _ := filepath.Glob("files/crds/*.yaml")
	if len(copies) != len(gen) {
		t.Errorf("files/crds has %d CRDs, config/crd/bases %d: run hack/generate.sh", len(copies), len(gen))
	}
	for _, g := range gen {
		want, _ := os.ReadFile(g)
		got, err := os.ReadFile(filepath.Join("files/crds", filepath.Base(g)))
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("files/crds/%s differs from config/crd/bases: run hack/generate.sh", filepath.Base(g))
		}
	}
	objs := mustRender(t, "")
	crds, err := config.CRDs()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range crds {
		got := find[*apiextensionsv1.CustomResourceDefinition](t, objs, want.Name)
		if !equality.Semantic.DeepEqual(got.Spec, want.Spec) {
			t.Errorf("rendered CRD %s has another spec than the generated one", want.Name)
		}
		if got.Annotations["helm.sh/resource-policy"] != "keep" {
			t.Errorf("CRD %s is not kept on uninstall", want.Name)
		}
	}
	objs = mustRender(t, "crds:\n  keep: false\n")
	if a := find[*apiextensionsv1.CustomResourceDefinition](t, objs, crds[0].Name).Annotations["helm.sh/resource-policy"]; a != "" {
		t.Errorf("crds.keep=false still renders resource-policy %q", a)
	}
}

// Each refusal a user can meet, with the message helm shows.
func TestValuesRefused(t *testing.T) {
	tests := []struct {
		name, values string
		want         []string
	}{
		{
			name:   "unknown value key",
			values: "manager:\n  replica: 3\n",
			want:   []string{"at '/manager'", "additional properties 'replica' not allowed"},
		},
		{
			name:   "a Secret namespace that is not a namespace name",
			values: "manager:\n  secretNamespaces: [Team_A]\n",
			want:   []string{"at '/manager/secretNamespaces/0'"},
		},
		{
			name:   "unknown top-level key",
			values: "sheduler: {}\n",
			want:   []string{"additional properties 'sheduler' not allowed"},
		},
		{
			name:   "another kind in extraResources",
			values: "scheduler:\n  extraResources:\n    - apiVersion: v1\n      kind: Secret\n      metadata: {name: s}\n",
			want:   []string{"at '/scheduler/extraResources/0/kind'", "value must be one of 'ConfigMap', 'ClusterRole'"},
		},
		{
			name:   "a namespace override",
			values: "scheduler:\n  extraResources:\n    - apiVersion: v1\n      kind: ConfigMap\n      metadata: {name: c, namespace: kube-system}\n",
			want:   []string{"at '/scheduler/extraResources/0/metadata'", "additional properties 'namespace' not allowed"},
		},
		{
			name: "a write verb",
			values: "scheduler:\n  extraResources:\n    - apiVersion: rbac.authorization.k8s.io/v1\n      kind: ClusterRole\n      metadata: {name: r}\n" +
				"      rules: [{apiGroups: [''], resources: [pods], verbs: [get, delete]}]\n",
			want: []string{"at '/scheduler/extraResources/0/rules/0/verbs/1'", "value must be one of 'get', 'list', 'watch'"},
		},
		{
			name: "a wildcard verb",
			values: "scheduler:\n  extraResources:\n    - apiVersion: rbac.authorization.k8s.io/v1\n      kind: ClusterRole\n      metadata: {name: r}\n" +
				"      rules: [{apiGroups: [''], resources: [pods], verbs: ['*']}]\n",
			want: []string{"value must be one of 'get', 'list', 'watch'"},
		},
		{
			name: "a second ClusterRole",
			values: "scheduler:\n  extraResources:\n" +
				"    - {apiVersion: rbac.authorization.k8s.io/v1, kind: ClusterRole, metadata: {name: one}, rules: [{apiGroups: [''], resources: [pods], verbs: [get]}]}\n" +
				"    - {apiVersion: rbac.authorization.k8s.io/v1, kind: ClusterRole, metadata: {name: two}, rules: [{apiGroups: [''], resources: [nodes], verbs: [list]}]}\n",
			want: []string{"at '/scheduler/extraResources'", "max 1 items required to match contains schema"},
		},
		{
			name:   "an aggregating ClusterRole",
			values: "scheduler:\n  extraResources:\n    - {apiVersion: rbac.authorization.k8s.io/v1, kind: ClusterRole, metadata: {name: r}, aggregationRule: {clusterRoleSelectors: [{}]}}\n",
			want:   []string{"additional properties 'aggregationRule' not allowed"},
		},
		{
			name:   "ClusterRole not named after the release",
			values: "scheduler:\n  extraResources:\n    - {apiVersion: rbac.authorization.k8s.io/v1, kind: ClusterRole, metadata: {name: admin}, rules: [{apiGroups: [''], resources: [pods], verbs: [get]}]}\n",
			want:   []string{"the extra ClusterRole is named after the release, fl-fleetlet-scheduler-extra, not admin"},
		},
		{
			name:   "ConfigMap with a ClusterRole's apiVersion",
			values: "scheduler:\n  extraResources:\n    - {apiVersion: rbac.authorization.k8s.io/v1, kind: ConfigMap, metadata: {name: c}}\n",
			want:   []string{"at '/scheduler/extraResources/0/apiVersion'"},
		},
		{
			name:   "a profile named fleetlet-candidate",
			values: "scheduler:\n  config:\n    profiles: [{schedulerName: fleetlet-candidate}]\n",
			want:   []string{"at '/scheduler/config/profiles/0/schedulerName'"},
		},
		{
			name:   "a bad duration",
			values: "manager:\n  timeouts:\n    electionDeadline: soon\n",
			want:   []string{"at '/manager/timeouts/electionDeadline'"},
		},
		{
			name:   "a bad follow kind",
			values: "follow:\n  allowedKinds: [configmaps]\n",
			want:   []string{"at '/follow/allowedKinds/0'"},
		},
		{
			name:   "a webhook timeout beyond 30s",
			values: "webhook:\n  timeout: 45s\n",
			want:   []string{"at '/webhook/timeout'"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := render(t, tc.values)
			if err == nil {
				t.Fatalf("helm template accepted:\n%s", tc.values)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error lacks %q:\n%v", w, err)
				}
			}
		})
	}
	if _, err := helm(t, "template", releaseName, chartDir(t)); err == nil || !strings.Contains(err.Error(), "clusterName is required") {
		t.Errorf("rendering without clusterName = %v, want the clusterName is required message", err)
	}
}

func TestSchedulerExtraResources(t *testing.T) {
	objs := mustRender(t, `scheduler:
  extraResources:
    - apiVersion: v1
      kind: ConfigMap
      metadata: {name: scoring, labels: {team: a}}
      data: {weights: "1"}
    - apiVersion: rbac.authorization.k8s.io/v1
      kind: ClusterRole
      metadata: {name: fl-fleetlet-scheduler-extra}
      rules: [{apiGroups: ["example.com"], resources: ["quotas"], verbs: [get, list, watch]}]
`)
	cm := find[*corev1.ConfigMap](t, objs, "scoring")
	if cm.Namespace != releaseNS || cm.Data["weights"] != "1" || cm.Labels["team"] != "a" || cm.Labels["app.kubernetes.io/instance"] != releaseName {
		t.Errorf("extra ConfigMap = %+v", cm.ObjectMeta)
	}
	role := find[*rbacv1.ClusterRole](t, objs, "fl-fleetlet-scheduler-extra")
	if len(role.Rules) != 1 || role.Rules[0].Resources[0] != "quotas" {
		t.Errorf("extra ClusterRole rules = %+v", role.Rules)
	}
	binding := find[*rbacv1.ClusterRoleBinding](t, objs, "fl-fleetlet-scheduler-extra")
	if binding.RoleRef.Name != role.Name || len(binding.Subjects) != 1 || binding.Subjects[0].Name != schedulerSA || binding.Subjects[0].Namespace != releaseNS {
		t.Errorf("extra ClusterRole is bound to %+v, want only the scheduler's ServiceAccount", binding.Subjects)
	}
	// The template refuses what the schema refuses, for a chart rendered
	// without it (--skip-schema-validation).
	for _, tc := range []struct{ values, want string }{
		{"scheduler:\n  extraResources:\n    - {apiVersion: v1, kind: Secret, metadata: {name: s}}\n", `kind "Secret" is not allowed`},
		{"scheduler:\n  extraResources:\n    - {apiVersion: v1, kind: ConfigMap, metadata: {name: c, namespace: x}}\n", "metadata.namespace may not be given"},
		{"scheduler:\n  extraResources:\n    - {apiVersion: rbac.authorization.k8s.io/v1, kind: ClusterRole, metadata: {name: fl-fleetlet-scheduler-extra}, rules: [{verbs: [create]}]}\n", `verb "create" is not allowed`},
		{"scheduler:\n  extraResources:\n    - {apiVersion: rbac.authorization.k8s.io/v1, kind: ClusterRole, metadata: {}}\n    - {apiVersion: rbac.authorization.k8s.io/v1, kind: ClusterRole, metadata: {}}\n", "only one extra ClusterRole is allowed"},
	} {
		_, err := helm(t, "template", releaseName, chartDir(t), "--namespace", releaseNS, "--set", "clusterName="+clusterName,
			"--skip-schema-validation", "-f", valuesFile(t, tc.values))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("rendering %s without the schema = %v, want %q", tc.values, err, tc.want)
		}
	}
}

func TestWebhookConfiguration(t *testing.T) {
	objs := mustRender(t, "webhook:\n  excludedNamespaces: [monitoring]\n")
	mwc := find[*admissionregistrationv1.MutatingWebhookConfiguration](t, objs, "fleetlet-proxy-pods")
	if len(mwc.Webhooks) != 2 {
		t.Fatalf("%d webhooks, want 2", len(mwc.Webhooks))
	}
	// The chart's is pkg/source/webhook's, with a service reference.
	want := webhook.MutatingWebhookConfiguration(webhook.ConfigurationOptions{FleetletNamespace: releaseNS})
	for i, w := range mwc.Webhooks {
		b := want.Webhooks[i]
		if w.Name != b.Name || *w.FailurePolicy != *b.FailurePolicy || *w.ReinvocationPolicy != *b.ReinvocationPolicy ||
			!slices.Equal(w.Rules[0].Resources, b.Rules[0].Resources) || len(w.MatchConditions) != len(b.MatchConditions) {
			t.Errorf("webhook %d: %s %s %s %v (%d conditions), want pkg/source/webhook's %s %s %s %v (%d)", i,
				w.Name, *w.FailurePolicy, *w.ReinvocationPolicy, w.Rules[0].Resources, len(w.MatchConditions),
				b.Name, *b.FailurePolicy, *b.ReinvocationPolicy, b.Rules[0].Resources, len(b.MatchConditions))
		}
		if svc := w.ClientConfig.Service; svc == nil || *svc.Path != "/mutate-pods" || !slices.Equal(w.NamespaceSelector.MatchExpressions[0].Values, mwc.Webhooks[0].NamespaceSelector.MatchExpressions[0].Values) {
			t.Errorf("webhook %s: clientConfig %+v, namespaceSelector %+v; want the first's", w.Name, w.ClientConfig, w.NamespaceSelector)
		}
	}
	w := mwc.Webhooks[0]
	if w.Name != "proxy-pods.multicluster.fleetlet.io" || *w.FailurePolicy != admissionregistrationv1.Fail || *w.ReinvocationPolicy != admissionregistrationv1.IfNeededReinvocationPolicy {
		t.Errorf("webhook %s: failurePolicy %s, reinvocation %s", w.Name, *w.FailurePolicy, *w.ReinvocationPolicy)
	}
	if len(w.Rules) != 1 || !slices.Equal(w.Rules[0].Operations, []admissionregistrationv1.OperationType{admissionregistrationv1.Create}) ||
		!slices.Equal(w.Rules[0].Resources, []string{"pods"}) || !slices.Equal(w.Rules[0].APIGroups, []string{""}) {
		t.Errorf("rules = %+v, want pods CREATE only", w.Rules)
	}
	sel := w.NamespaceSelector
	if sel.MatchLabels["multicluster.fleetlet.io/enabled"] != "true" {
		t.Errorf("namespaceSelector %+v does not select enabled namespaces", sel)
	}
	if len(sel.MatchExpressions) != 1 || sel.MatchExpressions[0].Key != "kubernetes.io/metadata.name" || sel.MatchExpressions[0].Operator != "NotIn" ||
		!slices.Equal(sel.MatchExpressions[0].Values, []string{"kube-system", releaseNS, "monitoring"}) {
		t.Errorf("namespaceSelector exclusions = %+v, want kube-system, %s and monitoring", sel.MatchExpressions, releaseNS)
	}
	svc := w.ClientConfig.Service
	if svc == nil || svc.Name != "fleetlet-webhook" || svc.Namespace != releaseNS || *svc.Path != "/mutate-pods" || w.ClientConfig.URL != nil {
		t.Errorf("clientConfig = %+v, want the Service", w.ClientConfig)
	}
	if len(w.MatchConditions) != 4 {
		t.Errorf("%d match conditions, want the 4 of pkg/source/webhook", len(w.MatchConditions))
	}
	if _, ok := mwc.Annotations["cert-manager.io/inject-ca-from"]; ok {
		t.Error("cert-manager annotation without certManager.enabled")
	}
	find[*corev1.Service](t, objs, "fleetlet-webhook")

	// cert-manager: the cainjector annotation names the Certificate, the
	// manager reads the certificate from the Secret, no rotation.
	objs = mustRender(t, "webhook:\n  certManager:\n    enabled: true\n")
	mwc = find[*admissionregistrationv1.MutatingWebhookConfiguration](t, objs, "fleetlet-proxy-pods")
	if got := mwc.Annotations["cert-manager.io/inject-ca-from"]; got != releaseNS+"/fl-fleetlet-webhook" {
		t.Errorf("inject-ca-from = %q", got)
	}
	cert := find[*unstructured.Unstructured](t, objs, "fl-fleetlet-webhook")
	if cert.GetKind() != "Certificate" {
		t.Errorf("fl-fleetlet-webhook is a %s", cert.GetKind())
	}
	args := find[*appsv1.Deployment](t, objs, managerSA).Spec.Template.Spec.Containers[0].Args
	if !slices.Contains(args, "--webhook-cert-rotation=false") || !slices.Contains(args, "--webhook-cert-dir=/certs") {
		t.Errorf("with cert-manager the manager args are %v", args)
	}
}

// URL mode with local processes: the configuration calls the URL, and
// nothing that runs a pod is rendered, while the rest is.
func TestURLModeAndLocalProcesses(t *testing.T) {
	const url = "https://127.0.0.1:9443/mutate-pods"
	objs := mustRender(t, "localProcesses: true\nwebhook:\n  url: "+url+"\n")
	mwc := find[*admissionregistrationv1.MutatingWebhookConfiguration](t, objs, "fleetlet-proxy-pods")
	cc := mwc.Webhooks[0].ClientConfig
	if cc.URL == nil || *cc.URL != url || cc.Service != nil {
		t.Errorf("clientConfig = %+v, want url %s", cc, url)
	}
	for _, o := range objs {
		switch o.(type) {
		case *appsv1.Deployment, *batchv1.Job, *corev1.Service:
			t.Errorf("localProcesses renders %T %s", o, o.(interface{ GetName() string }).GetName())
		}
	}
	for _, name := range []string{managerSA, schedulerSA} {
		find[*corev1.ServiceAccount](t, objs, name)
	}
	find[*rbacv1.ClusterRole](t, objs, managerSA+"-source-side")
	find[*rbacv1.ClusterRole](t, objs, "fleetlet-source")
	find[*schedulingv1.PriorityClass](t, objs, "fleetlet-candidate")
	find[*admissionregistrationv1.ValidatingAdmissionPolicy](t, objs, "fleetlet-pod-annotations")
	find[*corev1.ConfigMap](t, objs, schedulerSA+"-config")
	// In URL mode the manager may create the configuration.
	webhookRole := find[*rbacv1.ClusterRole](t, objs, managerSA+"-webhook")
	if !allows(webhookRole.Rules, "admissionregistration.k8s.io", "mutatingwebhookconfigurations", "create", "") {
		t.Error("in URL mode the manager cannot create the MutatingWebhookConfiguration")
	}
	// manager.enabled=false alone drops the manager's Deployment only.
	objs = mustRender(t, "manager:\n  enabled: false\n")
	if has[*appsv1.Deployment](objs, managerSA) || !has[*appsv1.Deployment](objs, schedulerSA) || !has[*rbacv1.ClusterRole](objs, managerSA+"-target-side") {
		t.Error("manager.enabled=false should drop the manager Deployment and keep its RBAC and the scheduler")
	}
}

// allows reports whether rules grant verb on group/resource (name "": any).
func allows(rules []rbacv1.PolicyRule, group, resource, verb, name string) bool {
	for _, r := range rules {
		if slices.Contains(r.APIGroups, group) && slices.Contains(r.Resources, resource) && slices.Contains(r.Verbs, verb) &&
			(len(r.ResourceNames) == 0 || (name != "" && slices.Contains(r.ResourceNames, name))) {
			return true
		}
	}
	return false
}

// rulesFor gathers the rules granted to a ServiceAccount by the rendered
// bindings (ClusterRoles and Roles, in any namespace).
func rulesFor(t *testing.T, objs manifests, sa string) (cluster []rbacv1.PolicyRule, byNamespace map[string][]rbacv1.PolicyRule) {
	t.Helper()
	byNamespace = map[string][]rbacv1.PolicyRule{}
	bound := func(subjects []rbacv1.Subject) bool {
		return slices.ContainsFunc(subjects, func(s rbacv1.Subject) bool {
			return s.Kind == "ServiceAccount" && s.Name == sa && s.Namespace == releaseNS
		})
	}
	for _, o := range objs {
		switch b := o.(type) {
		case *rbacv1.ClusterRoleBinding:
			if bound(b.Subjects) && has[*rbacv1.ClusterRole](objs, b.RoleRef.Name) {
				cluster = append(cluster, find[*rbacv1.ClusterRole](t, objs, b.RoleRef.Name).Rules...)
			}
		case *rbacv1.RoleBinding:
			if !bound(b.Subjects) {
				continue
			}
			for _, o2 := range objs {
				if r, ok := o2.(*rbacv1.Role); ok && r.Name == b.RoleRef.Name && r.Namespace == b.Namespace && b.RoleRef.Kind == "Role" {
					byNamespace[b.Namespace] = append(byNamespace[b.Namespace], r.Rules...)
				}
			}
		}
	}
	return cluster, byNamespace
}

func TestManagerRBAC(t *testing.T) {
	objs := mustRender(t, "manager:\n  rbac:\n    impersonate:\n      - {namespace: team-a, name: fleetlet-source-cluster-2}\n      - {namespace: team-a, name: fleetlet-source-cluster-3}\n")
	cluster, ns := rulesFor(t, objs, managerSA)
	type need struct{ group, resource, verb, name string }
	for _, n := range []need{
		// source side
		{"multicluster.fleetlet.io", "targets", "watch", ""}, {"multicluster.fleetlet.io", "clustertargets", "list", ""},
		{"multicluster.fleetlet.io", "targets/status", "patch", ""}, {"", "secrets", "get", ""}, {"", "secrets", "watch", ""},
		{"", "pods", "patch", ""}, {"", "pods", "delete", ""}, {"", "pods/status", "update", ""},
		{"", "nodes", "create", ""}, {"", "nodes", "delete", ""}, {"", "nodes/status", "patch", ""},
		{"events.k8s.io", "events", "create", ""}, {"events.k8s.io", "events", "patch", ""},
		{"", "events", "list", ""}, {"", "events", "watch", ""},
		{"", "configmaps", "watch", ""}, {"", "serviceaccounts", "watch", ""}, {"", "secrets", "get", ""},
		// target side
		{"multicluster.fleetlet.io", "clustersummaries", "create", ""}, {"multicluster.fleetlet.io", "clustersummaries/status", "patch", ""},
		{"multicluster.fleetlet.io", "podchaperons", "watch", ""}, {"multicluster.fleetlet.io", "podchaperons/status", "patch", ""},
		{"multicluster.fleetlet.io", "sources", "patch", ""}, {"multicluster.fleetlet.io", "clustersources/status", "patch", ""},
		{"", "serviceaccounts", "create", ""}, {"rbac.authorization.k8s.io", "rolebindings", "create", ""},
		{"rbac.authorization.k8s.io", "clusterrolebindings", "delete", ""}, {"rbac.authorization.k8s.io", "roles", "update", ""},
		{"rbac.authorization.k8s.io", "clusterroles", "bind", "fleetlet-source"}, {"rbac.authorization.k8s.io", "clusterroles", "bind", "fleetlet-source-reader"},
		{"rbac.authorization.k8s.io", "clusterroles", "bind", "fleetlet-source-namespaces"},
		{"rbac.authorization.k8s.io", "clusterroles", "get", "fleetlet-source"},
		{"scheduling.k8s.io", "priorityclasses", "get", "fleetlet-candidate"}, {"scheduling.k8s.io", "priorityclasses", "create", ""},
		{"coordination.k8s.io", "leases", "watch", ""},
		{"", "pods", "impersonate-on:serviceaccount:create", ""},
		// webhook
		{"admissionregistration.k8s.io", "mutatingwebhookconfigurations", "update", "fleetlet-proxy-pods"},
		{"", "nodes", "watch", ""},
	} {
		if !allows(cluster, n.group, n.resource, n.verb, n.name) {
			t.Errorf("the manager may not %s %s.%s %s", n.verb, n.resource, n.group, n.name)
		}
	}
	for _, n := range []need{
		{"coordination.k8s.io", "leases", "update", "fleetlet-manager"}, {"coordination.k8s.io", "leases", "create", ""},
		{"", "secrets", "create", ""}, {"", "secrets", "update", "fleetlet-webhook-cert"},
	} {
		if !allows(ns[releaseNS], n.group, n.resource, n.verb, n.name) {
			t.Errorf("the manager may not %s %s.%s %s in %s", n.verb, n.resource, n.group, n.name, releaseNS)
		}
	}
	if !allows(ns["kube-node-lease"], "coordination.k8s.io", "leases", "update", "") {
		t.Error("the manager may not renew the virtual nodes' Leases")
	}
	// Impersonation: exactly the listed ServiceAccounts, in their namespace.
	if !allows(ns["team-a"], "authentication.k8s.io", "serviceaccounts", "impersonate:serviceaccount", "fleetlet-source-cluster-2") ||
		!allows(ns["team-a"], "authentication.k8s.io", "serviceaccounts", "impersonate:serviceaccount", "fleetlet-source-cluster-3") {
		t.Error("the manager may not impersonate the listed source ServiceAccounts")
	}
	if allows(ns["team-a"], "authentication.k8s.io", "serviceaccounts", "impersonate:serviceaccount", "default") {
		t.Error("the manager may impersonate a ServiceAccount that is not listed")
	}
	// Never more than needed: no wildcard, no write on ClusterRoles but the
	// two by name, no impersonation cluster-wide, no write on another
	// webhook configuration.
	for _, sa := range []string{managerSA, schedulerSA} {
		c, n := rulesFor(t, objs, sa)
		all := c
		for _, r := range n {
			all = append(all, r...)
		}
		for _, r := range all {
			for _, list := range [][]string{r.APIGroups, r.Resources, r.Verbs, r.ResourceNames} {
				if slices.Contains(list, "*") {
					t.Errorf("%s has a wildcard rule: %+v", sa, r)
				}
			}
		}
	}
	for _, r := range cluster {
		if slices.Contains(r.Resources, "clusterroles") && len(r.ResourceNames) == 0 {
			t.Errorf("the manager has a rule on every ClusterRole: %+v", r)
		}
		if slices.Contains(r.Resources, "serviceaccounts") && slices.ContainsFunc(r.Verbs, func(v string) bool { return strings.HasPrefix(v, "impersonate") }) {
			t.Errorf("the manager may impersonate ServiceAccounts cluster-wide: %+v", r)
		}
		if slices.Contains(r.Resources, "mutatingwebhookconfigurations") && slices.Contains(r.Verbs, "update") && len(r.ResourceNames) == 0 {
			t.Errorf("the manager may update any webhook configuration: %+v", r)
		}
	}
	// The source ClusterRoles are what the manager ensures.
	for name, want := range map[string][]rbacv1.PolicyRule{"fleetlet-source": access.SourceRules(), "fleetlet-source-reader": access.SourceReaderRules(), "fleetlet-source-namespaces": access.SourceNamespacesRules()} {
		got := find[*rbacv1.ClusterRole](t, objs, name)
		if !equality.Semantic.DeepEqual(got.Rules, want) {
			t.Errorf("ClusterRole %s rules differ from pkg/target/access's:\ngot  %+v\nwant %+v", name, got.Rules, want)
		}
		if got.Labels[access.LabelManagedBy] != access.ManagedBy {
			t.Errorf("ClusterRole %s lacks %s=%s", name, access.LabelManagedBy, access.ManagedBy)
		}
	}
	// Legacy impersonation: the impersonate verb on the listed ones only.
	objs = mustRender(t, "manager:\n  rbac:\n    impersonationMode: legacy\n    impersonate: [{namespace: b, name: fleetlet-source-x}]\n")
	cluster, ns = rulesFor(t, objs, managerSA)
	if !allows(ns["b"], "", "serviceaccounts", "impersonate", "fleetlet-source-x") || allows(cluster, "", "pods", "impersonate-on:serviceaccount:create", "") {
		t.Error("legacy impersonation is not granted as documented")
	}
}

// manager.secretNamespaces: no cluster-wide right on Secrets, Roles in the
// listed namespaces and the release namespace, and the manager told so.
func TestManagerSecretNamespaces(t *testing.T) {
	objs := mustRender(t, "manager:\n  secretNamespaces: [team-a, team-b]\n")
	cluster, ns := rulesFor(t, objs, managerSA)
	for _, verb := range []string{"get", "list", "watch"} {
		if allows(cluster, "", "secrets", verb, "") {
			t.Errorf("the manager may %s Secrets cluster-wide", verb)
		}
		for _, n := range []string{"team-a", "team-b", releaseNS} {
			if !allows(ns[n], "", "secrets", verb, "") {
				t.Errorf("the manager may not %s Secrets in %s", verb, n)
			}
		}
		if allows(ns["team-c"], "", "secrets", verb, "") {
			t.Errorf("the manager may %s Secrets in a namespace not listed", verb)
		}
	}
	args := find[*appsv1.Deployment](t, objs, managerSA).Spec.Template.Spec.Containers[0].Args
	if !slices.Contains(args, "--secret-namespaces=team-a,team-b") {
		t.Errorf("manager args %v lack --secret-namespaces=team-a,team-b", args)
	}
	// By default: the cluster-wide read, and no such flag.
	objs = mustRender(t, "")
	cluster, _ = rulesFor(t, objs, managerSA)
	if !allows(cluster, "", "secrets", "watch", "") {
		t.Error("by default the manager may not watch Secrets in every namespace")
	}
	if args := find[*appsv1.Deployment](t, objs, managerSA).Spec.Template.Spec.Containers[0].Args; slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, "--secret-namespaces") }) {
		t.Errorf("manager args %v have --secret-namespaces by default", args)
	}
}

func TestSchedulerRBAC(t *testing.T) {
	objs := mustRender(t, "")
	cluster, ns := rulesFor(t, objs, schedulerSA)
	for _, verb := range []string{"get", "list", "watch", "patch"} {
		if !allows(cluster, "multicluster.fleetlet.io", "podchaperons", verb, "") {
			t.Errorf("the scheduler may not %s podchaperons", verb)
		}
	}
	if !allows(ns[releaseNS], "coordination.k8s.io", "leases", "update", "fleetlet-candidate-scheduler") {
		t.Error("the scheduler may not renew its Lease")
	}
	var upstream []string
	for _, o := range objs {
		if b, ok := o.(*rbacv1.ClusterRoleBinding); ok && slices.ContainsFunc(b.Subjects, func(s rbacv1.Subject) bool { return s.Name == schedulerSA }) {
			upstream = append(upstream, b.RoleRef.Name)
		}
	}
	for _, want := range []string{"system:kube-scheduler", "system:volume-scheduler"} {
		if !slices.Contains(upstream, want) {
			t.Errorf("the scheduler is not bound to %s (bound to %v)", want, upstream)
		}
	}
}

func TestCleanupHook(t *testing.T) {
	objs := mustRender(t, "")
	const name = "fl-fleetlet-cleanup"
	hooked := []interface {
		GetAnnotations() map[string]string
		GetName() string
	}{
		find[*batchv1.Job](t, objs, name),
		find[*corev1.ServiceAccount](t, objs, name),
		find[*rbacv1.ClusterRole](t, objs, name),
		find[*rbacv1.ClusterRoleBinding](t, objs, name),
	}
	weights := map[string]int{}
	for _, o := range hooked {
		a := o.GetAnnotations()
		if a["helm.sh/hook"] != "post-delete" {
			t.Errorf("%T %s: helm.sh/hook = %q, want post-delete", o, o.GetName(), a["helm.sh/hook"])
		}
		if p := a["helm.sh/hook-delete-policy"]; !strings.Contains(p, "hook-succeeded") || !strings.Contains(p, "before-hook-creation") {
			t.Errorf("%T %s: hook-delete-policy = %q", o, o.GetName(), p)
		}
		w, err := strconv.Atoi(a["helm.sh/hook-weight"])
		if err != nil {
			t.Errorf("%T %s: hook-weight %q", o, o.GetName(), a["helm.sh/hook-weight"])
		}
		weights[fmt.Sprintf("%T", o)] = w
	}
	// The ServiceAccount and RBAC exist before the Job runs.
	if job := weights["*v1.Job"]; weights["*v1.ServiceAccount"] >= job || weights["*v1.ClusterRole"] >= job || weights["*v1.ClusterRoleBinding"] >= job {
		t.Errorf("hook weights %v: the Job must come last", weights)
	}
	job := find[*batchv1.Job](t, objs, name)
	spec := job.Spec.Template.Spec
	if spec.ServiceAccountName != name || spec.Containers[0].Args[0] != "cleanup" || spec.RestartPolicy != corev1.RestartPolicyNever {
		t.Errorf("cleanup Job: serviceAccount %s, args %v", spec.ServiceAccountName, spec.Containers[0].Args)
	}
	if !slices.Contains(spec.Containers[0].Args, "--cluster-name="+clusterName) {
		t.Errorf("cleanup Job args %v: want --cluster-name=%s, so that only this cluster's chaperons are deleted in its targets", spec.Containers[0].Args, clusterName)
	}
	role := find[*rbacv1.ClusterRole](t, objs, name)
	for _, n := range []struct{ group, resource, verb, name string }{
		{"", "pods", "list", ""}, {"", "pods", "patch", ""}, {"", "pods", "delete", ""}, {"", "nodes", "list", ""}, {"", "nodes", "delete", ""},
		{"rbac.authorization.k8s.io", "clusterroles", "delete", "fleetlet-source"}, {"scheduling.k8s.io", "priorityclasses", "delete", "fleetlet-candidate"},
		{"multicluster.fleetlet.io", "podchaperons", "list", ""}, {"multicluster.fleetlet.io", "podchaperons", "delete", ""},
		{"multicluster.fleetlet.io", "targets", "get", ""}, {"multicluster.fleetlet.io", "clustertargets", "list", ""}, {"", "secrets", "get", ""},
	} {
		if !allows(role.Rules, n.group, n.resource, n.verb, n.name) {
			t.Errorf("cleanup may not %s %s.%s %s", n.verb, n.resource, n.group, n.name)
		}
	}
	// Every ClusterRole the manager ensures, cleanup may read and delete.
	for _, cr := range access.ClusterRoles() {
		for _, verb := range []string{"get", "delete"} {
			if !allows(role.Rules, "rbac.authorization.k8s.io", "clusterroles", verb, cr.Name) {
				t.Errorf("cleanup may not %s ClusterRole %s, which the manager ensures and cleanup deletes", verb, cr.Name)
			}
		}
	}
	if has[*batchv1.Job](mustRender(t, "cleanup:\n  enabled: false\n"), name) {
		t.Error("cleanup.enabled=false still renders the Job")
	}
}

// The rendered scheduler configuration is one `fleetlet scheduler --config`
// accepts: it decodes, has the fleetlet-candidate profile with the
// candidate plugin, and passes kube-scheduler's validation; user profiles and
// plugin args end up in it.
func TestSchedulerConfiguration(t *testing.T) {
	for _, tc := range []struct{ name, values string }{
		{name: "default"},
		{name: "custom", values: `scheduler:
  permitTimeout: 10m
  config:
    percentageOfNodesToScore: 50
    plugins:
      score:
        disabled: [{name: ImageLocality}]
    pluginConfig:
      - name: NodeResourcesFit
        args: {scoringStrategy: {type: MostAllocated, resources: [{name: cpu, weight: 1}]}}
    profiles:
      - schedulerName: batch
        plugins: {multiPoint: {disabled: [{name: PodTopologySpread}]}}
`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cm := find[*corev1.ConfigMap](t, mustRender(t, tc.values), schedulerSA+"-config")
			cfg, err := candidate.LoadConfiguration([]byte(cm.Data["config.yaml"]))
			if err != nil {
				t.Fatalf("decoding the rendered configuration: %v\n%s", err, cm.Data["config.yaml"])
			}
			if err := candidate.CheckConfiguration(cfg); err != nil {
				t.Fatal(err)
			}
			if err := validation.ValidateKubeSchedulerConfiguration(cfg); err != nil {
				t.Fatal(err)
			}
			if cfg.LeaderElection.ResourceName != candidate.DefaultLeaseName || cfg.LeaderElection.ResourceNamespace != releaseNS {
				t.Errorf("leader election Lease %s/%s", cfg.LeaderElection.ResourceNamespace, cfg.LeaderElection.ResourceName)
			}
			if tc.values == "" {
				return
			}
			if len(cfg.Profiles) != 2 || cfg.Profiles[1].SchedulerName != "batch" || *cfg.PercentageOfNodesToScore != 50 {
				t.Errorf("profiles %d, percentageOfNodesToScore %v", len(cfg.Profiles), cfg.PercentageOfNodesToScore)
			}
			if !strings.Contains(cm.Data["config.yaml"], "permitTimeout: 10m") || !strings.Contains(cm.Data["config.yaml"], "MostAllocated") {
				t.Errorf("the configuration lacks the user's settings:\n%s", cm.Data["config.yaml"])
			}
		})
	}
	for _, bad := range []string{
		"scheduler:\n  config:\n    plugins:\n      multiPoint:\n        disabled: [{name: candidate}]\n",
		"scheduler:\n  config:\n    pluginConfig: [{name: candidate, args: {}}]\n",
	} {
		if _, err := render(t, bad); err == nil {
			t.Errorf("rendered a configuration without the candidate plugin's own settings:\n%s", bad)
		}
	}
}
