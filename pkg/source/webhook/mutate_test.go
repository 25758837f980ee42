package webhook

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
)

// proxyOf builds the proxy the webhook makes of a plain test pod (no
// annotation): what every case below starts from.
func proxyOf(w *podWrapper) *podWrapper {
	p := &podWrapper{*w.DeepCopy()}
	p.Spec.NodeSelector = proxyNodeSelector()
	p.Spec.SchedulerName = corev1.DefaultSchedulerName
	p.Spec.Tolerations = []corev1.Toleration{tolNotReady300, tolProvider, tolUnschedulable, tolNotReadyNS, tolUnreachable}
	p.Spec.SchedulingGates = append(p.Spec.SchedulingGates, corev1.PodSchedulingGate{Name: v1alpha1.SchedulingGateElection})
	p.Finalizers = append(p.Finalizers, v1alpha1.FinalizerDelegate)
	return p
}

// userSpec is the source spec of a plain test pod.
func userSpec() *SourceSpec {
	return &SourceSpec{
		SchedulerName: corev1.DefaultSchedulerName,
		Tolerations:   []corev1.Toleration{tolNotReady300, tolUnreachable300},
	}
}

// withoutSourceSpec drops the sealed annotation, checked on its own.
func withoutSourceSpec(p *corev1.Pod) *corev1.Pod {
	p = p.DeepCopy()
	delete(p.Annotations, v1alpha1.AnnotationSourceSpec)
	if len(p.Annotations) == 0 {
		p.Annotations = nil
	}
	return p
}

var podCmpOpts = []cmp.Option{cmpopts.EquateEmpty()}

func TestMutateLeavesAlone(t *testing.T) {
	cases := map[string]*corev1.Pod{
		"candidate or delegate (parent-uid)":           makePod("ns", "p").label(v1alpha1.LabelParentUID, "1234").obj(),
		"nodeName set (real node)":                     makePod("ns", "p").nodeName("node-1").obj(),
		"nodeName set (fleetlet- prefix, not virtual)": makePod("ns", "p").nodeName("fleetlet-lookalike").obj(),
		"mirror pod":    makePod("ns", "p").annotate(corev1.MirrorPodAnnotationKey, "abc").nodeName("node-1").obj(),
		"DaemonSet pod": makePod("ns", "p").owner("apps/v1", "DaemonSet", "ds").obj(),
		"opted out":     makePod("ns", "p").annotate(v1alpha1.AnnotationElect, "false").obj(),
		// Left alone before the node is looked at.
		"delegate on a virtual node": makePod("ns", "p").label(v1alpha1.LabelParentUID, "1234").nodeName("fleetlet-c2").obj(),
	}
	for name, pod := range cases {
		t.Run(name, func(t *testing.T) {
			in := pod.DeepCopy()
			res, err := Mutate(pod, Options{Keys: testKeys, IsVirtualNode: virtualNodes("fleetlet-c2")})
			require.NoError(t, err)
			assert.Falsef(t, res.Action != Skipped || res.Reason == "", "action = %s (reason %q), want Skipped with a reason", res.Action, res.Reason)
			assert.Empty(t, cmp.Diff(in, res.Pod), "pod changed (-want,+got)")
			assert.Empty(t, cmp.Diff(in, pod), "input modified (-want,+got)")
		})
	}
}

func TestMutateNotExcluded(t *testing.T) {
	cases := map[string]*corev1.Pod{
		"elect: true":                  makePod("ns", "p").annotate(v1alpha1.AnnotationElect, "true").obj(),
		"owned by a ReplicaSet":        makePod("ns", "p").owner("apps/v1", "ReplicaSet", "rs").obj(),
		"a DaemonSet of another group": makePod("ns", "p").owner("example.com/v1", "DaemonSet", "ds").obj(),
	}
	for name, pod := range cases {
		t.Run(name, func(t *testing.T) {
			res, err := Mutate(pod, Options{Keys: testKeys})
			require.NoError(t, err)
			assert.Equal(t, Mutated, res.Action, "action (%s)", res.Reason)
		})
	}
}

