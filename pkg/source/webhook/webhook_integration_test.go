package webhook

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
	"github.com/fleetlet/fleetlet/pkg/proxy"
	"github.com/fleetlet/fleetlet/pkg/testenv"
)

func createPod(t *testing.T, pod *corev1.Pod) *corev1.Pod {
	t.Helper()
	require.NoError(t, k8sClient.Create(context.Background(), pod), "creating pod %s/%s", pod.Namespace, pod.Name)
	got := &corev1.Pod{}
	require.NoError(t, k8sClient.Get(context.Background(), client.ObjectKeyFromObject(pod), got))
	return got
}

func gateNames(p *corev1.Pod) []string {
	var out []string
	for _, g := range p.Spec.SchedulingGates {
		out = append(out, g.Name)
	}
	return out
}

// A pod the source scheduler could not bind to a virtual node as the user
// wrote it (claim-backed volume and its mount, hostPort, affinity, node
// selector, spread, its own gate and finalizer) becomes a proxy the API
// server accepts, with the user's spec sealed on it; the election can
// later pin it by adding kubernetes.io/hostname to its nodeSelector.
func TestIntegrationProxyPod(t *testing.T) {
	testenv.Need(t, env)
	ctx := context.Background()
	ns := newNamespace(t, enabled())
	user := makePod(ns, "web").
		pvc("data", "data-0").mount("app", "data", "/data").
		emptyDir("cache").mount("app", "cache", "/cache").
		port("app", 8080, 80).zoneAffinity("eu-1a").nodeSelector("disk", "ssd").spread(corev1.LabelTopologyZone).
		gates("kueue.x-k8s.io/admission").finalizers("example.com/keep").
		annotate(v1alpha1.AnnotationClusterSelector, "region=eu").
		annotate(v1alpha1.AnnotationSourceSpec, `{"v":1,"mac":"forged","spec":{}}`).
		obj()
	user.Spec.Tolerations = nil // let the API server add its defaults
	user.Spec.TerminationGracePeriodSeconds = nil
	p := createPod(t, user)

	assert.Empty(t, cmp.Diff([]string{"kueue.x-k8s.io/admission", v1alpha1.SchedulingGateElection}, gateNames(p)), "gates (-want,+got)")
	assert.Empty(t, cmp.Diff([]string{"example.com/keep", v1alpha1.FinalizerDelegate}, p.Finalizers), "finalizers (-want,+got)")
	assert.Empty(t, cmp.Diff(proxyNodeSelector(), p.Spec.NodeSelector), "nodeSelector (-want,+got)")
	assert.Falsef(t, p.Spec.Affinity != nil || len(p.Spec.TopologySpreadConstraints) > 0 || *p.Spec.TerminationGracePeriodSeconds != 30 || p.Spec.PreemptionPolicy == nil,
		"affinity %v, spread %v, grace %d, preemptionPolicy %v (want the API server's default kept)",
		p.Spec.Affinity, p.Spec.TopologySpreadConstraints, *p.Spec.TerminationGracePeriodSeconds, p.Spec.PreemptionPolicy)
	// A claim stays on the proxy (a StatefulSet matches its pods' claims).
	claimKept := false
	for _, v := range p.Spec.Volumes {
		claimKept = claimKept || v.PersistentVolumeClaim != nil
	}
	assert.Truef(t, claimKept, "the PVC volume was taken off the proxy: %v", p.Spec.Volumes)
	assert.Zero(t, p.Spec.Containers[0].Ports[0].HostPort, "hostPort left")
	for _, tol := range []corev1.Toleration{tolProvider, tolUnschedulable, tolNotReadyNS, tolUnreachable, tolNotReady300} {
		assert.Truef(t, proxy.HasToleration(p.Spec.Tolerations, tol), "toleration %v missing from %v", tol, p.Spec.Tolerations)
	}

	s, err := Open(p, sealKeys)
	require.NoError(t, err, "Open")
	assert.Empty(t, cmp.Diff(map[string]string{"disk": "ssd"}, s.NodeSelector), "sealed nodeSelector (-want,+got)")
	assert.Falsef(t, s.TerminationGracePeriodSeconds != nil || !proxy.HasToleration(s.Tolerations, tolUnreachable300), "sealed grace %v, tolerations %v: want no grace (the proxy keeps its own) and the API server's tolerations, as the user got them", s.TerminationGracePeriodSeconds, s.Tolerations)
	restored := p.Spec.DeepCopy()
	s.Restore(restored)
	var mounts []string
	for _, m := range restored.Containers[0].VolumeMounts {
		mounts = append(mounts, m.Name)
	}
	assert.Falsef(t, !strings.Contains(strings.Join(mounts, ","), "data,cache") || restored.Containers[0].Ports[0].HostPort != 80 || restored.Affinity == nil, "restored spec lacks the user's: mounts %v, ports %v, affinity %v", mounts, restored.Containers[0].Ports, restored.Affinity)

	// The election pins the proxy: a new nodeSelector key on a gated pod.
	pin := client.RawPatch(types.MergePatchType, []byte(`{"spec":{"nodeSelector":{"`+corev1.LabelHostname+`":"fleetlet-c2"}}}`))
	require.NoError(t, k8sClient.Patch(ctx, p, pin), "pinning the gated proxy")
	assert.Falsef(t, p.Spec.NodeSelector[corev1.LabelHostname] != "fleetlet-c2" || p.Spec.NodeSelector[v1alpha1.LabelNodeType] != v1alpha1.NodeTypeVirtualKubelet, "nodeSelector after pinning: %v", p.Spec.NodeSelector)
	// Changing an existing key is refused, as docs/design.md says.
	change := client.RawPatch(types.MergePatchType, []byte(`{"spec":{"nodeSelector":{"`+v1alpha1.LabelNodeType+`":"other"}}}`))
	err = k8sClient.Patch(ctx, p.DeepCopy(), change)
	assert.Error(t, err, "changing an existing nodeSelector key of a gated pod was accepted")
}

