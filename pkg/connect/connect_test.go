package connect

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	authorizationv1 "k8s.io/api/authorization/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
	"github.com/fleetlet/fleetlet/pkg/source/fleet"
	"github.com/fleetlet/fleetlet/pkg/target/access"
	"github.com/fleetlet/fleetlet/pkg/testenv"
)

func need(t *testing.T) {
	t.Helper()
	testenv.Need(t, envA)
	testenv.Need(t, envB)
}

func baseOptions(sourceName, targetName string) Options {
	return Options{
		Source:     envA.Config,
		Target:     envB.Config,
		SourceName: sourceName,
		TargetName: targetName,
		Timeout:    waitTimeout,
	}
}

func mustConnect(t *testing.T, opts Options) *Result {
	t.Helper()
	res, err := Connect(context.Background(), opts)
	require.NoErrorf(t, err, "Connect (changes: %v)", res)
	return res
}

// newNamespaceIn creates the same namespace name in each cluster.
func newNamespaceIn(t *testing.T, clients ...client.Client) string {
	t.Helper()
	name := fmt.Sprintf("ns-%d", time.Now().UnixNano())
	for _, c := range clients {
		require.NoError(t, c.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}))
	}
	return name
}

func gone(c client.Client, obj client.Object, namespace, name string) error {
	err := c.Get(context.Background(), client.ObjectKey{Namespace: namespace, Name: name}, obj)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	return fmt.Errorf("%T %s/%s still exists", obj, namespace, name)
}

// kubeconfigFromSecret reads the kubeconfig connect wrote in A, through the
// function the source's target registry uses.
func kubeconfigFromSecret(t *testing.T, namespace, name string) *rest.Config {
	t.Helper()
	var s corev1.Secret
	require.NoError(t, clientA.Get(context.Background(), client.ObjectKey{Namespace: namespace, Name: name}, &s))
	cfg, err := fleet.RESTConfigFromKubeconfig(s.Data[v1alpha1.DefaultKubeconfigKey], "")
	require.NoError(t, err, "the kubeconfig connect wrote is refused")
	return cfg
}

type accessCheck struct {
	verb, group, resource, namespace, name string
	allowed                                bool
}

func checkAccess(t *testing.T, cfg *rest.Config, checks []accessCheck) {
	t.Helper()
	cs := kubernetes.NewForConfigOrDie(cfg)
	for _, c := range checks {
		r, err := cs.AuthorizationV1().SelfSubjectAccessReviews().Create(context.Background(), &authorizationv1.SelfSubjectAccessReview{
			Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{
				Verb: c.verb, Group: c.group, Resource: c.resource, Namespace: c.namespace, Name: c.name,
			}},
		}, metav1.CreateOptions{})
		require.NoError(t, err)
		assert.Equalf(t, c.allowed, r.Status.Allowed, "can %s %s.%s %s in %q", c.verb, c.resource, c.group, c.name, c.namespace)
	}
}

// renewLease does what the source's heartbeat does, with the produced
// credentials, in the kubeconfig context's namespace.
func renewLease(t *testing.T, cfg *rest.Config, namespace, sourceName string) {
	t.Helper()
	c, err := client.New(cfg, client.Options{Scheme: Scheme()})
	require.NoError(t, err)
	ctx := context.Background()
	lease := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: access.HeartbeatLeaseName(sourceName)},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptr.To(sourceName), LeaseDurationSeconds: ptr.To(int32(40))},
	}
	require.NoError(t, c.Create(ctx, lease), "creating the heartbeat Lease with the produced credentials")
	lease.Spec.RenewTime = &metav1.MicroTime{Time: time.Now()}
	require.NoError(t, c.Update(ctx, lease), "renewing the heartbeat Lease with the produced credentials")
}

func actions(res *Result) []string {
	var out []string
	for _, c := range res.Changes {
		out = append(out, c.String())
	}
	return out
}

