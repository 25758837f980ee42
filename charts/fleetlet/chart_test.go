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

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
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
	require.NoError(t, err)
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
	require.NoError(t, os.WriteFile(f, []byte(values), 0o600))
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
		require.NoError(t, err)
		if len(bytes.TrimSpace(stripComments(doc))) == 0 {
			continue
		}
		u := &unstructured.Unstructured{}
		require.NoError(t, yaml.Unmarshal(doc, &u.Object), "a rendered document is not YAML:\n%s", doc)
		require.Falsef(t, u.GetKind() == "" || u.GetAPIVersion() == "" || u.GetName() == "", "a rendered document has no kind, apiVersion or name:\n%s", doc)
		if !scheme.Recognizes(u.GroupVersionKind()) {
			objs = append(objs, u)
			continue
		}
		obj, _, err := strict.Decode(doc, nil, nil)
		require.NoError(t, err, "decoding %s %s", u.GetKind(), u.GetName())
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
	require.FailNowf(t, "object not found", "no %T named %s in the rendering", zero, name)
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
	require.NoError(t, err)
	return decode(t, out)
}

func TestLint(t *testing.T) {
	for _, values := range []string{"", "localProcesses: true\nwebhook:\n  url: https://127.0.0.1:9443/mutate-pods\n", "webhook:\n  certManager:\n    enabled: true\nserviceMonitor:\n  enabled: true\n"} {
		args := []string{"lint", "--strict", chartDir(t), "--set", "clusterName=" + clusterName}
		if values != "" {
			args = append(args, "-f", valuesFile(t, values))
		}
		out, err := helm(t, args...)
		assert.NoError(t, err, "helm lint with %q:\n%s", values, out)
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
		assert.Equal(t, n, kinds[kind], "%s rendered", kind)
	}
	manager := find[*appsv1.Deployment](t, objs, managerSA)
	assert.Equal(t, int32(2), *manager.Spec.Replicas, "manager replicas")
	c := manager.Spec.Template.Spec.Containers[0]
	for _, want := range []string{
		"--cluster-name=" + clusterName, "--leader-elect=true", "--follow-allowed-kinds=ConfigMap,Secret,ServiceAccount",
		"--webhook-cert-rotation=true", "--webhook-service-name=fleetlet-webhook", "--election-deadline=2s",
		"--delegate-recreate-delay=1m", "--target-probe-timeout=5s", "--webhook-timeout=10s",
	} {
		assert.Containsf(t, c.Args, want, "manager args %v lack %s", c.Args, want)
	}
	sc := c.SecurityContext
	assert.Falsef(t, sc == nil || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation || !*sc.ReadOnlyRootFilesystem || !*sc.RunAsNonRoot ||
		len(sc.Capabilities.Drop) != 1 || sc.Capabilities.Drop[0] != "ALL" || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault,
		"manager security context is not restricted: %+v", sc)
	assert.False(t, c.ReadinessProbe == nil || c.LivenessProbe == nil, "manager has no probes")
	assert.NotEqual(t, "", manager.Spec.Template.Annotations["checksum/config"], "manager pods have no checksum/config annotation")
	// A change of a setting changes the checksum, so the pods restart.
	other := find[*appsv1.Deployment](t, mustRender(t, "manager:\n  timeouts:\n    electionDeadline: 3s\n"), managerSA)
	assert.NotEqual(t, manager.Spec.Template.Annotations["checksum/config"], other.Spec.Template.Annotations["checksum/config"], "the checksum annotation did not change with the manager's settings")
	scheduler := find[*appsv1.Deployment](t, objs, schedulerSA)
	assert.NotEqual(t, "", scheduler.Spec.Template.Annotations["checksum/config"], "scheduler pods have no checksum/config annotation")
	assert.False(t, scheduler.Spec.Template.Spec.ServiceAccountName != schedulerSA || manager.Spec.Template.Spec.ServiceAccountName != managerSA, "the Deployments do not run as their ServiceAccounts")
	pc := find[*schedulingv1.PriorityClass](t, objs, "fleetlet-candidate")
	want := summary.CandidatePriorityClass()
	assert.Falsef(t, pc.Value != want.Value || *pc.PreemptionPolicy != *want.PreemptionPolicy || pc.GlobalDefault != want.GlobalDefault || pc.Description != want.Description, "PriorityClass %+v differs from what the manager ensures %+v", pc, want)
	for k, v := range want.Labels {
		assert.Equal(t, v, pc.Labels[k], "PriorityClass label %s", k)
	}
}