// Pods fleetlet leaves alone reach the API server untouched.
func TestIntegrationLeftAlone(t *testing.T) {
	testenv.Need(t, env)
	ctx := context.Background()
	plain := newNamespace(t, nil)
	on := newNamespace(t, enabled())

	// fleetlet's own namespace and kube-system, even labelled.
	for _, name := range []string{fleetletNamespace, metav1.NamespaceSystem} {
		ns := &corev1.Namespace{}
		require.NoError(t, k8sClient.Get(ctx, client.ObjectKey{Name: name}, ns))
		patch := client.MergeFrom(ns.DeepCopy())
		if ns.Labels == nil {
			ns.Labels = map[string]string{}
		}
		ns.Labels[v1alpha1.LabelEnabled] = v1alpha1.LabelEnabledValue
		require.NoError(t, k8sClient.Patch(ctx, ns, patch))
		sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: name, Name: "default"}}
		if err := k8sClient.Create(ctx, sa); !apierrors.IsAlreadyExists(err) {
			require.NoError(t, err)
		}
	}

	before := admissionsCount()
	cases := map[string]*corev1.Pod{
		"not enabled":          makePod(plain, "p").obj(),
		"fleetlet's namespace": makePod(fleetletNamespace, "p").obj(),
		"kube-system":          makePod(metav1.NamespaceSystem, "p").obj(),
		"opted out":            makePod(on, "opted-out").annotate(v1alpha1.AnnotationElect, "false").obj(),
		"a candidate":          makePod(on, "candidate").label(v1alpha1.LabelParentUID, "u").obj(),
		"a DaemonSet pod":      makePod(on, "daemon").owner("apps/v1", "DaemonSet", "ds").obj(),
		"a mirror pod":         makePod(on, "mirror").annotate(corev1.MirrorPodAnnotationKey, "x").nodeName("node-1").obj(),
	}
	for name, pod := range cases {
		t.Run(name, func(t *testing.T) {
			p := createPod(t, pod)
			assert.Falsef(t, len(p.Spec.SchedulingGates) > 0 || len(p.Finalizers) > 0 || p.Annotations[v1alpha1.AnnotationSourceSpec] != "", "pod mutated: gates %v, finalizers %v", p.Spec.SchedulingGates, p.Finalizers)
		})
	}
	// Match conditions and selectors keep all of these from calling the
	// webhook at all: they never depend on fleetlet being up.
	after := admissionsCount()
	assert.Equalf(t, before, after, "the webhook was called %v times for pods the API server should have kept from it", after-before)
	// A pod with nodeName calls it (to be refused on a virtual node) and
	// is left alone on a real node.
	p := createPod(t, makePod(on, "on-node").nodeName("node-1").obj())
	assert.False(t, len(p.Spec.SchedulingGates) > 0, "a pod with nodeName was gated")
}