func TestConnectClusterWide(t *testing.T) {
	need(t)
	ctx := context.Background()
	opts := baseOptions("cluster-a", "cluster-b")
	// Objects connect must never touch.
	foreignSecret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "fleetlet-target-unrelated"}, StringData: map[string]string{"config": "x"}}
	require.NoError(t, clientA.Create(ctx, foreignSecret))
	selected := newNamespaceIn(t, clientB)
	unselected := newNamespaceIn(t, clientB)

	res := mustConnect(t, opts)
	t.Logf("first connect:\n%s", strings.Join(actions(res), "\n"))

	// Target cluster: the ClusterSource, Ready, with its token Secret.
	var cs v1alpha1.ClusterSource
	require.NoError(t, clientB.Get(ctx, client.ObjectKey{Name: "cluster-a"}, &cs))
	assert.Falsef(t, cs.Spec.ServiceAccountNamespace != DefaultFleetletNamespace || cs.Labels[LabelManagedBy] != ManagedBy, "ClusterSource = spec %+v, labels %v", cs.Spec, cs.Labels)
	var token corev1.Secret
	require.NoError(t, clientB.Get(ctx, client.ObjectKey{Namespace: DefaultFleetletNamespace, Name: "fleetlet-source-cluster-a-token"}, &token))
	assert.Falsef(t, token.Type != corev1.SecretTypeServiceAccountToken || token.Annotations[corev1.ServiceAccountNameKey] != "fleetlet-source-cluster-a", "token Secret = type %s, annotations %v", token.Type, token.Annotations)

	// Source cluster: the kubeconfig Secret and the ClusterTarget.
	var ct v1alpha1.ClusterTarget
	require.NoError(t, clientA.Get(ctx, client.ObjectKey{Name: "cluster-b"}, &ct))
	wantRef := &v1alpha1.KubeconfigSecretReference{Name: "fleetlet-target-cluster-b", Namespace: DefaultFleetletNamespace, Key: "config"}
	assert.Falsef(t, ct.Spec.Self || ct.Spec.KubeconfigSecret == nil || *ct.Spec.KubeconfigSecret != *wantRef, "ClusterTarget spec = %+v, want kubeconfigSecret %+v", ct.Spec, wantRef)
	cfg := kubeconfigFromSecret(t, DefaultFleetletNamespace, "fleetlet-target-cluster-b")
	assert.Equal(t, string(token.Data["token"]), cfg.BearerToken, "the kubeconfig does not hold the token Secret's token")

	// The identity: reads everywhere it must, writes only in the
	// namespaces labelled for it.
	var nsObj corev1.Namespace
	require.NoError(t, clientB.Get(ctx, client.ObjectKey{Name: selected}, &nsObj))
	nsObj.Labels[access.DefaultNamespaceLabel("cluster-a")] = "true"
	require.NoError(t, clientB.Update(ctx, &nsObj))
	testenv.Eventually(t, waitTimeout, "ClusterSource bound in the labelled namespace", func() error {
		if err := clientB.Get(ctx, client.ObjectKey{Name: "cluster-a"}, &cs); err != nil {
			return err
		}
		if cs.Status.NamespaceCount != 1 {
			return fmt.Errorf("namespaceCount = %d", cs.Status.NamespaceCount)
		}
		return nil
	})
	checkAccess(t, cfg, []accessCheck{
		{verb: "create", group: v1alpha1.GroupName, resource: "podchaperons", namespace: selected, allowed: true},
		{verb: "create", group: v1alpha1.GroupName, resource: "podchaperons", namespace: unselected, allowed: false},
		{verb: "list", resource: "namespaces", allowed: true},
		{verb: "get", group: v1alpha1.GroupName, resource: "clustersummaries", name: "default", allowed: true},
		{verb: "delete", resource: "nodes", name: "n", allowed: false},
		{verb: "create", resource: "pods", namespace: selected, allowed: true}, // via the chaperon controller's impersonation
		{verb: "delete", resource: "pods", namespace: selected, allowed: false},
	})
	renewLease(t, cfg, DefaultFleetletNamespace, "cluster-a")
	// A real request, not only the authorizer's opinion.
	var namespaces corev1.NamespaceList
	assert.NoError(t, mustClient(t, cfg).List(ctx, &namespaces), "listing namespaces with the produced credentials")

	t.Run("connect again changes nothing and keeps the token", func(t *testing.T) {
		before := resourceVersions(t)
		res := mustConnect(t, opts)
		assert.Falsef(t, res.Changed(), "second connect wrote something:\n%s", strings.Join(actions(res), "\n"))
		assert.Empty(t, diffVersions(before, resourceVersions(t)), "objects changed by the second connect")
	})

	t.Run("a revoked token is replaced", func(t *testing.T) {
		require.NoError(t, clientB.Delete(ctx, &token))
		testenv.Eventually(t, waitTimeout, "old token Secret gone", func() error { return gone(clientB, &corev1.Secret{}, token.Namespace, token.Name) })
		res := mustConnect(t, opts)
		var updated bool
		for _, c := range res.Changes {
			if c.Kind == "Secret" && c.Name == "fleetlet-target-cluster-b" && c.Action == Updated {
				updated = true
			}
		}
		assert.Truef(t, updated, "kubeconfig Secret not updated with the new token:\n%s", strings.Join(actions(res), "\n"))
		cfg := kubeconfigFromSecret(t, DefaultFleetletNamespace, "fleetlet-target-cluster-b")
		checkAccess(t, cfg, []accessCheck{{verb: "list", resource: "namespaces", allowed: true}})
	})

	t.Run("disconnect removes what connect created and nothing else", func(t *testing.T) {
		res, err := Disconnect(ctx, opts)
		require.NoError(t, err)
		t.Logf("disconnect:\n%s", strings.Join(actions(res), "\n"))
		for _, check := range []error{
			gone(clientA, &v1alpha1.ClusterTarget{}, "", "cluster-b"),
			gone(clientA, &corev1.Secret{}, DefaultFleetletNamespace, "fleetlet-target-cluster-b"),
			gone(clientB, &corev1.Secret{}, DefaultFleetletNamespace, "fleetlet-source-cluster-a-token"),
			gone(clientB, &v1alpha1.ClusterSource{}, "", "cluster-a"),
		} {
			assert.NoError(t, check)
		}
		for _, c := range []struct {
			c   client.Client
			obj client.Object
			key client.ObjectKey
		}{
			{clientA, &corev1.Secret{}, client.ObjectKeyFromObject(foreignSecret)},
			{clientA, &corev1.Namespace{}, client.ObjectKey{Name: DefaultFleetletNamespace}},
			{clientB, &corev1.Namespace{}, client.ObjectKey{Name: DefaultFleetletNamespace}},
			{clientB, &corev1.Namespace{}, client.ObjectKey{Name: selected}},
		} {
			assert.NoErrorf(t, c.c.Get(ctx, c.key, c.obj), "%T %s", c.obj, c.key)
		}
		res, err = Disconnect(ctx, opts)
		require.NoError(t, err, "second disconnect")
		assert.Falsef(t, res.Changed(), "second disconnect deleted something:\n%s", strings.Join(actions(res), "\n"))
	})
}

