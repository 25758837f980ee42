package chart_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	certificatesv1 "k8s.io/api/certificates/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/fleetlet/fleetlet/pkg/target/access"
	"github.com/fleetlet/fleetlet/pkg/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) {
	log.SetLogger(logr.Discard())
	os.Exit(testenv.StartMain(m, testenv.Options{}, &env))
}

// kubeconfig writes an administrator's kubeconfig for helm.
func kubeconfig(t *testing.T, cfg *rest.Config) string {
	t.Helper()
	kc := clientcmdapi.NewConfig()
	kc.Clusters["envtest"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["admin"] = &clientcmdapi.AuthInfo{ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData, Token: cfg.BearerToken}
	kc.Contexts["envtest"] = &clientcmdapi.Context{Cluster: "envtest", AuthInfo: "admin"}
	kc.CurrentContext = "envtest"
	f := filepath.Join(t.TempDir(), "kubeconfig")
	require.NoError(t, clientcmd.WriteToFile(*kc, f))
	return f
}

// as returns a client that impersonates user.
func as(t *testing.T, user string) client.Client {
	t.Helper()
	c, err := client.New(impersonated(t, user), client.Options{Scheme: scheme})
	require.NoError(t, err)
	return c
}

// impersonated is the test API server's configuration acting as user.
func impersonated(t *testing.T, user string) *rest.Config {
	t.Helper()
	cfg := rest.CopyConfig(env.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user}
	return cfg
}

// eventually retries f until it returns nil or the deadline passes.
func eventually(t *testing.T, what string, f func() error) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := f()
		if err == nil {
			return
		}
		require.Falsef(t, time.Now().After(deadline), "%s: %v", what, err)
		time.Sleep(200 * time.Millisecond)
	}
}