// admissionsCount sums the webhook's answers.
func admissionsCount() float64 {
	var n float64
	for _, r := range []string{"mutated", "folded", "unchanged", "skipped", "refused", "error"} {
		n += testutil.ToFloat64(admissionsTotal.WithLabelValues(r))
	}
	return n
}

func TestIntegrationRefusesVirtualNode(t *testing.T) {
	testenv.Need(t, env)
	ctx := context.Background()
	ns := newNamespace(t, enabled())
	vn := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "fleetlet-it-c2", Labels: map[string]string{
		v1alpha1.LabelNodeType: v1alpha1.NodeTypeVirtualKubelet, v1alpha1.LabelCluster: "c2",
	}}}
	lookalike := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "fleetlet-it-real"}}
	for _, n := range []*corev1.Node{vn, lookalike} {
		require.NoError(t, k8sClient.Create(ctx, n))
	}
	err := k8sClient.Create(ctx, makePod(ns, "pinned").nodeName(vn.Name).obj())
	require.Falsef(t, err == nil || !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), `spec.nodeName "fleetlet-it-c2" is a fleetlet virtual node`), "err = %v, want the refusal", err)
	t.Logf("refused: %v", err)
	// A node named like one but not labelled as one is a real node.
	p := createPod(t, makePod(ns, "real").nodeName(lookalike.Name).obj())
	assert.False(t, len(p.Spec.SchedulingGates) > 0, "a pod on a real node was gated")
}

// A later webhook (a sidecar injector) adds a container, a claim-backed
// volume and its mount, and a node selector key: fleetlet is reinvoked,
// folds them into the sealed source spec and strips them again, so the
// API server accepts a proxy that can bind and the candidate gets the
// sidecar whole.
func TestIntegrationReinvocationFoldsSidecar(t *testing.T) {
	testenv.Need(t, env)
	ctx := context.Background()
	ns := newNamespace(t, enabled("fleetlet-test/sidecar", "true"))
	stop := installSidecarInjector(t)
	defer stop()

	var p *corev1.Pod
	// Wait until the API server calls the injector.
	require.NoError(t, poll(ctx, func() (bool, error) {
		dry := makePod(ns, "web").obj()
		if err := k8sClient.Create(ctx, dry, client.DryRunAll); err != nil {
			return false, err
		}
		return len(dry.Spec.Containers) == 2, nil
	}), "the sidecar injector is not called")
	folded := testutil.ToFloat64(admissionsTotal.WithLabelValues("folded"))
	p = createPod(t, makePod(ns, "web").pvc("data", "data-0").mount("app", "data", "/data").obj())
	assert.Equal(t, 1.0, testutil.ToFloat64(admissionsTotal.WithLabelValues("folded"))-folded, "fleetlet folded times, want once (reinvoked after the injector)")

	var names []string
	for _, c := range p.Spec.Containers {
		names = append(names, c.Name)
	}
	require.Empty(t, cmp.Diff([]string{"app", "sidecar"}, names), "containers (-want,+got)")
	var volumes []string
	for _, v := range p.Spec.Volumes {
		assert.Falsef(t, v.Ephemeral != nil, "ephemeral volume %q left on the proxy", v.Name)
		volumes = append(volumes, v.Name)
	}
	assert.Containsf(t, strings.Join(volumes, ","), "sidecar-tmp", "the sidecar's emptyDir was taken off: %v", volumes)
	for _, m := range p.Spec.Containers[1].VolumeMounts {
		assert.Falsef(t, m.Name == "sidecar-scratch", "the mount of a stripped volume was left: %v", m)
	}
	assert.Empty(t, cmp.Diff(proxyNodeSelector(), p.Spec.NodeSelector), "nodeSelector (-want,+got)")

	s, err := Open(p, sealKeys)
	require.NoError(t, err)
	assert.Equal(t, "true", s.NodeSelector["sidecar.example.com/ready"], "the injector's node selector was not folded in: %v", s.NodeSelector)
	restored := p.Spec.DeepCopy()
	s.Restore(restored)
	var restoredVolumes []string
	for _, v := range restored.Volumes {
		restoredVolumes = append(restoredVolumes, v.Name)
	}
	assert.Falsef(t, !strings.Contains(strings.Join(restoredVolumes, ","), "data") || !strings.Contains(strings.Join(restoredVolumes, ","), "sidecar-scratch"), "restored volumes %v: want the user's and the sidecar's", restoredVolumes)
	var scratch bool
	for _, m := range restored.Containers[1].VolumeMounts {
		scratch = scratch || (m.Name == "sidecar-scratch" && m.MountPath == "/scratch")
	}
	assert.Truef(t, scratch, "the candidate's sidecar lacks its scratch mount: %v", restored.Containers[1].VolumeMounts)
}

