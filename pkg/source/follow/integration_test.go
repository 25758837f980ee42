package follow_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
	"github.com/fleetlet/fleetlet/pkg/proxy"
	"github.com/fleetlet/fleetlet/pkg/source/follow"
	"github.com/fleetlet/fleetlet/pkg/source/gc"
)

// userSpec is the spec of a pod that mounts a ConfigMap, reads a Secret
// and runs as a ServiceAccount.
func userSpec() *corev1.PodSpec {
	return &corev1.PodSpec{
		ServiceAccountName: "builder",
		Volumes: []corev1.Volume{{Name: "cfg", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
			LocalObjectReference: corev1.LocalObjectReference{Name: "cfg"}}}}},
		Containers: []corev1.Container{{Name: "c", Image: "busybox", Env: []corev1.EnvVar{{Name: "PASSWORD", ValueFrom: &corev1.EnvVarSource{
			SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "creds"}, Key: "password"}}}}}},
	}
}

// sourceObjects creates what userSpec references in the source.
func (f *fixture) sourceObjects(t *testing.T) {
	t.Helper()
	f.create(t, f.source, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cfg", Labels: map[string]string{"app": "web"}}, Data: map[string]string{"k": "v1"}})
	f.create(t, f.source, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "creds"}, Type: corev1.SecretTypeBasicAuth, Data: map[string][]byte{"password": []byte("s3cret")}})
	f.create(t, f.source, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "builder"},
		Secrets: []corev1.ObjectReference{{Name: "builder-token"}}, AutomountServiceAccountToken: ptr.To(false)})
}

func refsOf(t *testing.T, p *corev1.Pod, spec *corev1.PodSpec) follow.RefSet {
	t.Helper()
	refs, err := follow.Refs(p, spec)
	require.NoError(t, err)
	return refs
}

func followersOf(obj metav1.Object) string { return obj.GetAnnotations()[v1alpha1.AnnotationFollowers] }

func entry(p *corev1.Pod) string { return p.Name + "/" + string(p.UID) }

// entries is the followers annotation of pods, sorted by UID.
func entries(pods ...*corev1.Pod) string {
	out := make([]string, len(pods))
	for i := range pods {
		out[i] = entry(pods[i])
	}
	// UIDs are random: sort as the annotation does.
	for i := range out {
		for j := i + 1; j < len(out); j++ {
			if strings.SplitN(out[j], "/", 2)[1] < strings.SplitN(out[i], "/", 2)[1] {
				out[i], out[j] = out[j], out[i]
			}
		}
	}
	return strings.Join(out, ",")
}