func mustClient(t *testing.T, cfg *rest.Config) client.Client {
	t.Helper()
	c, err := client.New(cfg, client.Options{Scheme: Scheme()})
	require.NoError(t, err)
	return c
}

// resourceVersions of every object of the kinds connect writes, in both
// clusters.
func resourceVersions(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	ctx := context.Background()
	for cluster, c := range map[string]client.Client{"A": clientA, "B": clientB} {
		for _, list := range []client.ObjectList{&corev1.SecretList{}, &v1alpha1.ClusterTargetList{}, &v1alpha1.TargetList{}, &v1alpha1.SourceList{}, &v1alpha1.ClusterSourceList{}, &corev1.NamespaceList{}, &corev1.ServiceAccountList{}} {
			require.NoError(t, c.List(ctx, list))
			items, err := metaItems(list)
			require.NoError(t, err)
			for _, o := range items {
				out[fmt.Sprintf("%s %T %s/%s", cluster, o, o.GetNamespace(), o.GetName())] = o.GetResourceVersion()
			}
		}
	}
	return out
}

func metaItems(list client.ObjectList) ([]client.Object, error) {
	var out []client.Object
	switch l := list.(type) {
	case *corev1.SecretList:
		for i := range l.Items {
			out = append(out, &l.Items[i])
		}
	case *v1alpha1.ClusterTargetList:
		for i := range l.Items {
			out = append(out, &l.Items[i])
		}
	case *v1alpha1.TargetList:
		for i := range l.Items {
			out = append(out, &l.Items[i])
		}
	case *v1alpha1.SourceList:
		for i := range l.Items {
			out = append(out, &l.Items[i])
		}
	case *v1alpha1.ClusterSourceList:
		for i := range l.Items {
			out = append(out, &l.Items[i])
		}
	case *corev1.NamespaceList:
		for i := range l.Items {
			out = append(out, &l.Items[i])
		}
	case *corev1.ServiceAccountList:
		for i := range l.Items {
			out = append(out, &l.Items[i])
		}
	default:
		return nil, fmt.Errorf("unknown list %T", list)
	}
	return out, nil
}

