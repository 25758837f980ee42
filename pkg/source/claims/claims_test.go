package claims

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
)

func claim(name, target string) *corev1.PersistentVolumeClaim {
	c := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("uid-" + name)},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
			StorageClassName: ptr.To("standard"),
		},
	}
	if target != "" {
		c.Annotations = map[string]string{v1alpha1.AnnotationTarget: target}
	}
	return c
}

func TestNames(t *testing.T) {
	spec := &corev1.PodSpec{Volumes: []corev1.Volume{
		{Name: "b", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "data-1"}}},
		{Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
		{Name: "a", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "data-0"}}},
		{Name: "c", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "data-0", ReadOnly: true}}},
	}}
	assert.Empty(t, cmp.Diff([]string{"data-0", "data-1"}, Names(spec)), "Names (-want,+got)")
	assert.False(t, Names(&corev1.PodSpec{}) != nil || Names(nil) != nil, "a spec without claims has names")
}

func TestRead(t *testing.T) {
	ctx := context.Background()
	deleting := claim("going", "")
	now := metav1.Now()
	deleting.DeletionTimestamp = &now
	deleting.Finalizers = []string{"kubernetes.io/pvc-protection"}
	c := fake.NewClientBuilder().WithObjects(claim("a", "west"), claim("b", ""), claim("c", "east"), deleting).Build()

	p, err := Read(ctx, c, "ns", []string{"a", "b"})
	require.NoError(t, err)
	assert.Falsef(t, p.Target != "west" || p.Probing() || len(p.Unplaced()) != 1 || p.Unplaced()[0].Name != "b", "a placed in west, b not: target %q, probing %v, unplaced %v", p.Target, p.Probing(), p.Unplaced())
	assert.Contains(t, p.Why("east"), "claim a is kept in target west", "Why(east)")
	assert.Empty(t, p.Why("west"), "Why(west), want nothing")

	p, err = Read(ctx, c, "ns", []string{"b"})
	assert.Falsef(t, err != nil || !p.Probing() || p.Target != "", "b alone: probing %v, target %q, %v; want probing", p.Probing(), p.Target, err)
	for _, tc := range []struct {
		names  []string
		reason string
	}{
		{[]string{"a", "c"}, ReasonClaimsApart},
		{[]string{"a", "missing"}, ReasonClaimNotFound},
		{[]string{"going"}, ReasonClaimDeleting},
	} {
		_, err := Read(ctx, c, "ns", tc.names)
		var problem *Problem
		assert.Falsef(t, !errors.As(err, &problem) || problem.Reason != tc.reason, "Read(%v) = %v, want a %s problem", tc.names, err, tc.reason)
	}
}

func TestPlace(t *testing.T) {
	ctx := context.Background()
	c := fake.NewClientBuilder().WithObjects(claim("a", ""), claim("b", "west")).Build()
	read := func(name string) *corev1.PersistentVolumeClaim {
		var got corev1.PersistentVolumeClaim
		require.NoError(t, c.Get(ctx, types.NamespacedName{Namespace: "ns", Name: name}, &got))
		return &got
	}
	stale := read("a")
	require.NoError(t, Place(ctx, c, []*corev1.PersistentVolumeClaim{read("a"), read("b")}, "west"))
	assert.Equal(t, "west", TargetOf(read("a")), "a placed in")
	// Another pod read a before it was placed: its placement fails.
	err := Place(ctx, c, []*corev1.PersistentVolumeClaim{stale}, "east")
	assert.Truef(t, apierrors.IsConflict(err), "placing from a stale read: %v, want a conflict", err)
	assert.Error(t, Place(ctx, c, []*corev1.PersistentVolumeClaim{read("b")}, "east"), "placing b, kept in west, in east succeeded")
}

func TestCopy(t *testing.T) {
	src := claim("data", "west")
	src.Labels = map[string]string{"app": "db", v1alpha1.LabelParentCluster: "forged"}
	src.Annotations["volume.kubernetes.io/selected-node"] = "n1"
	src.Annotations["owner"] = "team-a"
	src.Spec.VolumeName = "pv-1"
	src.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"disk": "ssd"}}
	src.Spec.DataSource = &corev1.TypedLocalObjectReference{Kind: "VolumeSnapshot", Name: "snap"}
	got := Copy(src, "east", nil)
	want := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: "ns", Name: "data",
			Labels: map[string]string{"app": "db", v1alpha1.LabelParentCluster: "east", v1alpha1.LabelParentUID: "uid-data"},
			Annotations: map[string]string{"owner": "team-a",
				v1alpha1.AnnotationParentName: "data", v1alpha1.AnnotationParentNamespace: "ns"},
		},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      src.Spec.AccessModes,
			Resources:        src.Spec.Resources,
			StorageClassName: ptr.To("standard"),
		},
	}
	assert.Empty(t, cmp.Diff(want, got), "Copy (-want,+got)")
}