// The chart, installed with local processes and URL mode (what a sandbox of
// local control planes does), is accepted by a real kube-apiserver: CRDs,
// RBAC (the API server's escalation checks included), the webhook
// configuration, the PriorityClass and the admission policies. Then the
// policies hold: nobody but fleetlet changes multicluster.fleetlet.io/
// annotations of a pod, and a chaperon's parent-cluster names its writer.
func TestInstallOnAPIServer(t *testing.T) {
	testenv.Need(t, env)
	ctx := context.Background()
	admin, err := client.New(env.Config, client.Options{Scheme: scheme})
	require.NoError(t, err)
	kc := kubeconfig(t, env.Config)
	for _, ns := range []string{"team-a", "apps"} {
		require.NoError(t, admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
		// No controller-manager here: the pods' ServiceAccount by hand.
		require.NoError(t, admin.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "default"}}))
	}

	// A refused value fails helm install with the schema's message, and
	// creates nothing.
	_, err = helm(t, "install", releaseName, chartDir(t), "--kubeconfig", kc, "--namespace", releaseNS, "--create-namespace",
		"--set", "clusterName="+clusterName, "-f", valuesFile(t, "scheduler:\n  extraResources:\n    - {apiVersion: v1, kind: Secret, metadata: {name: s}}\n"))
	require.ErrorContainsf(t, err, "at '/scheduler/extraResources/0/kind': value must be one of 'ConfigMap', 'ClusterRole'", "helm install with a Secret in extraResources = %v", err)
	err = admin.Get(ctx, types.NamespacedName{Name: "podchaperons.multicluster.fleetlet.io"}, &apiextensionsv1.CustomResourceDefinition{})
	require.Truef(t, apierrors.IsNotFound(err), "a refused install created the CRDs: %v", err)

	out, err := helm(t, "install", releaseName, chartDir(t), "--kubeconfig", kc, "--namespace", releaseNS, "--create-namespace",
		"--set", "clusterName="+clusterName, "-f", valuesFile(t, `localProcesses: true
webhook:
  url: https://127.0.0.1:9443/mutate-pods
manager:
  rbac:
    impersonate: [{namespace: team-a, name: fleetlet-source-cluster-2}]
scheduler:
  extraResources:
    - {apiVersion: v1, kind: ConfigMap, metadata: {name: scoring}, data: {a: b}}
    - {apiVersion: rbac.authorization.k8s.io/v1, kind: ClusterRole, metadata: {}, rules: [{apiGroups: [""], resources: [nodes], verbs: [get]}]}
`))
	require.NoError(t, err, "helm install:\n%s", out)
	for _, crd := range []string{"targets", "clustertargets", "sources", "clustersources", "podchaperons", "clustersummaries"} {
		eventually(t, "CRD "+crd+" established", func() error {
			var got apiextensionsv1.CustomResourceDefinition
			if err := admin.Get(ctx, types.NamespacedName{Name: crd + ".multicluster.fleetlet.io"}, &got); err != nil {
				return err
			}
			for _, c := range got.Status.Conditions {
				if c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue {
					return nil
				}
			}
			return errNotYet
		})
	}

	t.Run("the seal key is made once and kept", func(t *testing.T) {
		key := types.NamespacedName{Namespace: releaseNS, Name: "fleetlet-seal-key"}
		var first corev1.Secret
		require.NoError(t, admin.Get(ctx, key, &first))
		require.Lenf(t, first.Data["key"], 32, "seal key of %d bytes, want 32", len(first.Data["key"]))
		// A rotation an operator made: the earlier key kept as previous-1.
		first.Data["previous-1"] = first.Data["key"]
		first.Data["key"] = []byte(strings.Repeat("r", 32))
		require.NoError(t, admin.Update(ctx, &first))
		out, err := helm(t, "upgrade", releaseName, chartDir(t), "--kubeconfig", kc, "--namespace", releaseNS, "--reuse-values")
		require.NoError(t, err, "helm upgrade:\n%s", out)
		var after corev1.Secret
		require.NoError(t, admin.Get(ctx, key, &after))
		assert.Falsef(t, string(after.Data["key"]) != strings.Repeat("r", 32) || string(after.Data["previous-1"]) != string(first.Data["previous-1"]), "helm upgrade changed the seal keys: key %q, previous-1 %q", after.Data["key"], after.Data["previous-1"])
	})
	t.Run("pod annotations", func(t *testing.T) { testPodAnnotationsPolicy(t, admin) })
	t.Run("chaperon parent-cluster", func(t *testing.T) { testChaperonPolicy(t, admin) })
	t.Run("the manager deletes only what is fleetlet's", func(t *testing.T) { testManagerDeletesPolicy(t, admin) })
	t.Run("the manager writes only fleetlet's Leases", func(t *testing.T) { testManagerLeasesPolicy(t, admin) })
	t.Run("a source writes only its own copies", func(t *testing.T) { testSourceCopiesPolicy(t, admin) })
	t.Run("only a source makes its delegates", func(t *testing.T) { testDelegatePodsPolicy(t, admin) })
	t.Run("a source patches only its own delegates", func(t *testing.T) { testSourcePodUpdatesPolicy(t) })
	t.Run("a source creates and deletes only the namespaces its ClusterSource allows", func(t *testing.T) { testSourceNamespacesPolicy(t, admin) })
	t.Run("the manager approves only its own CSRs", func(t *testing.T) { testManagerCSRPolicy(t, admin) })

	// Uninstall removes what the release created, extra resources included,
	// and keeps the CRDs.
	out, err = helm(t, "uninstall", releaseName, "--kubeconfig", kc, "--namespace", releaseNS, "--wait", "--timeout", "60s")
	require.NoError(t, err, "helm uninstall:\n%s", out)
	for _, obj := range []client.Object{
		&rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "fl-fleetlet-scheduler-extra"}},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: releaseNS, Name: "scoring"}},
		&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: managerSA + "-impersonate"}},
		&rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "fleetlet-source"}},
	} {
		eventually(t, "deleting "+obj.GetName(), func() error {
			if err := admin.Get(ctx, client.ObjectKeyFromObject(obj), obj); !apierrors.IsNotFound(err) {
				return errNotYet
			}
			return nil
		})
	}
	assert.NoError(t, admin.Get(ctx, types.NamespacedName{Name: "podchaperons.multicluster.fleetlet.io"}, &apiextensionsv1.CustomResourceDefinition{}), "the CRDs were not kept")
}