func TestEnsureAndRelease(t *testing.T) {
	f := setup(t)
	ctx := context.Background()
	fl := f.follower(t)
	f.sourceObjects(t)
	p1 := f.proxy(t, "web-0", nil)
	p2 := f.proxy(t, "web-1", nil)

	// Candidate: ServiceAccount and ConfigMap, no Secret.
	require.NoError(t, fl.Ensure(ctx, f.target, "t1", p1, refsOf(t, p1, userSpec()), follow.StageCandidate))
	var cm corev1.ConfigMap
	require.True(t, f.get(t, f.target, "cfg", &cm), "the ConfigMap was not copied")
	wantLabels := map[string]string{"app": "web", v1alpha1.LabelParentCluster: sourceName}
	assert.Empty(t, cmp.Diff(wantLabels, cm.Labels), "copy labels (-want +got)")
	wantAnnotations := map[string]string{
		v1alpha1.AnnotationParentName: "cfg", v1alpha1.AnnotationParentNamespace: f.ns,
		v1alpha1.AnnotationFollowers: entry(p1),
	}
	assert.Empty(t, cmp.Diff(wantAnnotations, cm.Annotations), "copy annotations (-want +got)")
	assert.Empty(t, cmp.Diff(map[string]string{"k": "v1"}, cm.Data), "copy data (-want +got)")
	var sa corev1.ServiceAccount
	require.True(t, f.get(t, f.target, "builder", &sa), "the ServiceAccount was not copied")
	assert.Falsef(t, len(sa.Secrets) != 0 || sa.AutomountServiceAccountToken == nil || *sa.AutomountServiceAccountToken,
		"ServiceAccount copy: secrets %v, automount %v; want no secrets, automount false", sa.Secrets, sa.AutomountServiceAccountToken)
	assert.Equal(t, entry(p1), followersOf(&sa), "ServiceAccount followers")
	require.False(t, f.get(t, f.target, "creds", &corev1.Secret{}), "a Secret was copied for a candidate")

	// Delegate: the Secret too.
	require.NoError(t, fl.Ensure(ctx, f.target, "t1", p1, refsOf(t, p1, userSpec()), follow.StageDelegate))
	var secret corev1.Secret
	require.True(t, f.get(t, f.target, "creds", &secret), "the Secret was not copied for the delegate")
	assert.Falsef(t, secret.Type != corev1.SecretTypeBasicAuth || string(secret.Data["password"]) != "s3cret" || followersOf(&secret) != entry(p1),
		"Secret copy: type %s, data %v, followers %q", secret.Type, secret.Data, followersOf(&secret))
	assert.Equal(t, 1.0, objects(t, "t1", "ConfigMap"), "fleetlet_follow_objects{t1,ConfigMap}")

	// A second proxy adds itself.
	require.NoError(t, fl.Ensure(ctx, f.target, "t1", p2, refsOf(t, p2, userSpec()), follow.StageCandidate))
	f.get(t, f.target, "cfg", &cm)
	assert.Equal(t, entries(p1, p2), followersOf(&cm), "followers")
	rv := cm.ResourceVersion
	// Ensuring again changes nothing.
	require.NoError(t, fl.Ensure(ctx, f.target, "t1", p2, refsOf(t, p2, userSpec()), follow.StageCandidate))
	f.get(t, f.target, "cfg", &cm)
	assert.Equal(t, rv, cm.ResourceVersion, "a second Ensure wrote the copy (resourceVersion)")

	// Releasing the first keeps what the second follows.
	require.NoError(t, fl.Release(ctx, f.target, "t1", p1))
	f.get(t, f.target, "cfg", &cm)
	assert.Equal(t, entry(p2), followersOf(&cm), "after releasing %s, followers", p1.Name)
	assert.False(t, f.get(t, f.target, "creds", &corev1.Secret{}), "the Secret only the released proxy followed was kept")

	// Releasing the second removes everything.
	require.NoError(t, fl.Release(ctx, f.target, "t1", p2))
	assert.False(t, f.get(t, f.target, "cfg", &corev1.ConfigMap{}) || f.get(t, f.target, "builder", &corev1.ServiceAccount{}), "copies no proxy follows were kept")
	assert.Equal(t, 0.0, objects(t, "t1", "ConfigMap"), "fleetlet_follow_objects{t1,ConfigMap}")
}

// objects reads fleetlet_follow_objects{cluster,kind} from the registry
// the manager serves.
func objects(t *testing.T, cluster, kind string) float64 {
	t.Helper()
	families, err := metrics.Registry.Gather()
	require.NoError(t, err)
	for _, mf := range families {
		if mf.GetName() != "fleetlet_follow_objects" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["cluster"] == cluster && labels["kind"] == kind {
				return m.GetGauge().GetValue()
			}
		}
	}
	require.FailNow(t, fmt.Sprintf("no fleetlet_follow_objects{cluster=%q,kind=%q}", cluster, kind))
	return 0
}

// Clashes: an object of the same name that this source did not create is
// refused and left untouched, whether nobody or another source made it.
func TestClash(t *testing.T) {
	for _, owner := range []string{"", "other-source"} {
		t.Run("owner="+owner, func(t *testing.T) {
			f := setup(t)
			ctx := context.Background()
			fl := f.follower(t)
			f.sourceObjects(t)
			foreign := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cfg"}, Data: map[string]string{"theirs": "x"}}
			if owner != "" {
				foreign.Labels = map[string]string{v1alpha1.LabelParentCluster: owner}
			}
			f.create(t, f.target, foreign)
			p := f.proxy(t, "web-0", nil)

			err := fl.Ensure(ctx, f.target, "t1", p, refsOf(t, p, userSpec()), follow.StageCandidate)
			r := refusal(t, err, follow.ReasonClash)
			assert.Equal(t, "ConfigMap cfg", r.Object, "refusal names")
			var cur corev1.ConfigMap
			f.get(t, f.target, "cfg", &cur)
			assert.Equal(t, foreign.ResourceVersion, cur.ResourceVersion, "the clashing ConfigMap was written (resourceVersion)")
			// Checked before anything is written: the ServiceAccount was
			// not copied either.
			assert.False(t, f.get(t, f.target, "builder", &corev1.ServiceAccount{}), "a copy was written before the clash was found")
			// Release leaves the foreign object alone.
			require.NoError(t, fl.Release(ctx, f.target, "t1", p))
			assert.True(t, f.get(t, f.target, "cfg", &cur) && cur.ResourceVersion == foreign.ResourceVersion, "Release touched an object this source did not create")
		})
	}
}

