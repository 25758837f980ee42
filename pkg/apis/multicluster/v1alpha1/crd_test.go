package v1alpha1_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	crdvalidation "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/validation"
	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/defaulting"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/pruning"
	crvalidation "k8s.io/apiextensions-apiserver/pkg/apiserver/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"sigs.k8s.io/yaml"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
)

// crdDir holds the CRDs hack/generate.sh writes.
var crdDir = filepath.Join("..", "..", "..", "..", "config", "crd", "bases")

// loadCRDs reads every generated CRD, by kind.
func loadCRDs(t *testing.T) map[string]*apiextensionsv1.CustomResourceDefinition {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(crdDir, "*.yaml"))
	require.NoError(t, err)
	crds := map[string]*apiextensionsv1.CustomResourceDefinition{}
	for _, f := range files {
		data, err := os.ReadFile(f)
		require.NoError(t, err)
		crd := &apiextensionsv1.CustomResourceDefinition{}
		require.NoErrorf(t, yaml.UnmarshalStrict(data, crd), "%s", f)
		want := crd.Spec.Group + "_" + crd.Spec.Names.Plural + ".yaml"
		assert.Equalf(t, want, filepath.Base(f), "%s holds the CRD of %s, want it in %s", f, crd.Name, want)
		crds[crd.Spec.Names.Kind] = crd
	}
	return crds
}

// toInternal converts a CRD to the internal version the API server validates.
func toInternal(t *testing.T, in *apiextensionsv1.CustomResourceDefinition) *apiextensions.CustomResourceDefinition {
	t.Helper()
	in = in.DeepCopy()
	apiextensionsv1.SetObjectDefaults_CustomResourceDefinition(in)
	out := &apiextensions.CustomResourceDefinition{}
	require.NoErrorf(t, apiextensionsv1.Convert_v1_CustomResourceDefinition_To_apiextensions_CustomResourceDefinition(in, out, nil), "converting %s", in.Name)
	return out
}

func TestCRDs(t *testing.T) {
	crds := loadCRDs(t)

	wantShortNames := map[string][]string{
		"Target":         {"tgt"},
		"ClusterTarget":  {"ctgt"},
		"Source":         {"src"},
		"ClusterSource":  {"csrc"},
		"PodChaperon":    {"pch"},
		"ClusterSummary": {"csum"},
	}
	// The CEL rules each CRD must carry, by message prefix.
	wantRules := map[string][]string{
		"Target":         {"exactly one of self (true) and kubeconfigSecret", "kubeconfigSecret.namespace is not allowed", "self is allowed on ClusterTargets only"},
		"ClusterTarget":  {"exactly one of self (true) and kubeconfigSecret", "kubeconfigSecret.namespace is required"},
		"Source":         {"a Source is named after its source cluster"},
		"ClusterSource":  {"a ClusterSource is named after its source cluster", "namespaceSelector must not be empty"},
		"ClusterSummary": {"there is one ClusterSummary"},
	}

	var gotKinds []string
	for kind := range crds {
		gotKinds = append(gotKinds, kind)
	}
	var wantKinds []string
	for _, k := range kinds {
		wantKinds = append(wantKinds, k.kind)
	}
	slices.Sort(gotKinds)
	slices.Sort(wantKinds)
	assert.Emptyf(t, cmp.Diff(wantKinds, gotKinds), "CRD kinds in %s (-want,+got)", crdDir)

	for _, k := range kinds {
		t.Run(k.kind, func(t *testing.T) {
			crd, ok := crds[k.kind]
			if !ok {
				t.Skipf("no CRD for %s", k.kind)
			}
			assert.Equal(t, v1alpha1.GroupName, crd.Spec.Group, "group")
			wantScope := apiextensionsv1.ClusterScoped
			if k.namespaced {
				wantScope = apiextensionsv1.NamespaceScoped
			}
			assert.Equal(t, wantScope, crd.Spec.Scope, "scope")
			assert.Equal(t, k.kind+"List", crd.Spec.Names.ListKind, "listKind")
			assert.Empty(t, cmp.Diff(wantShortNames[k.kind], crd.Spec.Names.ShortNames), "short names (-want,+got)")
			assert.Truef(t, slices.Contains(crd.Spec.Names.Categories, "fleetlet"), "categories = %v, want fleetlet among them", crd.Spec.Names.Categories)
			require.Lenf(t, crd.Spec.Versions, 1, "got %d versions, want 1", len(crd.Spec.Versions))
			v := crd.Spec.Versions[0]
			assert.Falsef(t, v.Name != "v1alpha1" || !v.Served || !v.Storage, "version %s served=%v storage=%v, want v1alpha1 served and stored", v.Name, v.Served, v.Storage)
			assert.False(t, v.Subresources == nil || v.Subresources.Status == nil, "no status subresource")

			// Printer columns: Age last; every secondary column at
			// priority 10.
			cols := v.AdditionalPrinterColumns
			assert.Falsef(t, len(cols) < 2 || cols[len(cols)-1].Name != "Age", "printer columns %v: want at least two, Age last", cols)
			for _, c := range cols {
				assert.Falsef(t, c.Priority != 0 && c.Priority != 10, "printer column %s has priority %d, want 0 or 10", c.Name, c.Priority)
			}

			var messages []string
			collectRules(v.Schema.OpenAPIV3Schema, &messages)
			for _, want := range wantRules[k.kind] {
				assert.Truef(t, slices.ContainsFunc(messages, func(m string) bool { return strings.HasPrefix(m, want) }), "no CEL rule with message %q; have %q", want, messages)
			}

			// The API server's own checks: structural schema, CEL rules
			// compile within the cost budget, printer column paths.
			errs := crdvalidation.ValidateCustomResourceDefinition(context.Background(), toInternal(t, crd))
			assert.Emptyf(t, errs, "the API server would refuse the CRD: %v", errs.ToAggregate())
		})
	}
}