func diffVersions(before, after map[string]string) string {
	var diffs []string
	for k, v := range after {
		if before[k] != v {
			diffs = append(diffs, fmt.Sprintf("%s: %q → %q", k, before[k], v))
		}
	}
	for k := range before {
		if _, ok := after[k]; !ok {
			diffs = append(diffs, k+": deleted")
		}
	}
	return strings.Join(diffs, "; ")
}

func TestConnectNamespace(t *testing.T) {
	need(t)
	ctx := context.Background()
	ns := newNamespaceIn(t, clientA, clientB)
	other := newNamespaceIn(t, clientB)
	opts := baseOptions("cluster-a", "cluster-b")
	opts.Namespace = ns

	res := mustConnect(t, opts)
	t.Logf("connect:\n%s", strings.Join(actions(res), "\n"))
	var src v1alpha1.Source
	require.NoError(t, clientB.Get(ctx, client.ObjectKey{Namespace: ns, Name: "cluster-a"}, &src))
	assert.NoError(t, clientB.Get(ctx, client.ObjectKey{Namespace: ns, Name: "fleetlet-source-cluster-a-token"}, &corev1.Secret{}), "token Secret")
	var tgt v1alpha1.Target
	require.NoError(t, clientA.Get(ctx, client.ObjectKey{Namespace: ns, Name: "cluster-b"}, &tgt))
	assert.Falsef(t, tgt.Spec.KubeconfigSecret == nil || *tgt.Spec.KubeconfigSecret != (v1alpha1.KubeconfigSecretReference{Name: "fleetlet-target-cluster-b", Key: "config"}), "Target spec = %+v", tgt.Spec)
	cfg := kubeconfigFromSecret(t, ns, "fleetlet-target-cluster-b")
	checkAccess(t, cfg, []accessCheck{
		{verb: "create", group: v1alpha1.GroupName, resource: "podchaperons", namespace: ns, allowed: true},
		{verb: "create", group: v1alpha1.GroupName, resource: "podchaperons", namespace: other, allowed: false},
		{verb: "create", resource: "configmaps", namespace: ns, allowed: true},
		{verb: "create", resource: "configmaps", namespace: other, allowed: false},
		{verb: "list", resource: "namespaces", allowed: true},
		{verb: "delete", resource: "nodes", name: "n", allowed: false},
	})
	renewLease(t, cfg, ns, "cluster-a")

	before := resourceVersions(t)
	res = mustConnect(t, opts)
	assert.Falsef(t, res.Changed(), "second connect wrote something:\n%s", strings.Join(actions(res), "\n"))
	assert.Empty(t, diffVersions(before, resourceVersions(t)), "objects changed by the second connect")

	_, err := Disconnect(ctx, opts)
	require.NoError(t, err)
	// The Source's finalizer is the controller's: it deletes the
	// ClusterRoleBinding first.
	testenv.Eventually(t, waitTimeout, "everything connect created is gone", func() error {
		return errors.Join(
			gone(clientA, &v1alpha1.Target{}, ns, "cluster-b"),
			gone(clientA, &corev1.Secret{}, ns, "fleetlet-target-cluster-b"),
			gone(clientB, &corev1.Secret{}, ns, "fleetlet-source-cluster-a-token"),
			gone(clientB, &v1alpha1.Source{}, ns, "cluster-a"),
		)
	})
	for _, c := range []client.Client{clientA, clientB} {
		assert.NoErrorf(t, c.Get(ctx, client.ObjectKey{Name: ns}, &corev1.Namespace{}), "namespace %s", ns)
	}
}