func TestMutateRefusesVirtualNode(t *testing.T) {
	pod := makePod("ns", "p").nodeName("fleetlet-c2").obj()
	_, err := Mutate(pod, Options{Keys: testKeys, IsVirtualNode: virtualNodes("fleetlet-c2")})
	var refused *RefusedError
	require.Truef(t, errors.As(err, &refused), "err = %v, want a *RefusedError", err)
	for _, want := range []string{`"fleetlet-c2"`, "virtual node", "remove spec.nodeName", v1alpha1.AnnotationClusterSelector} {
		assert.Containsf(t, err.Error(), want, "message %q does not say %q", err, want)
	}

	// A failed node lookup fails the request; it is never taken for "not
	// virtual".
	_, err = Mutate(pod, Options{Keys: testKeys, IsVirtualNode: func(string) (bool, error) { return false, errors.New("cache down") }})
	assert.Falsef(t, err == nil || errors.As(err, &refused) || !strings.Contains(err.Error(), "cache down"), "err = %v, want the lookup's error", err)
}

func TestMutateNeedsKeyAndNamespace(t *testing.T) {
	_, err := Mutate(makePod("ns", "p").obj(), Options{Keys: Keys{Seal: []byte("short")}})
	assert.Error(t, err, "a short key was accepted")
	_, err = Mutate(makePod("", "p").obj(), Options{Keys: testKeys})
	assert.Error(t, err, "a pod without a namespace was accepted: the seal binds the namespace")
}