// A Target's storageClasses map a class named otherwise there; "" leaves
// the class to the target's default; a class not listed keeps its name.
func TestCopyMapsStorageClasses(t *testing.T) {
	classes := map[string]string{"standard": "gp3", "fast": ""}
	for class, want := range map[string]*string{"standard": ptr.To("gp3"), "fast": nil, "other": ptr.To("other")} {
		src := claim("data", "west")
		src.Spec.StorageClassName = ptr.To(class)
		got := Copy(src, "east", classes).Spec.StorageClassName
		assert.Truef(t, cmp.Equal(got, want), "class %q: copy's %v, want %v", class, ptr.Deref(got, "<nil>"), ptr.Deref(want, "<nil>"))
	}
	src := claim("data", "west")
	src.Spec.StorageClassName = nil
	got := Copy(src, "east", classes).Spec.StorageClassName
	assert.Nilf(t, got, "a claim with no class: copy's %q, want none", ptr.Deref(got, ""))
}

func TestEnsure(t *testing.T) {
	ctx := context.Background()
	src := claim("data", "west")
	foreign := claim("other", "")
	earlier := Copy(claim("earlier", ""), "east", nil)
	earlier.Name = "old"
	src2 := claim("old", "west")
	target := fake.NewClientBuilder().WithObjects(foreign, earlier).Build()

	why, err := Ensure(ctx, target, src, "east", nil)
	require.Falsef(t, why != "" || err != nil, "first Ensure: %q, %v", why, err)
	var got corev1.PersistentVolumeClaim
	err = target.Get(ctx, client.ObjectKeyFromObject(src), &got)
	require.Falsef(t, err != nil || got.Labels[v1alpha1.LabelParentUID] != "uid-data", "the copy: %v, %v", got.Labels, err)
	why, err = Ensure(ctx, target, src, "east", nil)
	assert.Falsef(t, why != "" || err != nil, "Ensure of an existing copy: %q, %v", why, err)
	// Another source's claim, or the target's own: a clash, left alone.
	why, err = Ensure(ctx, target, claim("other", ""), "east", nil)
	assert.Falsef(t, err != nil || !strings.Contains(why, "did not create"), "Ensure over a foreign claim: %q, %v; want a clash", why, err)
	assert.NoError(t, target.Get(ctx, client.ObjectKeyFromObject(foreign), &got), "the foreign claim")
	// This source's copy of an earlier claim of that name goes first.
	why, err = Ensure(ctx, target, src2, "east", nil)
	assert.Falsef(t, err != nil || !strings.Contains(why, "earlier claim"), "Ensure over an earlier copy: %q, %v", why, err)
	err = target.Get(ctx, client.ObjectKeyFromObject(earlier), &got)
	assert.Truef(t, apierrors.IsNotFound(err), "the earlier copy: %v, want it deleted", err)
	why, err = Ensure(ctx, target, src2, "east", nil)
	assert.Falsef(t, why != "" || err != nil, "Ensure once the earlier copy is gone: %q, %v", why, err)
}

// A copy an earlier fleetlet made through the follow annotation (this
// source's label, no parent UID) is adopted, data and all, not deleted.
func TestEnsureAdoptsAFollowedCopy(t *testing.T) {
	ctx := context.Background()
	followed := Copy(claim("data", ""), "east", nil)
	delete(followed.Labels, v1alpha1.LabelParentUID)
	followed.Spec.VolumeName = "pvc-with-data"
	target := fake.NewClientBuilder().WithObjects(followed).Build()
	why, err := Ensure(ctx, target, claim("data", "west"), "east", nil)
	require.Falsef(t, why != "" || err != nil, "Ensure over a followed copy: %q, %v", why, err)
	var got corev1.PersistentVolumeClaim
	require.NoError(t, target.Get(ctx, client.ObjectKeyFromObject(followed), &got), "the followed copy, want it kept")
	assert.Falsef(t, got.Labels[v1alpha1.LabelParentUID] != "uid-data" || got.Spec.VolumeName != "pvc-with-data", "adopted copy: parent-uid %q, volume %q; want uid-data on its own volume", got.Labels[v1alpha1.LabelParentUID], got.Spec.VolumeName)
}