func TestConnectSelf(t *testing.T) {
	need(t)
	ctx := context.Background()
	opts := Options{Source: envA.Config, TargetName: "self-1", Self: true}
	mustConnect(t, opts)
	var ct v1alpha1.ClusterTarget
	require.NoError(t, clientA.Get(ctx, client.ObjectKey{Name: "self-1"}, &ct))
	assert.Falsef(t, !ct.Spec.Self || ct.Spec.KubeconfigSecret != nil, "ClusterTarget spec = %+v, want self", ct.Spec)
	res := mustConnect(t, opts)
	assert.Falsef(t, res.Changed(), "second connect wrote something:\n%s", strings.Join(actions(res), "\n"))

	// A namespaced Target never gets the manager's own credentials.
	ns := newNamespaceIn(t, clientA)
	nsOpts := opts
	nsOpts.Namespace = ns
	_, err := Connect(ctx, nsOpts)
	assert.ErrorContainsf(t, err, "--self makes a ClusterTarget only", "connect --self --namespace: %v, want a refusal", err)
	err = clientA.Get(ctx, client.ObjectKey{Namespace: ns, Name: "self-1"}, &v1alpha1.Target{})
	assert.Truef(t, apierrors.IsNotFound(err), "a refused connect made a Target: %v", err)

	_, err = Disconnect(ctx, opts)
	require.NoError(t, err)
	assert.NoError(t, gone(clientA, &v1alpha1.ClusterTarget{}, "", "self-1"))
}

// Without fleetlet in the target cluster, connect says so after the
// timeout instead of hanging.
func TestConnectWithoutFleetletTimesOut(t *testing.T) {
	need(t)
	opts := baseOptions("cluster-x", "cluster-a")
	opts.Target = envA.Config // no Source controller runs in A
	opts.TargetContext = "kind-a"
	opts.Timeout = 2 * time.Second
	start := time.Now()
	_, err := Connect(context.Background(), opts)
	require.Error(t, err, "Connect succeeded without fleetlet in the target cluster")
	for _, want := range []string{`is fleetlet running in cluster "kind-a"?`, "ClusterSource cluster-x", "2s"} {
		assert.Containsf(t, err.Error(), want, "error %q does not mention %q", err, want)
	}
	took := time.Since(start)
	assert.Falsef(t, took > 10*time.Second, "took %s with a 2s timeout", took)
	_, err = Disconnect(context.Background(), opts)
	assert.NoError(t, err)
}