// installSidecarInjector serves a mutating webhook, ordered after
// fleetlet's (by name), for namespaces labelled fleetlet-test/sidecar.
func installSidecarInjector(t *testing.T) func() {
	t.Helper()
	inject := admission.HandlerFunc(func(ctx context.Context, req admission.Request) admission.Response {
		pod := &corev1.Pod{}
		if err := json.Unmarshal(req.Object.Raw, pod); err != nil {
			return admission.Errored(http.StatusBadRequest, err)
		}
		for _, c := range pod.Spec.Containers {
			if c.Name == "sidecar" {
				return admission.Allowed("already injected")
			}
		}
		orig, _ := json.Marshal(pod)
		pod.Spec.Volumes = append(pod.Spec.Volumes,
			corev1.Volume{Name: "sidecar-scratch", VolumeSource: corev1.VolumeSource{Ephemeral: &corev1.EphemeralVolumeSource{
				VolumeClaimTemplate: &corev1.PersistentVolumeClaimTemplate{Spec: corev1.PersistentVolumeClaimSpec{
					AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
					Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
				}},
			}}},
			corev1.Volume{Name: "sidecar-tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
		)
		pod.Spec.Containers = append(pod.Spec.Containers, corev1.Container{
			Name: "sidecar", Image: "registry.k8s.io/pause:3.10",
			VolumeMounts: []corev1.VolumeMount{{Name: "sidecar-scratch", MountPath: "/scratch"}, {Name: "sidecar-tmp", MountPath: "/tmp"}},
		})
		if pod.Spec.NodeSelector == nil {
			pod.Spec.NodeSelector = map[string]string{}
		}
		pod.Spec.NodeSelector["sidecar.example.com/ready"] = "true"
		mutated, _ := json.Marshal(pod)
		return admission.PatchResponseFromRaw(orig, mutated)
	})
	srv := httptest.NewUnstartedServer(&admission.Webhook{Handler: inject})
	srv.StartTLS()
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	url := srv.URL + "/inject"
	fail := admissionregistrationv1.Fail
	none := admissionregistrationv1.SideEffectClassNone
	never := admissionregistrationv1.NeverReinvocationPolicy
	mwc := &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "zz-fleetlet-test-sidecar-injector"},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{
			Name:                    "sidecar.example.com",
			ClientConfig:            admissionregistrationv1.WebhookClientConfig{URL: &url, CABundle: ca},
			Rules:                   []admissionregistrationv1.RuleWithOperations{{Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create}, Rule: admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}}}},
			FailurePolicy:           &fail,
			SideEffects:             &none,
			ReinvocationPolicy:      &never,
			AdmissionReviewVersions: []string{"v1"},
			NamespaceSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{"fleetlet-test/sidecar": "true"}},
		}},
	}
	if err := k8sClient.Create(context.Background(), mwc); err != nil {
		srv.Close()
		require.FailNow(t, err.Error())
	}
	return func() {
		_ = k8sClient.Delete(context.Background(), mwc)
		srv.Close()
	}
}