func TestBindMirror(t *testing.T) {
	ctx := context.Background()
	c := fake.NewClientBuilder().WithObjects(claim("data", "west")).Build()
	var pvc corev1.PersistentVolumeClaim
	get := func() *corev1.PersistentVolumeClaim {
		require.NoError(t, c.Get(ctx, types.NamespacedName{Namespace: "ns", Name: "data"}, &pvc))
		return &pvc
	}
	bound, err := BindMirror(ctx, c, get(), "fleetlet-west", nil)
	require.Falsef(t, err != nil || bound, "BindMirror: %v, %v; want not bound yet", bound, err)
	var pv corev1.PersistentVolume
	require.NoError(t, c.Get(ctx, types.NamespacedName{Name: "fleetlet-uid-data"}, &pv))
	assert.Falsef(t, pv.Spec.ClaimRef == nil || pv.Spec.ClaimRef.UID != "uid-data" || pv.Spec.Local == nil ||
		pv.Spec.PersistentVolumeReclaimPolicy != corev1.PersistentVolumeReclaimRetain || pv.Spec.StorageClassName != "standard" ||
		pv.Spec.NodeAffinity.Required.NodeSelectorTerms[0].MatchExpressions[0].Values[0] != "fleetlet-west" ||
		pv.Annotations[v1alpha1.AnnotationTarget] != "west" || pv.Labels[v1alpha1.LabelClaimMirror] != "true",
		"mirror volume: %+v", pv)
	q := pv.Spec.Capacity[corev1.ResourceStorage]
	assert.Zerof(t, q.Cmp(resource.MustParse("1Gi")), "mirror capacity %s, want the claim's request", q.String())
	assert.Equal(t, pv.Name, get().Spec.VolumeName, "claim volumeName")
	// The source's volume controller binds it.
	claimNow := get()
	claimNow.Status.Phase = corev1.ClaimBound
	require.NoError(t, c.Status().Update(ctx, claimNow))
	bound, err = BindMirror(ctx, c, get(), "fleetlet-west", nil)
	assert.Falsef(t, err != nil || !bound, "BindMirror once Bound: %v, %v", bound, err)

	// The target bound its copy to a larger volume: the mirror shows its
	// size, the claim its volume.
	c = fake.NewClientBuilder().WithObjects(claim("data", "west")).Build()
	held := claim("data", "")
	held.Spec.VolumeName = "pvc-123"
	held.Status.Capacity = corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("10Gi")}
	_, err = BindMirror(ctx, c, get(), "fleetlet-west", held)
	require.NoError(t, err)
	require.NoError(t, c.Get(ctx, types.NamespacedName{Name: "fleetlet-uid-data"}, &pv))
	q = pv.Spec.Capacity[corev1.ResourceStorage]
	assert.Zerof(t, q.Cmp(resource.MustParse("10Gi")), "mirror capacity %s, want its copy's 10Gi", q.String())
	assert.Equal(t, "pvc-123", get().Annotations[v1alpha1.AnnotationTargetVolume], "%s, want the copy's volume", v1alpha1.AnnotationTargetVolume)

	// The source's volume controller bound the claim from the volume's
	// claimRef before our write (which then failed): a later call still
	// names the copy's volume. Before: it returned at once, and the claim
	// never named it (CI, 2 claims of 3).
	c = fake.NewClientBuilder().WithObjects(claim("data", "west")).Build()
	first := get()
	first.Spec.VolumeName = MirrorName(first)
	require.NoError(t, c.Update(ctx, first))
	first = get()
	first.Status.Phase = corev1.ClaimBound
	require.NoError(t, c.Status().Update(ctx, first))
	assert.True(t, NeedsHeld(get()), "NeedsHeld = false for a claim bound to its mirror that does not name its copy's volume")
	_, err = BindMirror(ctx, c, get(), "fleetlet-west", held)
	require.NoError(t, err)
	got := get().Annotations[v1alpha1.AnnotationTargetVolume]
	assert.Falsef(t, got != "pvc-123" || NeedsHeld(get()), "%s = %q after the volume controller bound it first, want pvc-123", v1alpha1.AnnotationTargetVolume, got)
	bound, err = BindMirror(ctx, c, get(), "fleetlet-west", held)
	assert.Falsef(t, !bound || err != nil, "BindMirror of a claim bound and named: %v, %v", bound, err)
}