// The chart's CRDs are the generated ones: files/crds is a copy of
// config/crd/bases, and the rendered CRDs only add labels and the keep policy.
func TestCRDsAreTheGenerated(t *testing.T) {
	gen, err := filepath.Glob("../../config/crd/bases/*.yaml")
	require.Falsef(t, err != nil || len(gen) == 0, "no generated CRDs: %v", err)
	copies, _ := filepath.Glob("files/crds/*.yaml")
	assert.Lenf(t, copies, len(gen), "files/crds has %d CRDs, config/crd/bases %d: run hack/generate.sh", len(copies), len(gen))
	for _, g := range gen {
		want, _ := os.ReadFile(g)
		got, err := os.ReadFile(filepath.Join("files/crds", filepath.Base(g)))
		assert.Falsef(t, err != nil || !bytes.Equal(got, want), "files/crds/%s differs from config/crd/bases: run hack/generate.sh", filepath.Base(g))
	}
	objs := mustRender(t, "")
	crds, err := config.CRDs()
	require.NoError(t, err)
	for _, want := range crds {
		got := find[*apiextensionsv1.CustomResourceDefinition](t, objs, want.Name)
		assert.Truef(t, equality.Semantic.DeepEqual(got.Spec, want.Spec), "rendered CRD %s has another spec than the generated one", want.Name)
		assert.Equalf(t, "keep", got.Annotations["helm.sh/resource-policy"], "CRD %s is not kept on uninstall", want.Name)
	}
	objs = mustRender(t, "crds:\n  keep: false\n")
	assert.Empty(t, find[*apiextensionsv1.CustomResourceDefinition](t, objs, crds[0].Name).Annotations["helm.sh/resource-policy"], "crds.keep=false still renders resource-policy")
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
			require.Error(t, err, "helm template accepted:\n%s", tc.values)
			for _, w := range tc.want {
				assert.Containsf(t, err.Error(), w, "error lacks %q:\n%v", w, err)
			}
		})
	}
	_, err := helm(t, "template", releaseName, chartDir(t))
	assert.ErrorContains(t, err, "clusterName is required", "rendering without clusterName, want the clusterName is required message")
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
	assert.Falsef(t, cm.Namespace != releaseNS || cm.Data["weights"] != "1" || cm.Labels["team"] != "a" || cm.Labels["app.kubernetes.io/instance"] != releaseName, "extra ConfigMap = %+v", cm.ObjectMeta)
	role := find[*rbacv1.ClusterRole](t, objs, "fl-fleetlet-scheduler-extra")
	assert.Falsef(t, len(role.Rules) != 1 || role.Rules[0].Resources[0] != "quotas", "extra ClusterRole rules = %+v", role.Rules)
	binding := find[*rbacv1.ClusterRoleBinding](t, objs, "fl-fleetlet-scheduler-extra")
	assert.Falsef(t, binding.RoleRef.Name != role.Name || len(binding.Subjects) != 1 || binding.Subjects[0].Name != schedulerSA || binding.Subjects[0].Namespace != releaseNS, "extra ClusterRole is bound to %+v, want only the scheduler's ServiceAccount", binding.Subjects)
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
		assert.ErrorContainsf(t, err, tc.want, "rendering %s without the schema = %v, want %q", tc.values, err, tc.want)
	}
}