type notYet struct{}

func (notYet) Error() string { return "not yet" }

var errNotYet error = notYet{}

func testPodAnnotationsPolicy(t *testing.T, admin client.Client) {
	ctx := context.Background()
	const alice = "alice"
	// alice may patch pods in apps: only the policy stands in her way.
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "pod-editor"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "patch", "update"}}}}
	binding := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "pod-editor"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "pod-editor"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: alice}}}
	for _, o := range []client.Object{role, binding} {
		require.NoError(t, admin.Create(ctx, o))
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "web", Annotations: map[string]string{
			"multicluster.fleetlet.io/source-spec": `{"sealed":"by-fleetlet"}`, "team": "a",
		}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "nginx"}}},
	}
	require.NoError(t, admin.Create(ctx, pod))
	patch := func(c client.Client, annotations string) error {
		return c.Patch(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "web"}},
			client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"annotations":`+annotations+`}}`)))
	}
	user := as(t, alice)
	// The policy takes a moment to load: wait until it refuses (each try
	// with a new value: a patch that changes nothing is no change).
	try := 0
	eventually(t, "the pod annotation policy refusing alice", func() error {
		try++
		err := patch(user, fmt.Sprintf(`{"multicluster.fleetlet.io/source-spec":"forged-%d"}`, try))
		if err == nil {
			return errNotYet
		}
		if !apierrors.IsForbidden(err) && !apierrors.IsInvalid(err) {
			return err
		}
		require.Falsef(t, !strings.Contains(err.Error(), "only fleetlet may change multicluster.fleetlet.io/ annotations") ||
			!strings.Contains(err.Error(), "multicluster.fleetlet.io/source-spec"), "refused with another message: %v", err)
		return nil
	})
	var current corev1.Pod
	require.NoError(t, admin.Get(ctx, client.ObjectKeyFromObject(pod), &current))
	spec, _ := json.Marshal(map[string]string{"multicluster.fleetlet.io/source-spec": current.Annotations["multicluster.fleetlet.io/source-spec"]})
	for _, tc := range []struct {
		name, patch string
		allowed     bool
	}{
		{name: "another annotation", patch: `{"team":"b"}`, allowed: true},
		{name: "add one", patch: `{"multicluster.fleetlet.io/elected":"x"}`},
		{name: "remove one", patch: `{"multicluster.fleetlet.io/source-spec":null}`},
		{name: "same value", patch: string(spec), allowed: true},
		{name: "the user's own: evict-with-claims", patch: `{"multicluster.fleetlet.io/evict-with-claims":"true"}`, allowed: true},
		{name: "the user's own, with one of fleetlet's", patch: `{"multicluster.fleetlet.io/evict-with-claims":"false","multicluster.fleetlet.io/elected":"y"}`},
	} {
		err := patch(user, tc.patch)
		assert.Falsef(t, tc.allowed && err != nil, "alice, %s: %v", tc.name, err)
		assert.Falsef(t, !tc.allowed && (err == nil || !strings.Contains(err.Error(), "only fleetlet may change")), "alice, %s: %v, want the policy's refusal", tc.name, err)
	}
	// fleetlet's ServiceAccount may, with the RBAC the chart gives it.
	manager := as(t, "system:serviceaccount:"+releaseNS+":"+managerSA)
	require.NoError(t, patch(manager, `{"multicluster.fleetlet.io/source-spec":"resealed","multicluster.fleetlet.io/elected":"x"}`), "fleetlet's ServiceAccount changing its annotations")
	var got corev1.Pod
	require.NoError(t, admin.Get(ctx, client.ObjectKeyFromObject(pod), &got))
	assert.Falsef(t, got.Annotations["multicluster.fleetlet.io/source-spec"] != "resealed" || got.Annotations["team"] != "b", "annotations = %v", got.Annotations)
	// Another ServiceAccount, even an administrator's, may not.
	assert.Error(t, patch(as(t, "system:serviceaccount:kube-system:admin"), `{"multicluster.fleetlet.io/source-spec":"x"}`), "another identity changed a multicluster.fleetlet.io/ annotation")
}

func chaperon(name, parentCluster string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "multicluster.fleetlet.io/v1alpha1",
		"kind":       "PodChaperon",
		"metadata":   map[string]any{"namespace": "team-a", "name": name, "labels": map[string]any{"multicluster.fleetlet.io/parent-cluster": parentCluster}},
		"spec":       map[string]any{"template": map[string]any{"spec": map[string]any{"containers": []any{map[string]any{"name": "c", "image": "nginx"}}}}},
	}}
	if parentCluster == "" {
		u.SetLabels(nil)
	}
	return u
}

func testChaperonPolicy(t *testing.T, admin client.Client) {
	ctx := context.Background()
	// As the Source controller does: cluster-2's ServiceAccount bound to
	// fleetlet-source in team-a, and another source's too.
	for _, src := range []string{"cluster-2", "cluster-3"} {
		rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "fleetlet-source-" + src},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "fleetlet-source"},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: "team-a", Name: "fleetlet-source-" + src}}}
		require.NoError(t, admin.Create(ctx, rb))
	}
	// And, as far as RBAC goes, a ServiceAccount named like cluster-2's in
	// another namespace, and a ClusterSource's in the release namespace.
	extra := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "other-source-identities"},
		RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "fleetlet-source"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: "apps", Name: "fleetlet-source-cluster-2"},
			{Kind: rbacv1.ServiceAccountKind, Namespace: releaseNS, Name: "fleetlet-source-cluster-4"}}}
	require.NoError(t, admin.Create(ctx, extra))
	// alice may create chaperons as far as RBAC goes.
	cr := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "alice-chaperons"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "fleetlet-source"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "alice"}}}
	require.NoError(t, admin.Create(ctx, cr))
	cluster2 := as(t, "system:serviceaccount:team-a:fleetlet-source-cluster-2")
	cluster3 := as(t, "system:serviceaccount:team-a:fleetlet-source-cluster-3")
	eventually(t, "the chaperon policy refusing a forged parent-cluster", func() error {
		err := cluster2.Create(ctx, chaperon("forged", "cluster-3"))
		if err == nil {
			return errNotYet
		}
		if !strings.Contains(err.Error(), "must be 'cluster-2', not 'cluster-3'") {
			return err
		}
		return nil
	})
	for _, tc := range []struct {
		name    string
		c       client.Client
		obj     *unstructured.Unstructured
		wantErr string
	}{
		{name: "source, own name", c: cluster2, obj: chaperon("own", "cluster-2")},
		{name: "source, no label", c: cluster2, obj: chaperon("unlabelled", ""), wantErr: "must be 'cluster-2', not ''"},
		{name: "not a source", c: as(t, "alice"), obj: chaperon("alice", "cluster-2"), wantErr: "alice may not create PodChaperons"},
		// A fleetlet-source-<source> ServiceAccount of another namespace
		// (not a ClusterSource namespace) does not stand for that source.
		{name: "a source's name from another namespace", c: as(t, "system:serviceaccount:apps:fleetlet-source-cluster-2"), obj: chaperon("elsewhere", "cluster-2"),
			wantErr: "may not create PodChaperons in team-a"},
		// A ClusterSource's, from the release namespace, does everywhere.
		{name: "a ClusterSource's", c: as(t, "system:serviceaccount:"+releaseNS+":fleetlet-source-cluster-4"), obj: chaperon("cluster-wide", "cluster-4")},
		{name: "fleetlet, its cluster name (self target)", c: as(t, "system:serviceaccount:"+releaseNS+":"+managerSA), obj: chaperon("self", clusterName)},
		{name: "fleetlet, another name", c: as(t, "system:serviceaccount:"+releaseNS+":"+managerSA), obj: chaperon("self-forged", "cluster-2"), wantErr: "must be '" + clusterName + "'"},
	} {
		err := tc.c.Create(ctx, tc.obj)
		assert.Falsef(t, tc.wantErr == "" && err != nil, "%s: %v", tc.name, err)
		assert.Falsef(t, tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)), "%s: %v, want an error with %q", tc.name, err, tc.wantErr)
	}
	// The label never changes, and a source touches only its own chaperons.
	relabel := client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"labels":{"multicluster.fleetlet.io/parent-cluster":"cluster-3"}}}`))
	assert.ErrorContains(t, admin.Patch(ctx, chaperon("own", ""), relabel), "cannot change", "relabelling a chaperon")
	annotate := client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"annotations":{"multicluster.fleetlet.io/elected":"true"}}}`))
	assert.ErrorContains(t, cluster3.Patch(ctx, chaperon("own", ""), annotate), "only change or delete its own", "another source electing cluster-2's chaperon")
	assert.ErrorContains(t, cluster3.Delete(ctx, chaperon("own", "")), "only change or delete its own", "another source deleting cluster-2's chaperon")
	assert.NoError(t, cluster2.Patch(ctx, chaperon("own", ""), annotate), "the source electing its own chaperon")
	// The candidate scheduler annotates any chaperon (mf/reserved).
	reserve := client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"annotations":{"multicluster.fleetlet.io/reserved":"node-1"}}}`))
	assert.NoError(t, as(t, "system:serviceaccount:"+releaseNS+":"+schedulerSA).Patch(ctx, chaperon("own", ""), reserve), "the candidate scheduler reserving")
	assert.NoError(t, cluster2.Delete(ctx, chaperon("own", "")), "the source deleting its own chaperon")
}