// A ServiceAccount of the target's that fleetlet did not make satisfies
// the need only when it is "default" or its admin marked it usable by this
// source (label source.multicluster.fleetlet.io/<source>=true); any other
// is refused (Clash), so that a source's pod never runs with the rights of
// whatever ServiceAccount of that name the target has. It is left
// untouched either way. Before: any existing one satisfied it.
func TestExistingServiceAccountSatisfies(t *testing.T) {
	f := setup(t)
	ctx := context.Background()
	fl := f.follower(t)
	f.sourceObjects(t)
	theirs := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "builder", Labels: map[string]string{"team": "target"}}}
	f.create(t, f.target, theirs)
	f.create(t, f.target, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}})
	p := f.proxy(t, "web-0", nil)

	r := refusal(t, fl.Ensure(ctx, f.target, "t1", p, refsOf(t, p, userSpec()), follow.StageCandidate), follow.ReasonClash)
	assert.Falsef(t, r.Object != "ServiceAccount builder" || !strings.Contains(r.Message, v1alpha1.SourceLabelPrefix+sourceName+"=true"),
		"refusal = %+v, want one naming ServiceAccount builder and the label that allows it", r)
	theirs.Labels[v1alpha1.SourceLabelPrefix+sourceName] = "true"
	require.NoError(t, f.target.Update(ctx, theirs))
	require.NoError(t, fl.Ensure(ctx, f.target, "t1", p, refsOf(t, p, userSpec()), follow.StageCandidate), "a ServiceAccount marked usable by this source")
	var cur corev1.ServiceAccount
	f.get(t, f.target, "builder", &cur)
	assert.Equal(t, theirs.ResourceVersion, cur.ResourceVersion, "the target's ServiceAccount was written (resourceVersion)")
	// The default ServiceAccount, which the source does not have here.
	require.NoError(t, fl.Ensure(ctx, f.target, "t1", p, refsOf(t, p, &corev1.PodSpec{}), follow.StageDelegate))
	// Without one in the target nor in the source: refused.
	spec := &corev1.PodSpec{ServiceAccountName: "nowhere"}
	r = refusal(t, fl.Ensure(ctx, f.target, "t1", p, refsOf(t, p, spec), follow.StageCandidate), follow.ReasonNotFound)
	assert.Equal(t, "ServiceAccount nowhere", r.Object, "refusal names")
}

// Missing objects: refused unless the reference is optional;
// service-account-token Secrets are never followed.
func TestMissingOptionalAndTokenSecrets(t *testing.T) {
	f := setup(t)
	ctx := context.Background()
	fl := f.follower(t)
	f.sourceObjects(t)
	f.create(t, f.source, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "builder-token", Annotations: map[string]string{corev1.ServiceAccountNameKey: "builder"}},
		Type:       corev1.SecretTypeServiceAccountToken,
	})
	p := f.proxy(t, "web-0", nil)
	spec := userSpec()
	spec.Volumes = append(spec.Volumes,
		corev1.Volume{Name: "token", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "builder-token"}}},
		corev1.Volume{Name: "maybe", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
			LocalObjectReference: corev1.LocalObjectReference{Name: "maybe"}, Optional: ptr.To(true)}}})
	spec.ImagePullSecrets = []corev1.LocalObjectReference{{Name: "no-such-regcred"}}
	require.NoError(t, fl.Ensure(ctx, f.target, "t1", p, refsOf(t, p, spec), follow.StageDelegate))
	assert.False(t, f.get(t, f.target, "builder-token", &corev1.Secret{}), "a service-account-token Secret was copied")
	assert.True(t, f.get(t, f.target, "creds", &corev1.Secret{}), "the Secret was not copied")

	spec.Containers[0].EnvFrom = []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "missing"}}}}
	r := refusal(t, fl.Ensure(ctx, f.target, "t1", p, refsOf(t, p, spec), follow.StageCandidate), follow.ReasonNotFound)
	assert.Equal(t, "ConfigMap missing", r.Object, "refusal names")
	annotated := f.proxy(t, "web-1", map[string]string{v1alpha1.AnnotationFollow: "configmap/cfg,secret/absent"})
	r = refusal(t, fl.Ensure(ctx, f.target, "t1", annotated, refsOf(t, annotated, userSpec()), follow.StageDelegate), follow.ReasonNotFound)
	assert.Equal(t, "secret/absent", r.Object, "refusal names")
}