// collectRules appends the messages of every CEL rule in a schema.
func collectRules(s *apiextensionsv1.JSONSchemaProps, messages *[]string) {
	if s == nil {
		return
	}
	for _, r := range s.XValidations {
		*messages = append(*messages, r.Message)
	}
	for _, p := range s.Properties {
		collectRules(&p, messages)
	}
	if s.Items != nil {
		collectRules(s.Items.Schema, messages)
	}
	if s.AdditionalProperties != nil {
		collectRules(s.AdditionalProperties.Schema, messages)
	}
}

// admit runs a custom resource through what the API server does on create:
// pruning, defaulting, OpenAPI schema validation and CEL rules. It returns
// the object as it would be stored and the validation errors.
func admit(t *testing.T, crd *apiextensionsv1.CustomResourceDefinition, manifest string) (map[string]any, field.ErrorList) {
	t.Helper()
	obj := map[string]any{}
	require.NoError(t, yaml.Unmarshal([]byte(manifest), &obj), "bad test manifest")
	schema := &apiextensions.JSONSchemaProps{}
	require.NoError(t, apiextensionsv1.Convert_v1_JSONSchemaProps_To_apiextensions_JSONSchemaProps(crd.Spec.Versions[0].Schema.OpenAPIV3Schema, schema, nil), "converting the schema")
	structural, err := structuralschema.NewStructural(schema)
	require.NoError(t, err, "structural schema")
	pruning.Prune(obj, structural, true)
	defaulting.Default(obj, structural)

	validator, _, err := crvalidation.NewSchemaValidator(schema)
	require.NoError(t, err, "schema validator")
	errs := crvalidation.ValidateCustomResource(nil, obj, validator)
	celErrs, _ := cel.NewValidator(structural, true, celconfig.PerCallLimit).
		Validate(context.Background(), nil, structural, obj, nil, celconfig.RuntimeCELCostBudget)
	return obj, append(errs, celErrs...)
}