// The manager's RBAC lets it delete ServiceAccounts, RoleBindings, pods and
// nodes anywhere (the Source controllers, the chaperon controller and the
// virtual nodes need it); the fleetlet-manager-deletes policy narrows that
// to what fleetlet made. Before: the manager could delete any of them.
func testManagerDeletesPolicy(t *testing.T, admin client.Client) {
	ctx := context.Background()
	manager := as(t, "system:serviceaccount:"+releaseNS+":"+managerSA)
	ours := map[string]string{access.LabelManagedBy: access.ManagedBy, access.LabelSourceKind: access.KindSource}
	container := []corev1.Container{{Name: "c", Image: "busybox"}}
	cases := []struct {
		obj     client.Object
		refused bool
	}{
		{&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "someones"}}, true},
		{&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "fleetlet-source-x", Labels: ours}}, false},
		{&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "someones"},
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "view"}}, true},
		{&rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "someones"},
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "view"}}, true},
		{&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "someones"}, Spec: corev1.PodSpec{Containers: container}}, true},
		{&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "a-delegate",
			Labels: map[string]string{"multicluster.fleetlet.io/parent-cluster": "cluster-2"}}, Spec: corev1.PodSpec{Containers: container}}, false},
		{&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "a-real-node"}}, true},
		{&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "fleetlet-cluster-2", Annotations: map[string]string{"multicluster.fleetlet.io/target": "cluster-2"}}}, false},
	}
	// A policy takes a moment to be in force: wait for it on a probe.
	eventually(t, "the deletes policy in force", func() error {
		probe := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "probe"}}
		if err := admin.Create(ctx, probe); err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
		if err := manager.Delete(ctx, probe); err == nil || !strings.Contains(err.Error(), "fleetlet deletes only what it made") {
			return fmt.Errorf("deleting a foreign ServiceAccount: %w", err)
		}
		return nil
	})
	for _, tc := range cases {
		require.NoError(t, admin.Create(ctx, tc.obj))
	}
	for _, tc := range cases {
		name := fmt.Sprintf("%T %s", tc.obj, tc.obj.GetName())
		eventually(t, "the policy deciding on "+name, func() error {
			err := manager.Delete(ctx, tc.obj)
			switch {
			case tc.refused && err == nil:
				return fmt.Errorf("the manager deleted %s, which fleetlet did not make", name)
			case tc.refused && !strings.Contains(err.Error(), "fleetlet deletes only what it made"):
				return fmt.Errorf("deleting %s: %w, want the policy's refusal", name, err)
			case !tc.refused && err != nil && !apierrors.IsNotFound(err):
				return fmt.Errorf("deleting %s: %w", name, err)
			}
			return nil
		})
	}
}