// Behind a Service (in a cluster), the manager's certificates come from
// cert-controller's rotator: the Secret gets a CA and a serving
// certificate for the Service's name, the configuration gets the CA, the
// server presents the certificate, and readyz waits for all of it.
func TestIntegrationCertRotationBehindService(t *testing.T) {
	testenv.Need(t, env)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	// A configuration like the chart's, reached through a Service (which
	// the API server never calls here: it selects no namespace).
	const name = "fleetlet-proxy-pods-service-test"
	mwc := MutatingWebhookConfiguration(ConfigurationOptions{
		Name:              name,
		FleetletNamespace: fleetletNamespace,
		ClientConfig: admissionregistrationv1.WebhookClientConfig{Service: &admissionregistrationv1.ServiceReference{
			Namespace: fleetletNamespace, Name: DefaultServiceName, Path: ptr.To(Path), Port: ptr.To[int32](443),
		}},
	})
	for i := range mwc.Webhooks {
		mwc.Webhooks[i].NamespaceSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"fleetlet-test/never": "true"}}
	}
	require.NoError(t, k8sClient.Create(ctx, mwc))
	defer func() { _ = k8sClient.Delete(context.Background(), mwc) }()

	probe := "127.0.0.1:" + itoa(freePort())
	m, err := ctrl.NewManager(env.Config, ctrl.Options{
		Scheme:                 scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: probe,
	})
	require.NoError(t, err)
	o := DefaultServerOptions()
	o.Namespace = fleetletNamespace
	o.SealKeys = StaticKeys(sealKeys)
	o.Host = "127.0.0.1"
	o.Port = freePort()
	o.CertDir = t.TempDir()
	o.CertSecretName = "fleetlet-webhook-cert-service-test"
	o.ConfigurationName = name
	require.NoError(t, Setup(ctx, m, o))
	done := make(chan error, 1)
	go func() { done <- m.Start(ctx) }()
	defer func() {
		cancel()
		assert.NoError(t, <-done, "the manager failed")
	}()
	require.NoError(t, waitReady(ctx, probe))

	secret := &corev1.Secret{}
	require.NoError(t, k8sClient.Get(ctx, client.ObjectKey{Namespace: fleetletNamespace, Name: o.CertSecretName}, secret))
	caPEM := secret.Data["ca.crt"]
	require.Falsef(t, len(caPEM) == 0 || len(secret.Data["tls.crt"]) == 0, "the certificate Secret holds %d keys", len(secret.Data))
	got := &admissionregistrationv1.MutatingWebhookConfiguration{}
	require.NoError(t, k8sClient.Get(ctx, client.ObjectKey{Name: name}, got))
	assert.Equal(t, string(caPEM), string(got.Webhooks[0].ClientConfig.CABundle), "the configuration's CA bundle is not the Secret's CA")
	onDisk, err := os.ReadFile(filepath.Join(o.CertDir, "tls.crt"))
	assert.Falsef(t, err != nil || string(onDisk) != string(secret.Data["tls.crt"]), "the certificate folder does not hold the Secret's certificate (%v)", err)

	// The server presents a certificate the API server would trust for
	// the Service's name.
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	conn, err := tls.Dial("tcp", "127.0.0.1:"+itoa(o.Port), &tls.Config{
		RootCAs:    pool,
		ServerName: DefaultServiceName + "." + fleetletNamespace + ".svc",
		MinVersion: tls.VersionTLS12,
	})
	require.NoError(t, err, "TLS to the webhook server with the Service's name and the injected CA")
	_ = conn.Close()
}

func itoa(i int) string { return strconv.Itoa(i) }

// With rotation off (cert-manager), the server presents the certificate in
// its folder, and a new one written there replaces it without a restart.
func TestIntegrationCertsFromFolder(t *testing.T) {
	testenv.Need(t, env)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dir := t.TempDir()
	ca, err := newLocalCA(time.Now(), time.Hour)
	require.NoError(t, err)
	writePair := func() []byte {
		certPEM, keyPEM, err := ca.issue([]string{"127.0.0.1"}, time.Now(), time.Hour)
		require.NoError(t, err)
		require.NoError(t, writeFileIfChanged(dir, "tls.key", keyPEM, 0o600))
		require.NoError(t, writeFileIfChanged(dir, "tls.crt", certPEM, 0o644))
		block, _ := pem.Decode(certPEM)
		return block.Bytes
	}
	first := writePair()

	probe := "127.0.0.1:" + itoa(freePort())
	m, err := ctrl.NewManager(env.Config, ctrl.Options{
		Scheme:                 scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: probe,
	})
	require.NoError(t, err)
	o := DefaultServerOptions()
	o.Namespace = fleetletNamespace
	o.SealKeys = StaticKeys(sealKeys)
	o.Host = "127.0.0.1"
	o.Port = freePort()
	o.CertRotation = false
	o.CertDir = dir
	require.NoError(t, Setup(ctx, m, o))
	done := make(chan error, 1)
	go func() { done <- m.Start(ctx) }()
	defer func() {
		cancel()
		assert.NoError(t, <-done, "the manager failed")
	}()
	require.NoError(t, waitReady(ctx, probe))
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca.certPEM)
	served := func() []byte {
		conn, err := tls.Dial("tcp", "127.0.0.1:"+itoa(o.Port), &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12})
		require.NoError(t, err, "TLS to the webhook server")
		defer func() { _ = conn.Close() }()
		return conn.ConnectionState().PeerCertificates[0].Raw
	}
	require.True(t, bytes.Equal(served(), first), "the server does not present the folder's certificate")
	second := writePair()
	assert.NoError(t, poll(ctx, func() (bool, error) { return bytes.Equal(served(), second), nil }), "the server kept the old certificate after a new one was written")
}