func TestMutate(t *testing.T) {
	cases := []struct {
		name     string
		in       *podWrapper
		want     *podWrapper
		wantSpec func(s *SourceSpec)
	}{
		{
			name: "plain pod",
			in:   makePod("ns", "p"),
			want: proxyOf(makePod("ns", "p")),
		},
		{
			name: "nodeSelector replaced",
			in:   makePod("ns", "p").nodeSelector(corev1.LabelTopologyZone, "a", v1alpha1.LabelNodeType, "gpu"),
			want: proxyOf(makePod("ns", "p")),
			wantSpec: func(s *SourceSpec) {
				s.NodeSelector = map[string]string{corev1.LabelTopologyZone: "a", v1alpha1.LabelNodeType: "gpu"}
			},
		},
		{
			name: "affinity and topology spread removed",
			in:   makePod("ns", "p").zoneAffinity("a").spread(corev1.LabelTopologyZone),
			want: proxyOf(makePod("ns", "p")),
			wantSpec: func(s *SourceSpec) {
				s.Affinity = makePod("", "").zoneAffinity("a").Spec.Affinity
				s.TopologySpreadConstraints = makePod("", "").spread(corev1.LabelTopologyZone).Spec.TopologySpreadConstraints
			},
		},
		{
			name: "scheduler name reset, the pod's own grace period kept",
			in:   makePod("ns", "p").scheduler("volcano").grace(120),
			want: proxyOf(makePod("ns", "p").grace(120)),
			wantSpec: func(s *SourceSpec) {
				s.SchedulerName = "volcano"
			},
		},
		{
			name: "hostPorts cleared per container, other ports kept",
			in: makePod("ns", "p").initContainer("init").addContainer("side").
				port("app", 80, 8080).port("app", 81, 0).port("init", 9000, 9000).port("side", 53, 0),
			want: proxyOf(makePod("ns", "p").initContainer("init").addContainer("side").
				port("app", 80, 0).port("app", 81, 0).port("init", 9000, 0).port("side", 53, 0)),
			wantSpec: func(s *SourceSpec) {
				tcp := corev1.ProtocolTCP
				s.Containers = []ContainerSourceSpec{
					{Name: "init", Ports: []Indexed[corev1.ContainerPort]{{Index: 0, Item: corev1.ContainerPort{ContainerPort: 9000, HostPort: 9000, Protocol: tcp}}}},
					{Name: "app", Ports: []Indexed[corev1.ContainerPort]{{Index: 0, Item: corev1.ContainerPort{ContainerPort: 80, HostPort: 8080, Protocol: tcp}}}},
				}
			},
		},
		{
			name: "hostNetwork: a container's hostPorts stay (the API server wants them equal to containerPort)",
			in:   makePod("ns", "p").hostNetwork().initContainer("init").port("app", 80, 80).port("init", 90, 90),
			want: proxyOf(makePod("ns", "p").hostNetwork().initContainer("init").port("app", 80, 80).port("init", 90, 0)),
			wantSpec: func(s *SourceSpec) {
				s.Containers = []ContainerSourceSpec{
					{Name: "init", Ports: []Indexed[corev1.ContainerPort]{{Index: 0, Item: corev1.ContainerPort{ContainerPort: 90, HostPort: 90, Protocol: corev1.ProtocolTCP}}}},
				}
			},
		},
		{
			name: "ephemeral volumes and what references them removed; claims and others kept",
			in: makePod("ns", "p").initContainer("init").
				emptyDir("cache").pvc("data", "data-0").ephemeral("scratch").
				mount("app", "cache", "/cache").mount("app", "data", "/data").device("app", "scratch", "/dev/xvda").
				mount("init", "data", "/data"),
			want: proxyOf(makePod("ns", "p").initContainer("init").emptyDir("cache").pvc("data", "data-0").
				mount("app", "cache", "/cache").mount("app", "data", "/data").mount("init", "data", "/data")),
			wantSpec: func(s *SourceSpec) {
				w := makePod("", "").ephemeral("scratch")
				s.Volumes = []Indexed[corev1.Volume]{{Index: 2, Item: w.Spec.Volumes[0]}}
				s.Containers = []ContainerSourceSpec{
					{
						Name:          "app",
						VolumeDevices: []Indexed[corev1.VolumeDevice]{{Index: 0, Item: corev1.VolumeDevice{Name: "scratch", DevicePath: "/dev/xvda"}}},
					},
				}
			},
		},
		{
			name: "resource claims removed, pod and containers",
			in:   makePod("ns", "p").resourceClaim("gpu", "gpu-template").containerClaim("app", "gpu"),
			want: proxyOf(makePod("ns", "p")),
			wantSpec: func(s *SourceSpec) {
				s.ResourceClaims = []Indexed[corev1.PodResourceClaim]{{Index: 0, Item: corev1.PodResourceClaim{Name: "gpu", ResourceClaimTemplateName: ptr.To("gpu-template")}}}
				s.Containers = []ContainerSourceSpec{{Name: "app", ResourceClaims: []Indexed[corev1.ResourceClaim]{{Index: 0, Item: corev1.ResourceClaim{Name: "gpu"}}}}}
			},
		},
		{
			name: "tolerations: the user's kept, bounded unreachable ones replaced, ours appended once",
			in: makePod("ns", "p").tolerations(
				corev1.Toleration{Key: "gpu", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
				tolNotReady300,
				corev1.Toleration{Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To[int64](60)},
				tolUnschedulable,
			),
			want: proxyOf(makePod("ns", "p")).tolerations(
				corev1.Toleration{Key: "gpu", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
				tolNotReady300, tolUnschedulable, tolProvider, tolNotReadyNS, tolUnreachable,
			),
			wantSpec: func(s *SourceSpec) {
				s.Tolerations = []corev1.Toleration{
					{Key: "gpu", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
					tolNotReady300,
					{Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To[int64](60)},
					tolUnschedulable,
				}
			},
		},
		{
			name: "no tolerations at all",
			in:   makePod("ns", "p").tolerations(),
			want: proxyOf(makePod("ns", "p")).tolerations(tolProvider, tolUnschedulable, tolNotReadyNS, tolUnreachable),
			wantSpec: func(s *SourceSpec) {
				s.Tolerations = nil
			},
		},
		{
			name: "foreign gates and finalizers kept in order, ours appended",
			in:   makePod("ns", "p").gates("kueue.x-k8s.io/admission", "example.com/b").finalizers("example.com/keep", "a/b"),
			want: proxyOf(makePod("ns", "p").gates("kueue.x-k8s.io/admission", "example.com/b").finalizers("example.com/keep", "a/b")),
		},
		{
			name: "our gate and finalizer already there (forged, unsealed): kept in place, never doubled",
			in: makePod("ns", "p").gates("a", v1alpha1.SchedulingGateElection, "b", v1alpha1.SchedulingGateElection).
				finalizers(v1alpha1.FinalizerDelegate, "x", v1alpha1.FinalizerDelegate),
			want: func() *podWrapper {
				p := proxyOf(makePod("ns", "p"))
				p.Spec.SchedulingGates = []corev1.PodSchedulingGate{{Name: "a"}, {Name: v1alpha1.SchedulingGateElection}, {Name: "b"}}
				p.Finalizers = []string{v1alpha1.FinalizerDelegate, "x"}
				return p
			}(),
		},
		{
			name: "fleetlet marks a user may not set are removed, the user's own kept",
			in: makePod("ns", "p").
				annotate(v1alpha1.AnnotationSourceSpec, `{"v":1,"mac":"forged","spec":{}}`).
				annotate(v1alpha1.AnnotationElected, "true").
				annotate(v1alpha1.AnnotationParentName, "x").
				annotate(v1alpha1.AnnotationClusterSelector, "region=eu").
				annotate(v1alpha1.AnnotationFollow, "configmap/x").
				annotate(v1alpha1.AnnotationElect, "true").
				annotate(v1alpha1.AnnotationGroupMinMembers, "4").
				annotate("example.com/other", "kept").
				label(v1alpha1.LabelParentCluster, "evil").
				label(v1alpha1.LabelCluster, "c2").
				label(v1alpha1.LabelGroup, "train").
				label("app", "web"),
			want: proxyOf(makePod("ns", "p").
				annotate(v1alpha1.AnnotationClusterSelector, "region=eu").
				annotate(v1alpha1.AnnotationFollow, "configmap/x").
				annotate(v1alpha1.AnnotationElect, "true").
				annotate(v1alpha1.AnnotationGroupMinMembers, "4").
				annotate("example.com/other", "kept").
				label(v1alpha1.LabelGroup, "train").
				label("app", "web")),
		},
		{
			name: "preemption policy and priority left as they are",
			in: func() *podWrapper {
				p := makePod("ns", "p")
				p.Spec.PriorityClassName = "high"
				p.Spec.Priority = ptr.To[int32](1000)
				p.Spec.PreemptionPolicy = ptr.To(corev1.PreemptLowerPriority)
				return p
			}(),
			want: func() *podWrapper {
				p := makePod("ns", "p")
				p.Spec.PriorityClassName = "high"
				p.Spec.Priority = ptr.To[int32](1000)
				p.Spec.PreemptionPolicy = ptr.To(corev1.PreemptLowerPriority)
				return proxyOf(p)
			}(),
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			in := tc.in.obj()
			before := in.DeepCopy()
			res, err := Mutate(in, Options{Keys: testKeys, IsVirtualNode: virtualNodes()})
			require.NoError(t, err)
			require.Equal(t, Mutated, res.Action, "action (%s)", res.Reason)
			assert.Empty(t, cmp.Diff(before, in), "input modified (-want,+got)")
			assert.Empty(t, cmp.Diff(tc.want.obj(), withoutSourceSpec(res.Pod), podCmpOpts...), "proxy (-want,+got)")
			got, err := Open(res.Pod, testKeys)
			require.NoError(t, err, "Open")
			want := userSpec()
			if tc.wantSpec != nil {
				tc.wantSpec(want)
			}
			assert.Empty(t, cmp.Diff(want, got, podCmpOpts...), "source spec (-want,+got)")

			// Restore(Open(Mutate(pod))) gives back the user's spec.
			restored := res.Pod.Spec.DeepCopy()
			got.Restore(restored)
			wantSpec := before.Spec.DeepCopy()
			wantSpec.SchedulingGates = res.Pod.Spec.SchedulingGates
			assert.Empty(t, cmp.Diff(wantSpec, restored, podCmpOpts...), "restored spec (-want,+got)")

			// A second pass with nothing new changes nothing.
			again, err := Mutate(res.Pod, Options{Keys: testKeys})
			require.NoError(t, err)
			assert.Equal(t, Unchanged, again.Action, "second pass: action")
			assert.Empty(t, cmp.Diff(res.Pod, again.Pod), "second pass changed the pod (-want,+got)")
		})
	}
}

// The proxy keeps the pod's own grace period, which its candidates then
// have too; a proxy an earlier release sealed (its grace period set to 0,
// the user's sealed) still gives its candidates the user's. Before: every
// proxy's was 0, so `kubectl delete --grace-period` meant nothing and a
// patch restating the pod's own was refused.
func TestGracePeriodStaysThePods(t *testing.T) {
	res, err := Mutate(makePod("ns", "p").grace(75).obj(), Options{Keys: testKeys})
	require.NoError(t, err)
	g := res.Pod.Spec.TerminationGracePeriodSeconds
	require.Falsef(t, g == nil || *g != 75, "proxy grace period %v, want the pod's 75", g)
	s, err := Open(res.Pod, testKeys)
	require.NoError(t, err)
	candidate := res.Pod.Spec.DeepCopy()
	s.Restore(candidate)
	g = candidate.TerminationGracePeriodSeconds
	assert.Falsef(t, g == nil || *g != 75, "candidate grace period %v, want 75", g)

	old := &SourceSpec{SchedulerName: corev1.DefaultSchedulerName, TerminationGracePeriodSeconds: ptr.To[int64](60)}
	oldProxy := makePod("ns", "p").grace(0).obj().Spec
	old.Restore(&oldProxy)
	g = oldProxy.TerminationGracePeriodSeconds
	assert.Falsef(t, g == nil || *g != 60, "an earlier release's proxy gives its candidate grace period %v, want the sealed 60", g)
}

// A second pass on a replica that does not hold the key the first pass
// sealed with (a seal key rotation, each replica reloading the Secret in
// its own time) refuses the pod, so the API server's client tries again;
// a replica that holds it as a previous key seals the same spec again with
// its own key. Before: the
// pod was taken for a first pass and stripped again, and the source spec
// sealed anew held none of the user's node selector.
func TestMutateSecondPassDuringAKeyRotation(t *testing.T) {
	newKey := Keys{Seal: []byte(strings.Repeat("n", MinKeyLength))}
	first, err := Mutate(makePod("ns", "p").nodeSelector("disk", "ssd").obj(), Options{Keys: newKey})
	require.NoError(t, err)
	again, err := Mutate(first.Pod, Options{Keys: testKeys})
	require.Truef(t, errors.Is(err, ErrUnverifiedPass), "second pass with only the old key: %s, %v; want ErrUnverifiedPass", again.Action, err)
	rotated := Keys{Seal: testKey, Previous: [][]byte{newKey.Seal}}
	again, err = Mutate(first.Pod, Options{Keys: rotated})
	require.Falsef(t, err != nil || again.Action == Mutated, "second pass with the key among the previous ones: %v, %v; want it folded", again.Action, err)
	s, err := Open(again.Pod, rotated)
	require.Falsef(t, err != nil || s.NodeSelector["disk"] != "ssd", "the source spec lost the user's node selector: %+v, %v", s, err)
}

// A later webhook's additions to stripped fields are folded into the
// source spec on the second pass and stripped again.
func TestMutateFoldsLaterWebhooks(t *testing.T) {
	user := makePod("ns", "p").pvc("data", "data-0").mount("app", "data", "/data").port("app", 80, 8080).
		nodeSelector("disk", "ssd").zoneAffinity("a").scheduler("volcano")
	first, err := Mutate(user.obj(), Options{Keys: testKeys})
	require.NoError(t, err)

	// A sidecar injector and a policy engine run after us.
	later := &podWrapper{*first.Pod.DeepCopy()}
	later.addContainer("sidecar").
		ephemeral("sidecar-scratch").mount("sidecar", "sidecar-scratch", "/scratch").
		pvc("sidecar-state", "state").mount("sidecar", "sidecar-state", "/state").mount("app", "sidecar-state", "/state").
		port("sidecar", 15000, 15000).
		nodeSelector("team", "a").
		emptyDir("sidecar-tmp").mount("sidecar", "sidecar-tmp", "/tmp").
		toleration(corev1.Toleration{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "mesh", Effect: corev1.TaintEffectNoSchedule}).
		toleration(tolUnreachable300).
		grace(45).
		scheduler("mesh-scheduler").
		spread("kubernetes.io/hostname")
	later.gates("late.example.com/gate")
	later.finalizers("late.example.com/finalizer")
	later.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
		RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{
			{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "arch", Operator: corev1.NodeSelectorOpIn, Values: []string{"arm64"}}}},
		}},
	}}

	second, err := Mutate(later.obj(), Options{Keys: testKeys})
	require.NoError(t, err)
	require.Equal(t, Folded, second.Action, "action")
	p := second.Pod

	// The proxy is bindable again...
	assert.Empty(t, cmp.Diff(proxyNodeSelector(), p.Spec.NodeSelector), "nodeSelector (-want,+got)")
	assert.Falsef(t, p.Spec.Affinity != nil || len(p.Spec.TopologySpreadConstraints) > 0 || p.Spec.SchedulerName != corev1.DefaultSchedulerName || *p.Spec.TerminationGracePeriodSeconds != 45,
		"scheduling constraints left on the proxy, or the later webhook's grace period not kept: affinity %v, spread %v, scheduler %q, grace %d",
		p.Spec.Affinity, p.Spec.TopologySpreadConstraints, p.Spec.SchedulerName, *p.Spec.TerminationGracePeriodSeconds)
	var volumes []string
	for _, v := range p.Spec.Volumes {
		volumes = append(volumes, v.Name)
	}
	// Claims stay (a StatefulSet matches them); the ephemeral one goes.
	assert.Empty(t, cmp.Diff([]string{"data", "sidecar-state", "sidecar-tmp"}, volumes), "proxy volumes (-want,+got)")
	sidecar := (&podWrapper{*p}).container("sidecar")
	assert.Empty(t, cmp.Diff([]corev1.VolumeMount{{Name: "sidecar-state", MountPath: "/state"}, {Name: "sidecar-tmp", MountPath: "/tmp"}}, sidecar.VolumeMounts), "sidecar mounts (-want,+got)")
	assert.Empty(t, cmp.Diff([]corev1.VolumeMount{{Name: "data", MountPath: "/data"}, {Name: "sidecar-state", MountPath: "/state"}}, (&podWrapper{*p}).container("app").VolumeMounts), "app mounts (-want,+got)")
	assert.Zerof(t, sidecar.Ports[0].HostPort, "sidecar hostPort left: %v", sidecar.Ports)
	for _, tol := range p.Spec.Tolerations {
		assert.Falsef(t, boundedUnreachable(tol), "a bounded unreachable toleration is back: %v", tol)
	}
	assert.Empty(t, cmp.Diff([]corev1.PodSchedulingGate{{Name: v1alpha1.SchedulingGateElection}, {Name: "late.example.com/gate"}}, p.Spec.SchedulingGates), "gates (-want,+got)")
	assert.Empty(t, cmp.Diff([]string{v1alpha1.FinalizerDelegate, "late.example.com/finalizer"}, p.Finalizers), "finalizers (-want,+got)")

	// ...and the candidate gets the user's spec with every later addition.
	s, err := Open(p, testKeys)
	require.NoError(t, err)
	restored := p.Spec.DeepCopy()
	s.Restore(restored)
	want := later.obj().Spec.DeepCopy()
	// What the user wrote, and what the later webhooks added, merged.
	want.NodeSelector = map[string]string{"disk": "ssd", "team": "a"}
	want.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
		RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
			MatchExpressions: []corev1.NodeSelectorRequirement{
				{Key: corev1.LabelTopologyZone, Operator: corev1.NodeSelectorOpIn, Values: []string{"a"}},
				{Key: "arch", Operator: corev1.NodeSelectorOpIn, Values: []string{"arm64"}},
			},
		}}},
	}}
	want.SchedulerName = "mesh-scheduler"
	want.Tolerations = append(user.obj().Spec.Tolerations,
		corev1.Toleration{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "mesh", Effect: corev1.TaintEffectNoSchedule})
	want.Volumes = []corev1.Volume{user.obj().Spec.Volumes[0], later.Spec.Volumes[0], later.Spec.Volumes[1], later.Spec.Volumes[2]}
	app := &want.Containers[0]
	app.VolumeMounts = []corev1.VolumeMount{{Name: "data", MountPath: "/data"}, {Name: "sidecar-state", MountPath: "/state"}}
	app.Ports = []corev1.ContainerPort{{ContainerPort: 80, HostPort: 8080, Protocol: corev1.ProtocolTCP}}
	// The order of the volumes: the user's PVC where the user had it, the
	// later ones where the later webhook put them.
	wantVolumes := []string{"data", "sidecar-scratch", "sidecar-state", "sidecar-tmp"}
	var gotVolumes []string
	for _, v := range restored.Volumes {
		gotVolumes = append(gotVolumes, v.Name)
	}
	assert.Empty(t, cmp.Diff(wantVolumes, gotVolumes), "restored volumes (-want,+got)")
	want.Volumes = restored.Volumes
	want.TerminationGracePeriodSeconds = ptr.To[int64](45)
	assert.Empty(t, cmp.Diff(want, restored, podCmpOpts...), "restored spec (-want,+got)")

	// Once folded, another pass changes nothing.
	third, err := Mutate(p, Options{Keys: testKeys})
	require.NoError(t, err)
	assert.Equal(t, Unchanged, third.Action, "third pass: action")
}