// The manager's RBAC has update on Leases cluster-wide (the escalation check
// of the heartbeat Roles it writes needs it); the fleetlet-manager-leases
// policy keeps it to fleetlet's own. Before: it could take over
// kube-scheduler's leader election or renew a real node's Lease.
func testManagerLeasesPolicy(t *testing.T, admin client.Client) {
	ctx := context.Background()
	manager := as(t, "system:serviceaccount:"+releaseNS+":"+managerSA)
	lease := func(ns, name string) *coordinationv1.Lease {
		l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("someone")}}
		if err := admin.Create(ctx, l); !apierrors.IsAlreadyExists(err) {
			require.NoError(t, err)
		}
		return l
	}
	for _, ns := range []string{"kube-system", "kube-node-lease"} {
		if err := admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); !apierrors.IsAlreadyExists(err) {
			require.NoError(t, err)
		}
	}
	update := func(l *coordinationv1.Lease) error {
		var got coordinationv1.Lease
		if err := manager.Get(ctx, client.ObjectKeyFromObject(l), &got); err != nil {
			return err
		}
		got.Spec.HolderIdentity = ptr.To("fleetlet")
		return manager.Update(ctx, &got)
	}
	for _, l := range []*coordinationv1.Lease{lease("kube-system", "kube-scheduler"), lease("kube-node-lease", "a-real-node")} {
		eventually(t, "the Lease policy refusing "+l.Namespace+"/"+l.Name, func() error {
			err := update(l)
			if err == nil {
				return fmt.Errorf("the manager took over Lease %s/%s", l.Namespace, l.Name)
			}
			if !strings.Contains(err.Error(), "fleetlet writes only its own Leases") {
				return err
			}
			return nil
		})
	}
	for _, l := range []*coordinationv1.Lease{lease(releaseNS, "fleetlet-manager"), lease("kube-node-lease", "fleetlet-cluster-2"), lease("team-a", "fleetlet-source-cluster-2")} {
		assert.NoError(t, update(l), "the manager may not renew its own Lease %s/%s", l.Namespace, l.Name)
	}
}