func TestCRDValidation(t *testing.T) {
	crds := loadCRDs(t)
	long := strings.Repeat("a", 64)

	cases := []struct {
		name     string
		kind     string
		manifest string
		wantErr  string // substring of the errors; empty means accepted
		check    func(t *testing.T, obj map[string]any)
	}{
		{
			name: "target self",
			kind: "Target",
			manifest: `
metadata: {name: t, namespace: ns}
spec: {self: true}`,
			wantErr: "self is allowed on ClusterTargets only",
		},
		{
			name: "target kubeconfig secret gets the default key",
			kind: "Target",
			manifest: `
metadata: {name: t, namespace: ns}
spec: {kubeconfigSecret: {name: cluster-2}}`,
			check: func(t *testing.T, obj map[string]any) {
				secret := obj["spec"].(map[string]any)["kubeconfigSecret"].(map[string]any)
				assert.Equal(t, v1alpha1.DefaultKubeconfigKey, secret["key"], "kubeconfigSecret.key")
			},
		},
		{
			name: "target self false with a secret",
			kind: "Target",
			manifest: `
metadata: {name: t, namespace: ns}
spec: {self: false, kubeconfigSecret: {name: cluster-2, key: kc, context: c}}`,
		},
		{
			name: "target self and secret",
			kind: "Target",
			manifest: `
metadata: {name: t, namespace: ns}
spec: {self: true, kubeconfigSecret: {name: cluster-2}}`,
			wantErr: "exactly one of self (true) and kubeconfigSecret must be set",
		},
		{
			name: "target neither self nor secret",
			kind: "Target",
			manifest: `
metadata: {name: t, namespace: ns}
spec: {excludedLabelsRegexp: "^kubernetes\\.io/"}`,
			wantErr: "exactly one of self (true) and kubeconfigSecret must be set",
		},
		{
			name: "target secret with a namespace",
			kind: "Target",
			manifest: `
metadata: {name: t, namespace: ns}
spec: {kubeconfigSecret: {name: cluster-2, namespace: other}}`,
			wantErr: "kubeconfigSecret.namespace is not allowed in a Target",
		},
		{
			name: "target secret with a bad name",
			kind: "Target",
			manifest: `
metadata: {name: t, namespace: ns}
spec: {kubeconfigSecret: {name: Cluster_2}}`,
			wantErr: "spec.kubeconfigSecret.name",
		},
		{
			name: "cluster target secret with a namespace",
			kind: "ClusterTarget",
			manifest: `
metadata: {name: t}
spec: {kubeconfigSecret: {name: cluster-2, namespace: fleetlet-system}}`,
		},
		{
			name: "cluster target self",
			kind: "ClusterTarget",
			manifest: `
metadata: {name: t}
spec: {self: true}`,
		},
		{
			name: "cluster target secret without a namespace",
			kind: "ClusterTarget",
			manifest: `
metadata: {name: t}
spec: {kubeconfigSecret: {name: cluster-2}}`,
			wantErr: "kubeconfigSecret.namespace is required in a ClusterTarget",
		},
		{
			name: "cluster target neither",
			kind: "ClusterTarget",
			manifest: `
metadata: {name: t}
spec: {}`,
			wantErr: "exactly one of self (true) and kubeconfigSecret must be set",
		},
		{
			name: "source without spec",
			kind: "Source",
			manifest: `
metadata: {name: cluster-1, namespace: ns}`,
		},
		{
			name: "source name too long for a label value",
			kind: "Source",
			manifest: `
metadata: {name: ` + long + `, namespace: ns}
spec: {serviceAccountName: sa}`,
			wantErr: "must fit in a label value",
		},
		{
			name: "cluster source without selector",
			kind: "ClusterSource",
			manifest: `
metadata: {name: cluster-1}
spec: {serviceAccountNamespace: fleetlet-system}`,
		},
		{
			name: "cluster source with selector",
			kind: "ClusterSource",
			manifest: `
metadata: {name: cluster-1}
spec:
  serviceAccountNamespace: fleetlet-system
  serviceAccountName: sa
  namespaceSelector: {matchExpressions: [{key: team, operator: In, values: [a, b]}]}`,
		},
		{
			name: "cluster source with empty selector",
			kind: "ClusterSource",
			manifest: `
metadata: {name: cluster-1}
spec: {serviceAccountNamespace: fleetlet-system, namespaceSelector: {}}`,
			wantErr: "namespaceSelector must not be empty",
		},
		{
			name: "cluster source without service account namespace",
			kind: "ClusterSource",
			manifest: `
metadata: {name: cluster-1}
spec: {}`,
			wantErr: "spec.serviceAccountNamespace: Required value",
		},
		{
			name: "cluster source name too long",
			kind: "ClusterSource",
			manifest: `
metadata: {name: ` + long + `}
spec: {serviceAccountNamespace: fleetlet-system}`,
			wantErr: "must fit in a label value",
		},
		{
			name: "cluster summary named default",
			kind: "ClusterSummary",
			manifest: `
metadata: {name: default}
status:
  nodeCount: 3
  capacity: {cpu: "12", memory: 48Gi, pods: "330"}
  allocatable: {cpu: 11500m, memory: 46Gi, pods: "330"}
  requested: {cpu: "2", memory: 1Gi, pods: "12"}
  labels: {topology.kubernetes.io/region: eu}`,
		},
		{
			name: "cluster summary named otherwise",
			kind: "ClusterSummary",
			manifest: `
metadata: {name: other}`,
			wantErr: "there is one ClusterSummary and it is named default",
		},
		{
			name: "pod chaperon keeps the whole pod spec and status",
			kind: "PodChaperon",
			manifest: `
metadata: {name: web-0-1a2b3c4d, namespace: ns}
spec:
  template:
    metadata: {labels: {app: web}, annotations: {a: b}}
    spec:
      schedulerName: fleetlet-candidate
      priorityClassName: fleetlet-candidate
      containers: [{name: c, image: nginx, resources: {requests: {cpu: 100m}}}]
      affinity: {nodeAffinity: {requiredDuringSchedulingIgnoredDuringExecution: {nodeSelectorTerms: [{matchExpressions: [{key: type, operator: NotIn, values: [virtual-kubelet]}]}]}}}
status:
  nodeName: node-1
  podStatus: {phase: Running, podIP: 10.0.0.1, conditions: [{type: Ready, status: "True"}]}`,
			check: func(t *testing.T, obj map[string]any) {
				spec := obj["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)
				for _, f := range []string{"schedulerName", "priorityClassName", "containers", "affinity"} {
					_, ok := spec[f]
					assert.Truef(t, ok, "spec.template.spec.%s was pruned", f)
				}
				podStatus := obj["status"].(map[string]any)["podStatus"].(map[string]any)
				assert.Equalf(t, "10.0.0.1", podStatus["podIP"], "status.podStatus.podIP was pruned: %v", podStatus)
			},
		},
		{
			name: "pod chaperon without a template",
			kind: "PodChaperon",
			manifest: `
metadata: {name: web-0-1a2b3c4d, namespace: ns}
spec: {}`,
			wantErr: "spec.template: Required value",
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			crd, ok := crds[tc.kind]
			require.Truef(t, ok, "no CRD for %s", tc.kind)
			manifest := "apiVersion: multicluster.fleetlet.io/v1alpha1\nkind: " + tc.kind + "\n" + strings.TrimPrefix(tc.manifest, "\n")
			obj, errs := admit(t, crd, manifest)
			if tc.wantErr == "" {
				assert.Emptyf(t, errs, "refused: %v", errs.ToAggregate())
			} else if assert.NotEmptyf(t, errs, "accepted, want an error containing %q", tc.wantErr) {
				assert.Containsf(t, errs.ToAggregate().Error(), tc.wantErr, "errors %v, want one containing %q", errs.ToAggregate(), tc.wantErr)
			}
			if tc.check != nil {
				tc.check(t, obj)
			}
		})
	}
}