func TestWebhookConfiguration(t *testing.T) {
	objs := mustRender(t, "webhook:\n  excludedNamespaces: [monitoring]\n")
	mwc := find[*admissionregistrationv1.MutatingWebhookConfiguration](t, objs, "fleetlet-proxy-pods")
	require.Lenf(t, mwc.Webhooks, 2, "%d webhooks, want 2", len(mwc.Webhooks))
	// The chart's is pkg/source/webhook's, with a service reference.
	want := webhook.MutatingWebhookConfiguration(webhook.ConfigurationOptions{FleetletNamespace: releaseNS})
	for i, w := range mwc.Webhooks {
		b := want.Webhooks[i]
		assert.Falsef(t, w.Name != b.Name || *w.FailurePolicy != *b.FailurePolicy || *w.ReinvocationPolicy != *b.ReinvocationPolicy ||
			!slices.Equal(w.Rules[0].Resources, b.Rules[0].Resources) || len(w.MatchConditions) != len(b.MatchConditions),
			"webhook %d: %s %s %s %v (%d conditions), want pkg/source/webhook's %s %s %s %v (%d)", i,
			w.Name, *w.FailurePolicy, *w.ReinvocationPolicy, w.Rules[0].Resources, len(w.MatchConditions),
			b.Name, *b.FailurePolicy, *b.ReinvocationPolicy, b.Rules[0].Resources, len(b.MatchConditions))
		svc := w.ClientConfig.Service
		assert.Falsef(t, svc == nil || *svc.Path != "/mutate-pods" || !slices.Equal(w.NamespaceSelector.MatchExpressions[0].Values, mwc.Webhooks[0].NamespaceSelector.MatchExpressions[0].Values),
			"webhook %s: clientConfig %+v, namespaceSelector %+v; want the first's", w.Name, w.ClientConfig, w.NamespaceSelector)
	}
	w := mwc.Webhooks[0]
	assert.Falsef(t, w.Name != "proxy-pods.multicluster.fleetlet.io" || *w.FailurePolicy != admissionregistrationv1.Fail || *w.ReinvocationPolicy != admissionregistrationv1.IfNeededReinvocationPolicy, "webhook %s: failurePolicy %s, reinvocation %s", w.Name, *w.FailurePolicy, *w.ReinvocationPolicy)
	assert.Falsef(t, len(w.Rules) != 1 || !slices.Equal(w.Rules[0].Operations, []admissionregistrationv1.OperationType{admissionregistrationv1.Create}) ||
		!slices.Equal(w.Rules[0].Resources, []string{"pods"}) || !slices.Equal(w.Rules[0].APIGroups, []string{""}),
		"rules = %+v, want pods CREATE only", w.Rules)
	sel := w.NamespaceSelector
	assert.Equalf(t, "true", sel.MatchLabels["multicluster.fleetlet.io/enabled"], "namespaceSelector %+v does not select enabled namespaces", sel)
	assert.Falsef(t, len(sel.MatchExpressions) != 1 || sel.MatchExpressions[0].Key != "kubernetes.io/metadata.name" || sel.MatchExpressions[0].Operator != "NotIn" ||
		!slices.Equal(sel.MatchExpressions[0].Values, []string{"kube-system", releaseNS, "monitoring"}),
		"namespaceSelector exclusions = %+v, want kube-system, %s and monitoring", sel.MatchExpressions, releaseNS)
	svc := w.ClientConfig.Service
	assert.Falsef(t, svc == nil || svc.Name != "fleetlet-webhook" || svc.Namespace != releaseNS || *svc.Path != "/mutate-pods" || w.ClientConfig.URL != nil, "clientConfig = %+v, want the Service", w.ClientConfig)
	assert.Lenf(t, w.MatchConditions, 4, "%d match conditions, want the 4 of pkg/source/webhook", len(w.MatchConditions))
	if _, ok := mwc.Annotations["cert-manager.io/inject-ca-from"]; ok {
		assert.Fail(t, "cert-manager annotation without certManager.enabled")
	}
	find[*corev1.Service](t, objs, "fleetlet-webhook")

	// cert-manager: the cainjector annotation names the Certificate, the
	// manager reads the certificate from the Secret, no rotation.
	objs = mustRender(t, "webhook:\n  certManager:\n    enabled: true\n")
	mwc = find[*admissionregistrationv1.MutatingWebhookConfiguration](t, objs, "fleetlet-proxy-pods")
	assert.Equal(t, releaseNS+"/fl-fleetlet-webhook", mwc.Annotations["cert-manager.io/inject-ca-from"], "inject-ca-from")
	cert := find[*unstructured.Unstructured](t, objs, "fl-fleetlet-webhook")
	assert.Equalf(t, "Certificate", cert.GetKind(), "fl-fleetlet-webhook is a %s", cert.GetKind())
	args := find[*appsv1.Deployment](t, objs, managerSA).Spec.Template.Spec.Containers[0].Args
	assert.Falsef(t, !slices.Contains(args, "--webhook-cert-rotation=false") || !slices.Contains(args, "--webhook-cert-dir=/certs"), "with cert-manager the manager args are %v", args)
}