// Sync propagates source changes; a deleted source object's copy stays
// while followed.
func TestSync(t *testing.T) {
	f := setup(t)
	ctx := context.Background()
	fl := f.follower(t)
	f.sourceObjects(t)
	p := f.proxy(t, "web-0", nil)
	require.NoError(t, fl.Ensure(ctx, f.target, "t1", p, refsOf(t, p, userSpec()), follow.StageDelegate))

	var src corev1.ConfigMap
	f.get(t, f.source, "cfg", &src)
	src.Data = map[string]string{"k": "v2", "new": "n"}
	src.Labels["tier"] = "front"
	require.NoError(t, f.source.Update(ctx, &src))
	require.NoError(t, fl.Sync(ctx, f.target, "t1", schema.GroupKind{Kind: "ConfigMap"}, f.ns, "cfg"))
	var cm corev1.ConfigMap
	f.get(t, f.target, "cfg", &cm)
	assert.Empty(t, cmp.Diff(src.Data, cm.Data), "copy data after Sync (-want +got)")
	assert.Falsef(t, cm.Labels["tier"] != "front" || followersOf(&cm) != entry(p),
		"copy after Sync: labels %v, followers %q", cm.Labels, followersOf(&cm))

	// Sync of an object with no copy here, or a copy of another source's,
	// does nothing.
	f.create(t, f.source, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "elsewhere"}})
	require.NoError(t, fl.Sync(ctx, f.target, "t1", schema.GroupKind{Kind: "ConfigMap"}, f.ns, "elsewhere"))
	assert.False(t, f.get(t, f.target, "elsewhere", &corev1.ConfigMap{}), "Sync created a copy")

	// The source object goes: the copy stays while followed.
	require.NoError(t, f.source.Delete(ctx, &src))
	err := fl.Sync(ctx, f.target, "t1", schema.GroupKind{Kind: "ConfigMap"}, f.ns, "cfg")
	var gone *follow.SourceGone
	require.Truef(t, errors.As(err, &gone), "Sync after the source was deleted: %v, want a *SourceGone", err)
	assert.Empty(t, cmp.Diff([]string{string(p.UID)}, uidStrings(gone.Followers)), "SourceGone followers (-want +got)")
	require.True(t, f.get(t, f.target, "cfg", &corev1.ConfigMap{}), "the copy a delegate follows was deleted with its source")
	// Its last follower gone, it goes.
	require.NoError(t, fl.Release(ctx, f.target, "t1", p))
	assert.False(t, f.get(t, f.target, "cfg", &corev1.ConfigMap{}), "the copy was kept after its last follower was released")
}

func uidStrings[T ~string](in []T) []string {
	out := make([]string, len(in))
	for i := range in {
		out[i] = string(in[i])
	}
	return out
}