// fleetlet-source lets a source write ConfigMaps, Secrets and
// ServiceAccounts where it is admitted (its copies); the
// fleetlet-source-copies policy keeps it to objects labelled as its own.
// Before: a source could change or delete any of the target's.
// (cluster-2's RoleBinding to fleetlet-source in team-a is
// testChaperonPolicy's.)
func testSourceCopiesPolicy(t *testing.T, admin client.Client) {
	ctx := context.Background()
	src := as(t, "system:serviceaccount:team-a:fleetlet-source-cluster-2")
	cm := func(name, parent string) *corev1.ConfigMap {
		c := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: name}, Data: map[string]string{"a": "b"}}
		if parent != "" {
			c.Labels = map[string]string{"multicluster.fleetlet.io/parent-cluster": parent}
		}
		return c
	}
	theirs := cm("the-targets-own", "")
	require.NoError(t, admin.Create(ctx, theirs))
	refused := func(what string, err error) {
		t.Helper()
		assert.ErrorContainsf(t, err, "source cluster-2 ", "%s: %v, want the policy's refusal", what, err)
	}
	eventually(t, "the copies policy in force", func() error {
		err := src.Create(ctx, cm("unlabelled", ""))
		if err == nil {
			_ = admin.Delete(ctx, cm("unlabelled", ""))
			return errNotYet
		}
		if !strings.Contains(err.Error(), "writes only its own copies") {
			return err
		}
		return nil
	})
	refused("creating a copy labelled as another source's", src.Create(ctx, cm("forged", "cluster-3")))
	var got corev1.ConfigMap
	require.NoError(t, src.Get(ctx, client.ObjectKeyFromObject(theirs), &got))
	got.Data["a"] = "changed"
	refused("updating the target's own ConfigMap", src.Update(ctx, &got))
	got.Labels = map[string]string{"multicluster.fleetlet.io/parent-cluster": "cluster-2"}
	refused("adopting the target's own ConfigMap", src.Update(ctx, &got))
	refused("deleting the target's own ConfigMap", src.Delete(ctx, theirs))

	mine := cm("a-copy", "cluster-2")
	require.NoError(t, src.Create(ctx, mine), "creating its own copy")
	mine.Data["a"] = "changed"
	assert.NoError(t, src.Update(ctx, mine), "updating its own copy")
	assert.NoError(t, src.Delete(ctx, mine), "deleting its own copy")
}