// URL mode with local processes: the configuration calls the URL, and
// nothing that runs a pod is rendered, while the rest is.
func TestURLModeAndLocalProcesses(t *testing.T) {
	const url = "https://127.0.0.1:9443/mutate-pods"
	objs := mustRender(t, "localProcesses: true\nwebhook:\n  url: "+url+"\n")
	mwc := find[*admissionregistrationv1.MutatingWebhookConfiguration](t, objs, "fleetlet-proxy-pods")
	cc := mwc.Webhooks[0].ClientConfig
	assert.Falsef(t, cc.URL == nil || *cc.URL != url || cc.Service != nil, "clientConfig = %+v, want url %s", cc, url)
	for _, o := range objs {
		switch o.(type) {
		case *appsv1.Deployment, *batchv1.Job, *corev1.Service:
			assert.Failf(t, "localProcesses renders a pod runner", "localProcesses renders %T %s", o, o.(interface{ GetName() string }).GetName())
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
	assert.True(t, allows(webhookRole.Rules, "admissionregistration.k8s.io", "mutatingwebhookconfigurations", "create", ""), "in URL mode the manager cannot create the MutatingWebhookConfiguration")
	// manager.enabled=false alone drops the manager's Deployment only.
	objs = mustRender(t, "manager:\n  enabled: false\n")
	assert.False(t, has[*appsv1.Deployment](objs, managerSA) || !has[*appsv1.Deployment](objs, schedulerSA) || !has[*rbacv1.ClusterRole](objs, managerSA+"-target-side"), "manager.enabled=false should drop the manager Deployment and keep its RBAC and the scheduler")
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
		assert.Truef(t, allows(cluster, n.group, n.resource, n.verb, n.name), "the manager may not %s %s.%s %s", n.verb, n.resource, n.group, n.name)
	}
	for _, n := range []need{
		{"coordination.k8s.io", "leases", "update", "fleetlet-manager"}, {"coordination.k8s.io", "leases", "create", ""},
		{"", "secrets", "create", ""}, {"", "secrets", "update", "fleetlet-webhook-cert"},
	} {
		assert.Truef(t, allows(ns[releaseNS], n.group, n.resource, n.verb, n.name), "the manager may not %s %s.%s %s in %s", n.verb, n.resource, n.group, n.name, releaseNS)
	}
	assert.True(t, allows(ns["kube-node-lease"], "coordination.k8s.io", "leases", "update", ""), "the manager may not renew the virtual nodes' Leases")
	// Impersonation: exactly the listed ServiceAccounts, in their namespace.
	assert.False(t, !allows(ns["team-a"], "authentication.k8s.io", "serviceaccounts", "impersonate:serviceaccount", "fleetlet-source-cluster-2") ||
		!allows(ns["team-a"], "authentication.k8s.io", "serviceaccounts", "impersonate:serviceaccount", "fleetlet-source-cluster-3"),
		"the manager may not impersonate the listed source ServiceAccounts")
	assert.False(t, allows(ns["team-a"], "authentication.k8s.io", "serviceaccounts", "impersonate:serviceaccount", "default"), "the manager may impersonate a ServiceAccount that is not listed")
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
				assert.NotContainsf(t, list, "*", "%s has a wildcard rule: %+v", sa, r)
			}
		}
	}
	for _, r := range cluster {
		assert.Falsef(t, slices.Contains(r.Resources, "clusterroles") && len(r.ResourceNames) == 0, "the manager has a rule on every ClusterRole: %+v", r)
		assert.Falsef(t, slices.Contains(r.Resources, "serviceaccounts") && slices.ContainsFunc(r.Verbs, func(v string) bool { return strings.HasPrefix(v, "impersonate") }),
			"the manager may impersonate ServiceAccounts cluster-wide: %+v", r)
		assert.Falsef(t, slices.Contains(r.Resources, "mutatingwebhookconfigurations") && slices.Contains(r.Verbs, "update") && len(r.ResourceNames) == 0, "the manager may update any webhook configuration: %+v", r)
	}
	// The source ClusterRoles are what the manager ensures.
	for name, want := range map[string][]rbacv1.PolicyRule{"fleetlet-source": access.SourceRules(), "fleetlet-source-reader": access.SourceReaderRules(), "fleetlet-source-namespaces": access.SourceNamespacesRules()} {
		got := find[*rbacv1.ClusterRole](t, objs, name)
		assert.Truef(t, equality.Semantic.DeepEqual(got.Rules, want), "ClusterRole %s rules differ from pkg/target/access's:\ngot  %+v\nwant %+v", name, got.Rules, want)
		assert.Equal(t, access.ManagedBy, got.Labels[access.LabelManagedBy], "ClusterRole %s lacks %s=%s", name, access.LabelManagedBy, access.ManagedBy)
	}
	// Legacy impersonation: the impersonate verb on the listed ones only.
	objs = mustRender(t, "manager:\n  rbac:\n    impersonationMode: legacy\n    impersonate: [{namespace: b, name: fleetlet-source-x}]\n")
	cluster, ns = rulesFor(t, objs, managerSA)
	assert.False(t, !allows(ns["b"], "", "serviceaccounts", "impersonate", "fleetlet-source-x") || allows(cluster, "", "pods", "impersonate-on:serviceaccount:create", ""), "legacy impersonation is not granted as documented")
}