// An allowed PersistentVolumeClaim is copied without its volume; a
// cluster-scoped kind and a kind outside the allow-list are refused, and
// nothing is written.
func TestAnnotatedKinds(t *testing.T) {
	f := setup(t)
	ctx := context.Background()
	fl := f.follower(t, "ConfigMap", "Secret", "ServiceAccount", "PersistentVolumeClaim", "ClusterRole")
	f.sourceObjects(t)
	f.create(t, f.source, &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "data", Annotations: map[string]string{"pv.kubernetes.io/bind-completed": "yes", "backup": "daily"}},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			VolumeName:  "pv-1",
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
		},
	})

	p := f.proxy(t, "web-0", map[string]string{v1alpha1.AnnotationFollow: "PersistentVolumeClaims/data"})
	require.NoError(t, fl.Ensure(ctx, f.target, "t1", p, refsOf(t, p, userSpec()), follow.StageCandidate))
	var pvc corev1.PersistentVolumeClaim
	require.True(t, f.get(t, f.target, "data", &pvc), "the PersistentVolumeClaim was not copied")
	assert.Falsef(t, pvc.Spec.VolumeName != "" || pvc.Annotations["pv.kubernetes.io/bind-completed"] != "" || pvc.Annotations["backup"] != "daily",
		"claim copy: volumeName %q, annotations %v", pvc.Spec.VolumeName, pvc.Annotations)
	assert.Falsef(t, pvc.Labels[v1alpha1.LabelParentCluster] != sourceName || followersOf(&pvc) != entry(p),
		"claim copy: labels %v, followers %q", pvc.Labels, followersOf(&pvc))
	// Released, the claim stays with no follower: its data goes only with
	// its source claim (package claims).
	require.NoError(t, fl.Release(ctx, f.target, "t1", p))
	kept := f.get(t, f.target, "data", &pvc)
	assert.Falsef(t, !kept || pvc.DeletionTimestamp != nil || followersOf(&pvc) != "",
		"the claim copy after its follower was released: deleting %v, followers %q; want it kept, followed by none", pvc.DeletionTimestamp != nil, followersOf(&pvc))

	for _, tc := range []struct {
		annotation string
		reason     follow.Reason
	}{
		{"clusterrole/admin", follow.ReasonClusterScoped},
		{"deployments.apps/web", follow.ReasonNotAllowed},
		{"gizmos/x", follow.ReasonNotAllowed},
	} {
		t.Run(tc.annotation, func(t *testing.T) {
			p := f.proxy(t, "refused", map[string]string{v1alpha1.AnnotationFollow: tc.annotation})
			r := refusal(t, fl.Ensure(ctx, f.target, "t1", p, refsOf(t, p, userSpec()), follow.StageDelegate), tc.reason)
			assert.Equal(t, tc.annotation, r.Object, "refusal names")
			assert.False(t, f.get(t, f.target, "cfg", &corev1.ConfigMap{}), "a copy was written for a refused pod")
		})
	}
}

type testTarget struct {
	key proxy.TargetKey
	c   client.Client
}

func (t testTarget) Key() proxy.TargetKey  { return t.key }
func (t testTarget) Client() client.Client { return t.c }
func (t testTarget) Ready() bool           { return true }
func (t testTarget) Self() bool            { return false }

type testTargets []gc.Target

func (t testTargets) List() []gc.Target { return t }

// The collector drops followers whose proxy is gone, not before the
// minimum age, and deletes a copy with none left.
func TestCollector(t *testing.T) {
	f := setup(t)
	ctx := context.Background()
	fl := f.follower(t)
	f.sourceObjects(t)
	live := f.proxy(t, "live", nil)
	gone := f.proxy(t, "gone", nil)
	for _, p := range []*corev1.Pod{live, gone} {
		require.NoError(t, fl.Ensure(ctx, f.target, "gc-t", p, refsOf(t, p, userSpec()), follow.StageDelegate))
	}
	f.forget(t, gone)

	var cm corev1.ConfigMap
	f.get(t, f.target, "cfg", &cm)
	clk := clocktesting.NewFakeClock(cm.CreationTimestamp.Add(10 * time.Second))
	g, err := gc.New(gc.Options{
		SourceName: sourceName,
		Targets:    testTargets{testTarget{key: proxy.TargetKey{Name: "gc-t"}, c: f.target}},
		Reader:     f.source, APIReader: f.source,
		MinAge: time.Minute, Clock: clk,
		Collectors: fl.Collectors(),
	})
	require.NoError(t, err)

	// Young: kept.
	_, err = g.Collect(ctx)
	require.NoError(t, err)
	f.get(t, f.target, "cfg", &cm)
	require.Equal(t, entries(live, gone), followersOf(&cm), "followers before the minimum age")

	clk.Step(time.Hour)
	_, err = g.Collect(ctx)
	require.NoError(t, err)
	f.get(t, f.target, "cfg", &cm)
	assert.Equal(t, entry(live), followersOf(&cm), "followers after the pass")
	assert.Equal(t, 1.0, objects(t, "gc-t", "ConfigMap"), "fleetlet_follow_objects{gc-t,ConfigMap}")

	// A copy with no follower at all (a crash before recording one) goes
	// too; one of another source stays.
	f.create(t, f.target, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "stray", Labels: map[string]string{v1alpha1.LabelParentCluster: sourceName}}})
	f.create(t, f.target, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "others",
		Labels:      map[string]string{v1alpha1.LabelParentCluster: "other-source"},
		Annotations: map[string]string{v1alpha1.AnnotationFollowers: "gone/" + string(gone.UID)}}})
	f.forget(t, live)
	_, err = g.Collect(ctx)
	require.NoError(t, err)
	for name, want := range map[string]bool{"cfg": false, "builder": false, "creds": false, "stray": false, "others": true} {
		var obj client.Object = &corev1.ConfigMap{}
		switch name {
		case "builder":
			obj = &corev1.ServiceAccount{}
		case "creds":
			obj = &corev1.Secret{}
		}
		assert.Equal(t, want, f.get(t, f.target, name, obj), "%s exists after the proxies went", name)
	}
	assert.Equal(t, 0.0, objects(t, "gc-t", "ConfigMap"), "fleetlet_follow_objects{gc-t,ConfigMap}")
}