// testDelegatePodsPolicy: a pod that claims to be a source's candidate or
// delegate (parent labels, a PodChaperon controller) is created only by
// that source (or fleetlet for its own cluster), and only with the
// candidate scheduler's name. Before: any user allowed to create pods
// could pose as another source's delegate in a shared namespace (its
// chaperon then adopted it), and a webhook that rewrote schedulerName made
// every candidate run before the election.
func testDelegatePodsPolicy(t *testing.T, admin client.Client) {
	ctx := context.Background()
	cluster2 := as(t, "system:serviceaccount:team-a:fleetlet-source-cluster-2")
	own := chaperon("delegates-owner", "cluster-2")
	require.NoError(t, cluster2.Create(ctx, own))
	pod := func(name, parent, scheduler string, owned bool) *corev1.Pod {
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: name},
			Spec:       corev1.PodSpec{SchedulerName: scheduler, Containers: []corev1.Container{{Name: "c", Image: "nginx"}}},
		}
		if parent != "" {
			p.Labels = map[string]string{"multicluster.fleetlet.io/parent-cluster": parent, "multicluster.fleetlet.io/parent-uid": "0000"}
		}
		if owned {
			p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "multicluster.fleetlet.io/v1alpha1", Kind: "PodChaperon",
				Name: own.GetName(), UID: own.GetUID(), Controller: ptr.To(true)}}
		}
		return p
	}
	const candidate = "fleetlet-candidate"
	cluster3 := as(t, "system:serviceaccount:team-a:fleetlet-source-cluster-3")
	eventually(t, "the delegate pods policy in force", func() error {
		err := cluster3.Create(ctx, pod("posing", "cluster-2", candidate, true))
		if err == nil {
			_ = admin.Delete(ctx, pod("posing", "", "", false))
			return errNotYet
		}
		if !strings.Contains(err.Error(), "must be 'cluster-3', not 'cluster-2'") {
			return err
		}
		return nil
	})
	for _, tc := range []struct {
		name    string
		c       client.Client
		pod     *corev1.Pod
		wantErr string
	}{
		{name: "a source, its own candidate", c: cluster2, pod: pod("candidate", "cluster-2", candidate, true)},
		{name: "a source's candidate rewritten to another scheduler", c: cluster2, pod: pod("rewritten", "cluster-2", "volcano", true),
			wantErr: "set the candidate's schedulerName to 'volcano'"},
		{name: "another source posing with the owner only", c: cluster3, pod: pod("owner-only", "", candidate, true), wantErr: "must be 'cluster-3', not ''"},
		{name: "a user, as a chaperon's pod", c: as(t, "alice"), pod: pod("alice-owned", "", candidate, true), wantErr: "alice may not create a pod that claims"},
		{name: "a user, with the labels", c: as(t, "alice"), pod: pod("alice-labelled", "cluster-2", candidate, false), wantErr: "alice may not create a pod that claims"},
		{name: "a user, a plain pod", c: as(t, "alice"), pod: pod("alice-plain", "", "", false)},
		{name: "a cluster administrator", c: admin, pod: pod("admin", "cluster-2", "default-scheduler", true)},
	} {
		err := tc.c.Create(ctx, tc.pod)
		assert.Falsef(t, tc.wantErr == "" && err != nil, "%s: %v", tc.name, err)
		assert.Falsef(t, tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)), "%s: %v, want an error with %q", tc.name, err, tc.wantErr)
	}
}