// manager.secretNamespaces: no cluster-wide right on Secrets, Roles in the
// listed namespaces and the release namespace, and the manager told so.
func TestManagerSecretNamespaces(t *testing.T) {
	objs := mustRender(t, "manager:\n  secretNamespaces: [team-a, team-b]\n")
	cluster, ns := rulesFor(t, objs, managerSA)
	for _, verb := range []string{"get", "list", "watch"} {
		assert.Falsef(t, allows(cluster, "", "secrets", verb, ""), "the manager may %s Secrets cluster-wide", verb)
		for _, n := range []string{"team-a", "team-b", releaseNS} {
			assert.Truef(t, allows(ns[n], "", "secrets", verb, ""), "the manager may not %s Secrets in %s", verb, n)
		}
		assert.Falsef(t, allows(ns["team-c"], "", "secrets", verb, ""), "the manager may %s Secrets in a namespace not listed", verb)
	}
	args := find[*appsv1.Deployment](t, objs, managerSA).Spec.Template.Spec.Containers[0].Args
	assert.Containsf(t, args, "--secret-namespaces=team-a,team-b", "manager args %v lack --secret-namespaces=team-a,team-b", args)
	// By default: the cluster-wide read, and no such flag.
	objs = mustRender(t, "")
	cluster, _ = rulesFor(t, objs, managerSA)
	assert.True(t, allows(cluster, "", "secrets", "watch", ""), "by default the manager may not watch Secrets in every namespace")
	args = find[*appsv1.Deployment](t, objs, managerSA).Spec.Template.Spec.Containers[0].Args
	assert.Falsef(t, slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, "--secret-namespaces") }), "manager args %v have --secret-namespaces by default", args)
}