func TestConnectRefusesSomeoneElsesTarget(t *testing.T) {
	need(t)
	ctx := context.Background()
	foreign := &v1alpha1.ClusterTarget{ObjectMeta: metav1.ObjectMeta{Name: "theirs"}, Spec: v1alpha1.TargetSpec{Self: true}}
	require.NoError(t, clientA.Create(ctx, foreign))
	opts := baseOptions("cluster-a2", "theirs")
	_, err := Connect(ctx, opts)
	require.ErrorContainsf(t, err, "was not created by kubectl-fleetlet", "error = %v, want a refusal", err)
	var after v1alpha1.ClusterTarget
	require.NoError(t, clientA.Get(ctx, client.ObjectKeyFromObject(foreign), &after))
	assert.Equal(t, foreign.ResourceVersion, after.ResourceVersion, "someone else's ClusterTarget was modified")
	// disconnect leaves it too, and cleans up the rest.
	res, err := Disconnect(ctx, opts)
	require.NoError(t, err)
	assert.NoErrorf(t, clientA.Get(ctx, client.ObjectKeyFromObject(foreign), &after), "someone else's ClusterTarget deleted (%v)", actions(res))
	assert.NoError(t, gone(clientB, &v1alpha1.ClusterSource{}, "", "cluster-a2"))
}

func TestStatus(t *testing.T) {
	need(t)
	ctx := context.Background()
	opts := Options{Source: envA.Config, TargetName: "status-self", Self: true}
	mustConnect(t, opts)
	defer func() { _, _ = Disconnect(ctx, opts) }()
	ns := newNamespaceIn(t, clientA)
	nsTarget := &v1alpha1.Target{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "status-ns"},
		Spec: v1alpha1.TargetSpec{KubeconfigSecret: &v1alpha1.KubeconfigSecretReference{Name: "nowhere"}}}
	require.NoError(t, clientA.Create(ctx, nsTarget))
	defer func() { _ = clientA.Delete(ctx, nsTarget) }()

	// What the target registry and the virtual node would report.
	var ct v1alpha1.ClusterTarget
	require.NoError(t, clientA.Get(ctx, client.ObjectKey{Name: "status-self"}, &ct))
	ct.Status.VirtualNodeName = "fleetlet-status-self"
	ct.Status.Conditions = []metav1.Condition{{Type: "Ready", Status: metav1.ConditionTrue, Reason: "Connected", Message: "ok", LastTransitionTime: metav1.Now()}}
	require.NoError(t, clientA.Status().Update(ctx, &ct))
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "fleetlet-status-self"}}
	require.NoError(t, clientA.Create(ctx, node))
	defer func() { _ = clientA.Delete(ctx, node) }()
	node.Status.Allocatable = corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("7"),
		corev1.ResourceMemory: resource.MustParse("30Gi"),
		corev1.ResourcePods:   resource.MustParse("110"),
	}
	require.NoError(t, clientA.Status().Update(ctx, node))

	rows, err := Status(ctx, envA.Config)
	require.NoError(t, err)
	byName := map[string]TargetStatus{}
	for _, r := range rows {
		byName[r.Name] = r
	}
	self := byName["status-self"]
	assert.Falsef(t, self.Kind != "ClusterTarget" || self.Ready != "True" || self.Reason != "Connected" || !self.NodeFound || self.Allocatable.Cpu().String() != "7", "status-self row = %+v", self)
	r := byName["status-ns"]
	assert.Falsef(t, r.Kind != "Target" || r.Namespace != ns || r.Ready != "Unknown" || r.NodeFound, "status-ns row = %+v", r)

	var out bytes.Buffer
	require.NoError(t, WriteStatus(&out, rows))
	t.Logf("\n%s", out.String())
	var line string
	for _, l := range strings.Split(out.String(), "\n") {
		if strings.Contains(l, "status-self") {
			line = l
		}
	}
	for _, want := range []string{"ClusterTarget", "True", "Connected", "fleetlet-status-self", "7", "30Gi", "110"} {
		assert.Containsf(t, line, want, "row %q lacks %q", line, want)
	}
	assert.Truef(t, strings.HasPrefix(out.String(), "KIND"), "no header:\n%s", out.String())
}