// Proxies of one workload share their copies and are ensured in parallel:
// conflicts are retried, no follower is lost.
func TestConcurrentEnsure(t *testing.T) {
	f := setup(t)
	ctx := context.Background()
	fl := f.follower(t)
	f.sourceObjects(t)
	var pods []*corev1.Pod
	for i := range 8 {
		pods = append(pods, f.proxy(t, fmt.Sprintf("web-%d", i), nil))
	}
	errs := make(chan error, len(pods))
	var wg sync.WaitGroup
	for _, p := range pods {
		wg.Go(func() {
			// Not the test's goroutine: refsOf's require (FailNow) may not run here.
			refs, err := follow.Refs(p, userSpec())
			if !assert.NoError(t, err) {
				return
			}
			errs <- fl.Ensure(ctx, f.target, "t1", p, refs, follow.StageDelegate)
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		assert.NoError(t, err)
	}
	for name, obj := range map[string]client.Object{"cfg": &corev1.ConfigMap{}, "creds": &corev1.Secret{}, "builder": &corev1.ServiceAccount{}} {
		f.get(t, f.target, name, obj)
		assert.Equal(t, entries(pods...), followersOf(obj), "%s followers", name)
	}
}

// A referenced Secret that fleetlet may not read in the source (its RBAC,
// or the manager's --secret-namespaces, leaves the namespace out) is a
// Forbidden refusal that says which setting decides, not an error retried
// forever.
func TestSourceSecretNotReadable(t *testing.T) {
	f := setup(t)
	f.sourceObjects(t)
	cfg := rest.CopyConfig(sourceEnv.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "no-rights"}
	fl, err := follow.New(follow.Options{
		SourceName: sourceName, AllowedKinds: []string{"ConfigMap", "Secret", "ServiceAccount"},
		Source: f.source, SourceAPI: newClient(t, cfg), Mapper: f.source.RESTMapper(),
		Logger: testr.New(t),
	})
	require.NoError(t, err)
	p := f.proxy(t, "web-0", nil)
	r := refusal(t, fl.Ensure(context.Background(), f.target, "t1", p, refsOf(t, p, userSpec()), follow.StageDelegate), follow.ReasonForbidden)
	assert.Falsef(t, r.Object != "Secret creds" || !strings.Contains(r.Message, "--secret-namespaces"),
		"refusal %q: %q, want Secret creds naming --secret-namespaces", r.Object, r.Message)
	assert.False(t, f.get(t, f.target, "creds", &corev1.Secret{}), "the Secret was copied")
	// With --secret-namespaces leaving the namespace out, the same refusal
	// without a read, whatever the manager's rights.
	fl, err = follow.New(follow.Options{
		SourceName: sourceName, AllowedKinds: []string{"ConfigMap", "Secret", "ServiceAccount"},
		Source: f.source, SourceAPI: f.source, Mapper: f.source.RESTMapper(),
		SecretNamespaces: []string{"fleetlet-system", "elsewhere"},
		Logger:           testr.New(t),
	})
	require.NoError(t, err)
	r = refusal(t, fl.Ensure(context.Background(), f.target, "t1", p, refsOf(t, p, userSpec()), follow.StageDelegate), follow.ReasonForbidden)
	assert.Falsef(t, r.Object != "Secret creds" || !strings.Contains(r.Message, "--secret-namespaces"),
		"refusal %q: %q, want Secret creds naming --secret-namespaces", r.Object, r.Message)
	assert.False(t, f.get(t, f.target, "creds", &corev1.Secret{}), "the Secret was copied")
}