func TestSchedulerRBAC(t *testing.T) {
	objs := mustRender(t, "")
	cluster, ns := rulesFor(t, objs, schedulerSA)
	for _, verb := range []string{"get", "list", "watch", "patch"} {
		assert.Truef(t, allows(cluster, "multicluster.fleetlet.io", "podchaperons", verb, ""), "the scheduler may not %s podchaperons", verb)
	}
	assert.True(t, allows(ns[releaseNS], "coordination.k8s.io", "leases", "update", "fleetlet-candidate-scheduler"), "the scheduler may not renew its Lease")
	var upstream []string
	for _, o := range objs {
		if b, ok := o.(*rbacv1.ClusterRoleBinding); ok && slices.ContainsFunc(b.Subjects, func(s rbacv1.Subject) bool { return s.Name == schedulerSA }) {
			upstream = append(upstream, b.RoleRef.Name)
		}
	}
	for _, want := range []string{"system:kube-scheduler", "system:volume-scheduler"} {
		assert.Containsf(t, upstream, want, "the scheduler is not bound to %s (bound to %v)", want, upstream)
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
		assert.Equalf(t, "post-delete", a["helm.sh/hook"], "%T %s: helm.sh/hook = %q, want post-delete", o, o.GetName(), a["helm.sh/hook"])
		p := a["helm.sh/hook-delete-policy"]
		assert.Falsef(t, !strings.Contains(p, "hook-succeeded") || !strings.Contains(p, "before-hook-creation"), "%T %s: hook-delete-policy = %q", o, o.GetName(), p)
		w, err := strconv.Atoi(a["helm.sh/hook-weight"])
		assert.NoErrorf(t, err, "%T %s: hook-weight %q", o, o.GetName(), a["helm.sh/hook-weight"])
		weights[fmt.Sprintf("%T", o)] = w
	}
	// The ServiceAccount and RBAC exist before the Job runs.
	jobWeight := weights["*v1.Job"]
	assert.Falsef(t, weights["*v1.ServiceAccount"] >= jobWeight || weights["*v1.ClusterRole"] >= jobWeight || weights["*v1.ClusterRoleBinding"] >= jobWeight, "hook weights %v: the Job must come last", weights)
	job := find[*batchv1.Job](t, objs, name)
	spec := job.Spec.Template.Spec
	assert.Falsef(t, spec.ServiceAccountName != name || spec.Containers[0].Args[0] != "cleanup" || spec.RestartPolicy != corev1.RestartPolicyNever, "cleanup Job: serviceAccount %s, args %v", spec.ServiceAccountName, spec.Containers[0].Args)
	assert.Containsf(t, spec.Containers[0].Args, "--cluster-name="+clusterName, "cleanup Job args %v: want --cluster-name=%s, so that only this cluster's chaperons are deleted in its targets", spec.Containers[0].Args, clusterName)
	role := find[*rbacv1.ClusterRole](t, objs, name)
	for _, n := range []struct{ group, resource, verb, name string }{
		{"", "pods", "list", ""}, {"", "pods", "patch", ""}, {"", "pods", "delete", ""}, {"", "nodes", "list", ""}, {"", "nodes", "delete", ""},
		{"rbac.authorization.k8s.io", "clusterroles", "delete", "fleetlet-source"}, {"scheduling.k8s.io", "priorityclasses", "delete", "fleetlet-candidate"},
		{"multicluster.fleetlet.io", "podchaperons", "list", ""}, {"multicluster.fleetlet.io", "podchaperons", "delete", ""},
		{"multicluster.fleetlet.io", "targets", "get", ""}, {"multicluster.fleetlet.io", "clustertargets", "list", ""}, {"", "secrets", "get", ""},
	} {
		assert.Truef(t, allows(role.Rules, n.group, n.resource, n.verb, n.name), "cleanup may not %s %s.%s %s", n.verb, n.resource, n.group, n.name)
	}
	// Every ClusterRole the manager ensures, cleanup may read and delete.
	for _, cr := range access.ClusterRoles() {
		for _, verb := range []string{"get", "delete"} {
			assert.Truef(t, allows(role.Rules, "rbac.authorization.k8s.io", "clusterroles", verb, cr.Name), "cleanup may not %s ClusterRole %s, which the manager ensures and cleanup deletes", verb, cr.Name)
		}
	}
	assert.False(t, has[*batchv1.Job](mustRender(t, "cleanup:\n  enabled: false\n"), name), "cleanup.enabled=false still renders the Job")
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
			require.NoError(t, err, "decoding the rendered configuration:\n%s", cm.Data["config.yaml"])
			require.NoError(t, candidate.CheckConfiguration(cfg))
			require.NoError(t, validation.ValidateKubeSchedulerConfiguration(cfg))
			assert.Falsef(t, cfg.LeaderElection.ResourceName != candidate.DefaultLeaseName || cfg.LeaderElection.ResourceNamespace != releaseNS, "leader election Lease %s/%s", cfg.LeaderElection.ResourceNamespace, cfg.LeaderElection.ResourceName)
			if tc.values == "" {
				return
			}
			assert.Falsef(t, len(cfg.Profiles) != 2 || cfg.Profiles[1].SchedulerName != "batch" || *cfg.PercentageOfNodesToScore != 50, "profiles %d, percentageOfNodesToScore %v", len(cfg.Profiles), cfg.PercentageOfNodesToScore)
			assert.Falsef(t, !strings.Contains(cm.Data["config.yaml"], "permitTimeout: 10m") || !strings.Contains(cm.Data["config.yaml"], "MostAllocated"), "the configuration lacks the user's settings:\n%s", cm.Data["config.yaml"])
		})
	}
	for _, bad := range []string{
		"scheduler:\n  config:\n    plugins:\n      multiPoint:\n        disabled: [{name: candidate}]\n",
		"scheduler:\n  config:\n    pluginConfig: [{name: candidate, args: {}}]\n",
	} {
		_, err := render(t, bad)
		assert.Error(t, err, "rendered a configuration without the candidate plugin's own settings:\n%s", bad)
	}
}