// testSourcePodUpdatesPolicy: fleetlet-source lets a source patch pods (the
// chaperon controller passes a user's changes to a running proxy on as the
// source); the fleetlet-source-pod-updates policy holds it to its own
// delegates, their parent labels unchanged. Runs after
// testDelegatePodsPolicy, whose pods it patches.
func testSourcePodUpdatesPolicy(t *testing.T) {
	ctx := context.Background()
	cluster2 := as(t, "system:serviceaccount:team-a:fleetlet-source-cluster-2")
	cluster3 := as(t, "system:serviceaccount:team-a:fleetlet-source-cluster-3")
	label := func(k, v string) client.Patch {
		return client.RawPatch(types.MergePatchType, fmt.Appendf(nil, `{"metadata":{"labels":{%q:%q}}}`, k, v))
	}
	podNamed := func(name string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: name}}
	}
	eventually(t, "the source pod updates policy in force", func() error {
		err := cluster3.Patch(ctx, podNamed("candidate"), label("tier", "x"))
		if err == nil {
			return errNotYet
		}
		if !strings.Contains(err.Error(), "patches only its own delegates") {
			return err
		}
		return nil
	})
	for _, tc := range []struct {
		name    string
		c       client.Client
		pod     string
		patch   client.Patch
		wantErr string
	}{
		{name: "its own delegate's labels", c: cluster2, pod: "candidate", patch: label("tier", "web")},
		{name: "its own delegate passed to another source", c: cluster2, pod: "candidate", patch: label("multicluster.fleetlet.io/parent-cluster", "cluster-3"),
			wantErr: "may not change the parent labels"},
		{name: "another source's delegate", c: cluster3, pod: "candidate", patch: label("tier", "db"), wantErr: "patches only its own delegates"},
		{name: "a pod of the target's own", c: cluster2, pod: "alice-plain", patch: label("tier", "web"), wantErr: "patches only its own delegates"},
	} {
		err := tc.c.Patch(ctx, podNamed(tc.pod), tc.patch)
		assert.Falsef(t, tc.wantErr == "" && err != nil, "%s: %v", tc.name, err)
		assert.Falsef(t, tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)), "%s: %v, want an error with %q", tc.name, err, tc.wantErr)
	}
}

// testManagerCSRPolicy: RBAC lets the manager approve any kubelet-serving
// CSR; the fleetlet-manager-csr-approvals policy holds it to the ones it
// requested itself. Before: a CSR any kubelet (or anyone who may create
// CSRs) requested could be approved with the manager's rights.
func testManagerCSRPolicy(t *testing.T, admin client.Client) {
	ctx := context.Background()
	managerUser := "system:serviceaccount:" + releaseNS + ":" + managerSA
	manager := kubernetes.NewForConfigOrDie(impersonated(t, managerUser))
	csr := func(name string) *certificatesv1.CertificateSigningRequest {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		require.NoError(t, err)
		der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
			Subject: pkix.Name{CommonName: "system:node:" + name, Organization: []string{"system:nodes"}}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}}, key)
		require.NoError(t, err)
		return &certificatesv1.CertificateSigningRequest{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: certificatesv1.CertificateSigningRequestSpec{
			Request:    pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}),
			SignerName: certificatesv1.KubeletServingSignerName,
			Usages:     []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageServerAuth},
		}}
	}
	approve := func(c *certificatesv1.CertificateSigningRequest) error {
		c.Status.Conditions = append(c.Status.Conditions, certificatesv1.CertificateSigningRequestCondition{
			Type: certificatesv1.CertificateApproved, Status: corev1.ConditionTrue, Reason: "Test"})
		_, err := manager.CertificatesV1().CertificateSigningRequests().UpdateApproval(ctx, c.Name, c, metav1.UpdateOptions{})
		return err
	}
	require.NoError(t, admin.Create(ctx, csr("some-kubelet")))
	eventually(t, "the CSR policy refusing the manager another's CSR", func() error {
		var c certificatesv1.CertificateSigningRequest
		if err := admin.Get(ctx, types.NamespacedName{Name: "some-kubelet"}, &c); err != nil {
			return err
		}
		err := approve(&c)
		require.Error(t, err, "the manager approved a CSR another user requested")
		if !strings.Contains(err.Error(), "fleetlet approves only the kubelet-serving CSRs it requested") {
			return err
		}
		return nil
	})
	own, err := manager.CertificatesV1().CertificateSigningRequests().Create(ctx, csr("fleetlet-cluster-2"), metav1.CreateOptions{})
	require.NoError(t, err)
	assert.NoError(t, approve(own), "the manager approving its own CSR")
}