func TestAndNodeSelectors(t *testing.T) {
	req := func(k string) corev1.NodeSelectorRequirement {
		return corev1.NodeSelectorRequirement{Key: k, Operator: corev1.NodeSelectorOpExists}
	}
	term := func(keys ...string) corev1.NodeSelectorTerm {
		var t corev1.NodeSelectorTerm
		for _, k := range keys {
			t.MatchExpressions = append(t.MatchExpressions, req(k))
		}
		return t
	}
	a := &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{term("a1"), term("a2")}}
	b := &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{term("b1"), {}}}
	got := andNodeSelectors(a, b)
	want := &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{term("a1", "b1"), term("a2", "b1")}}
	assert.Empty(t, cmp.Diff(want, got), "(-want,+got)")
	assert.Same(t, b, andNodeSelectors(nil, b), "nil ∧ b, want b")
}

// What another controller adds to a proxy's nodeSelector and tolerations
// after its creation (Kueue does, when it lifts its own gate) reaches the
// candidates: Restore merges it with the user's sealed values, leaving out
// fleetlet's own (type=virtual-kubelet, the hostname pin, the proxy's
// tolerations).
func TestRestoreKeepsLaterAdditions(t *testing.T) {
	user := corev1.Toleration{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "batch", Effect: corev1.TaintEffectNoSchedule}
	res, err := Mutate(makePod("ns", "p").nodeSelector(corev1.LabelTopologyZone, "a").toleration(user).obj(), Options{Keys: testKeys, IsVirtualNode: virtualNodes()})
	require.NoError(t, err)
	require.Equal(t, Mutated, res.Action)
	sealed, err := Open(res.Pod, testKeys)
	require.NoError(t, err)

	userTolerations := append([]corev1.Toleration(nil), sealed.Tolerations...)
	require.Contains(t, userTolerations, user)
	later := res.Pod.Spec.DeepCopy()
	flavor := corev1.Toleration{Key: "spot", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}
	later.NodeSelector["cloud.example.com/flavor"] = "spot"
	later.NodeSelector[corev1.LabelHostname] = "fleetlet-cluster-2" // the elector's pin
	later.Tolerations = append(later.Tolerations, flavor)
	sealed.Restore(later)

	assert.Equal(t, map[string]string{corev1.LabelTopologyZone: "a", "cloud.example.com/flavor": "spot"}, later.NodeSelector)
	assert.Equal(t, append(userTolerations, flavor), later.Tolerations)
}
