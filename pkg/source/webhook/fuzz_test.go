package webhook

import (
	"bytes"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/randfill"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
	"github.com/fleetlet/fleetlet/pkg/proxy"
)

// FuzzMutate checks, on arbitrary pods, what must hold for every pod the
// webhook mutates: foreign gates and finalizers are never dropped or
// reordered, the proxy is bindable, a second pass changes nothing,
// Restore(Open(·)) gives back the user's spec, and a sealed annotation
// altered in any byte, moved to another namespace or checked with another
// key is never trusted.
//
// `go test` runs the seed corpus; `go test -fuzz=FuzzMutate` explores. The
// first input is a pod as JSON (the seeds are realistic pods, one of them
// an already sealed proxy), the second drives randfill to replace parts of
// it with random ones drawn from a dictionary of the names that matter.
func FuzzMutate(f *testing.F) {
	for _, p := range fuzzSeedPods() {
		b, err := json.Marshal(p)
		require.NoError(f, err)
		f.Add(b, []byte{})
		f.Add(b, []byte("\x03\xff\x10fleetlet"))
	}
	f.Add([]byte(`{}`), []byte("\xff\xff\xff\xff\x00\x01\x02\x03\x04\x05\x06\x07\x08\x09"))
	f.Add([]byte(`not json`), []byte("\x81\x42\x13\x77\x05\xfe\x00\x10\x20\x30\x40\x50\x60\x70\x80\x90\xa0"))
	f.Fuzz(func(t *testing.T, podJSON, noise []byte) {
		pod := &corev1.Pod{}
		if json.Unmarshal(podJSON, pod) != nil {
			pod = &corev1.Pod{}
		}
		if len(noise) > 0 {
			perturb(pod, noise)
		}
		// What admission sees has been through JSON (invalid UTF-8
		// replaced, quantities and times canonical).
		b, err := json.Marshal(pod)
		if err != nil {
			return // not a pod a client could send
		}
		pod = &corev1.Pod{}
		require.NoError(t, json.Unmarshal(b, pod))
		normalize(pod)
		checkMutate(t, pod, noise)
	})
}

// normalize gives a pod a namespace and unique container names, as every
// pod the API server accepts has (a source spec records containers by
// name).
func normalize(pod *corev1.Pod) {
	if pod.Namespace == "" {
		pod.Namespace = "ns"
	}
	seen := map[string]bool{}
	unique := func(name *string) {
		for seen[*name] {
			*name += "-"
		}
		seen[*name] = true
	}
	for i := range pod.Spec.InitContainers {
		unique(&pod.Spec.InitContainers[i].Name)
	}
	for i := range pod.Spec.Containers {
		unique(&pod.Spec.Containers[i].Name)
	}
	for i := range pod.Spec.EphemeralContainers {
		unique(&pod.Spec.EphemeralContainers[i].Name)
	}
}

// checkMutate checks Mutate's invariants on one pod.
func checkMutate(t *testing.T, in *corev1.Pod, noise []byte) {
	t.Helper()
	before := in.DeepCopy()
	res, err := Mutate(in, Options{Keys: testKeys, IsVirtualNode: virtualNodes("fleetlet-c2")})
	require.Empty(t, cmp.Diff(before, in), "Mutate modified its input (-want,+got)")
	var refused *RefusedError
	if errors.As(err, &refused) {
		require.Equal(t, "fleetlet-c2", in.Spec.NodeName, "refused a pod on another node")
		return
	}
	if errors.Is(err, ErrUnverifiedPass) {
		_, openErr := Open(in, testKeys)
		require.Falsef(t, openErr == nil || !proxy.Gated(in), "refused as unverified a pod that is not gated with a seal that fails: %v", err)
		return
	}
	require.NoError(t, err, "Mutate")
	switch res.Action {
	case Skipped, Unchanged:
		require.Empty(t, cmp.Diff(in, res.Pod), "%s changed the pod (-want,+got)", res.Action)
		if res.Action == Skipped {
			_, excl := excluded(in)
			require.Falsef(t, !excl && in.Spec.NodeName == "", "skipped a pod that is not excluded: %s", res.Reason)
		}
		return
	}
	out := res.Pod

	// Foreign gates and finalizers: all kept, in order; ours once.
	var inGates, outGates []string
	for _, g := range in.Spec.SchedulingGates {
		inGates = append(inGates, g.Name)
	}
	for _, g := range out.Spec.SchedulingGates {
		outGates = append(outGates, g.Name)
	}
	checkOurs(t, "scheduling gates", inGates, outGates, v1alpha1.SchedulingGateElection)
	checkOurs(t, "finalizers", in.Finalizers, out.Finalizers, v1alpha1.FinalizerDelegate)

	checkBindable(t, in, out)

	// The seal.
	s, err := Open(out, testKeys)
	require.NoError(t, err, "Open on the mutated pod")
	value := out.Annotations[v1alpha1.AnnotationSourceSpec]
	for _, altered := range alterations(value, noise) {
		p := out.DeepCopy()
		p.Annotations[v1alpha1.AnnotationSourceSpec] = altered
		_, err := Open(p, testKeys)
		require.Error(t, err, "an altered source spec was trusted:\n%s\nsealed:\n%s", altered, value)
	}
	moved := out.DeepCopy()
	moved.Namespace = out.Namespace + "x"
	_, err = Open(moved, testKeys)
	require.Truef(t, errors.Is(err, ErrUntrusted), "a source spec moved to another namespace: err = %v, want ErrUntrusted", err)
	_, err = Open(out, Keys{Seal: []byte(strings.Repeat("k", MinKeyLength))})
	require.Truef(t, errors.Is(err, ErrUntrusted), "a source spec checked with another key: err = %v, want ErrUntrusted", err)

	// Restore(Open(Mutate(pod))) is the user's spec, for a first pass.
	if res.Action == Mutated {
		restored := out.Spec.DeepCopy()
		s.Restore(restored)
		want := in.Spec.DeepCopy()
		want.SchedulingGates = out.Spec.SchedulingGates
		require.Empty(t, jsonDiff(want, restored), "restored spec differs from the user's")
	}

	// A second pass changes nothing.
	again, err := Mutate(out, Options{Keys: testKeys, IsVirtualNode: virtualNodes("fleetlet-c2")})
	require.NoError(t, err, "second pass")
	if again.Action != Unchanged {
		diff := jsonDiff(out, again.Pod)
		require.FailNowf(t, "a second pass changed the pod", "second pass: action %s, want Unchanged:\n%s", again.Action, diff)
	}
}

// checkOurs checks that out is in with name ensured once: every other
// entry kept in order.
func checkOurs(t *testing.T, what string, in, out []string, name string) {
	t.Helper()
	foreign := func(l []string) []string {
		return slices.DeleteFunc(slices.Clone(l), func(s string) bool { return s == name })
	}
	require.Empty(t, cmp.Diff(foreign(in), foreign(out), cmpopts.EquateEmpty()), "foreign %s changed (-in,+out)", what)
	n := 0
	for _, s := range out {
		if s == name {
			n++
		}
	}
	require.Equal(t, 1, n, "%s: ours so many times in %q", what, out)
}

// checkBindable checks that the proxy is what the source scheduler can
// always bind once pinned.
func checkBindable(t *testing.T, in, out *corev1.Pod) {
	t.Helper()
	spec := &out.Spec
	require.Empty(t, cmp.Diff(proxyNodeSelector(), spec.NodeSelector), "nodeSelector (-want,+got)")
	require.Falsef(t, spec.Affinity != nil || len(spec.TopologySpreadConstraints) > 0 || len(spec.ResourceClaims) > 0, "constraints left: affinity %v, spread %v, claims %v", spec.Affinity, spec.TopologySpreadConstraints, spec.ResourceClaims)
	require.Falsef(t, spec.SchedulerName != corev1.DefaultSchedulerName || !ptr.Equal(spec.TerminationGracePeriodSeconds, in.Spec.TerminationGracePeriodSeconds), "scheduler %q, grace %v (the pod's: %v)", spec.SchedulerName, spec.TerminationGracePeriodSeconds, in.Spec.TerminationGracePeriodSeconds)
	for _, tol := range proxy.Tolerations() {
		require.Truef(t, proxy.HasToleration(spec.Tolerations, tol), "toleration %v missing", tol)
	}
	for _, tol := range spec.Tolerations {
		require.Falsef(t, boundedUnreachable(tol), "bounded unreachable toleration %v", tol)
	}
	require.Truef(t, ptrEqual(in.Spec.PreemptionPolicy, spec.PreemptionPolicy), "preemptionPolicy changed: %v → %v", in.Spec.PreemptionPolicy, spec.PreemptionPolicy)
	inVolumes, outVolumes := map[string]bool{}, map[string]bool{}
	for _, v := range in.Spec.Volumes {
		inVolumes[v.Name] = true
	}
	for _, v := range spec.Volumes {
		require.Falsef(t, v.Ephemeral != nil, "ephemeral volume %q left", v.Name)
		outVolumes[v.Name] = true
	}
	for _, c := range eachContainer(spec) {
		for _, m := range *c.mounts {
			require.Falsef(t, inVolumes[m.Name] && !outVolumes[m.Name], "container %q mounts stripped volume %q", c.name, m.Name)
		}
		for _, d := range *c.devices {
			require.Falsef(t, inVolumes[d.Name] && !outVolumes[d.Name], "container %q has a device of stripped volume %q", c.name, d.Name)
		}
		require.Falsef(t, len(*c.claims) > 0, "container %q keeps resource claims %v", c.name, *c.claims)
		for _, p := range *c.ports {
			require.Falsef(t, p.HostPort != 0 && (!c.regular || !spec.HostNetwork), "container %q keeps hostPort %d", c.name, p.HostPort)
		}
	}
	for k := range out.Labels {
		require.Falsef(t, strings.HasPrefix(k, v1alpha1.Prefix) && !userLabels[k], "label %q left", k)
	}
	for k := range out.Annotations {
		require.Falsef(t, strings.HasPrefix(k, v1alpha1.Prefix) && !userAnnotations[k] && k != v1alpha1.AnnotationSourceSpec, "annotation %q left", k)
	}
}

func ptrEqual[T comparable](a, b *T) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}

// alterations returns altered copies of a sealed value: a byte replaced,
// removed or added at positions the noise picks, and always at the last
// byte of the MAC (where lax base64 would ignore bits).
func alterations(value string, noise []byte) []string {
	if value == "" {
		return nil
	}
	var out []string
	positions := []int{0, len(value) - 1, len(value) / 2}
	if i := strings.Index(value, `","spec":`); i > 0 {
		positions = append(positions, i-1)
		// The MAC's last letter with other low bits, which a lax base64
		// decoder would ignore.
		const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
		if k := strings.IndexByte(alphabet, value[i-1]); k >= 0 {
			for _, x := range []int{1, 2, 3} {
				out = append(out, value[:i-1]+string(alphabet[k^x])+value[i:])
			}
		}
	}
	for _, b := range noise {
		if len(positions) >= 12 {
			break
		}
		positions = append(positions, int(b)*len(value)/256)
	}
	for n, i := range positions {
		c := value[i]
		repl := byte('A' + (int(c)+1+n)%26)
		if repl == c {
			repl = '0'
		}
		out = append(out,
			value[:i]+string(repl)+value[i+1:],
			value[:i]+value[i+1:],
			value[:i]+" "+value[i:],
		)
	}
	return out
}

// jsonDiff compares what two objects serialize to.
func jsonDiff(want, got any) string {
	w, err1 := json.Marshal(want)
	g, err2 := json.Marshal(got)
	if err1 != nil || err2 != nil {
		return "marshal: " + errors.Join(err1, err2).Error()
	}
	if bytes.Equal(w, g) {
		return ""
	}
	var wv, gv any
	_ = json.Unmarshal(w, &wv)
	_ = json.Unmarshal(g, &gv)
	return cmp.Diff(wv, gv)
}

// fuzzWords are the strings the fuzzer draws most of its strings from, so
// that random pods meet fleetlet's names, each other's names and the
// tolerations that matter.
var fuzzWords = []string{
	"", "a", "b", "c", "app", "data",
	v1alpha1.SchedulingGateElection, v1alpha1.FinalizerDelegate, "example.com/gate", "kueue.x-k8s.io/admission",
	v1alpha1.AnnotationSourceSpec, v1alpha1.AnnotationElect, v1alpha1.AnnotationClusterSelector, v1alpha1.AnnotationFollow,
	v1alpha1.AnnotationElected, v1alpha1.LabelParentCluster, v1alpha1.LabelParentUID, corev1.MirrorPodAnnotationKey,
	"false", "true", "DaemonSet", "ReplicaSet", "apps/v1",
	v1alpha1.LabelNodeType, v1alpha1.NodeTypeVirtualKubelet, v1alpha1.TaintKeyProvider, v1alpha1.TaintValueProvider,
	corev1.TaintNodeUnreachable, corev1.TaintNodeNotReady, corev1.TaintNodeUnschedulable,
	string(corev1.TaintEffectNoExecute), string(corev1.TaintEffectNoSchedule), string(corev1.TolerationOpExists), string(corev1.TolerationOpEqual),
	string(corev1.ProtocolTCP), string(corev1.ProtocolUDP), corev1.DefaultSchedulerName, "volcano", "fleetlet-c2",
}

// perturb replaces parts of pod, chosen by noise, with random ones.
func perturb(pod *corev1.Pod, noise []byte) {
	f := randfill.NewFromGoFuzz(noise).NilChance(0.3).NumElements(0, 3).MaxDepth(8).Funcs(
		func(s *string, c randfill.Continue) {
			if c.Intn(8) == 0 {
				*s = c.String(6)
				return
			}
			*s = fuzzWords[c.Intn(len(fuzzWords))]
		},
		func(q *resource.Quantity, c randfill.Continue) {
			*q = *resource.NewQuantity(c.Int63n(1<<20), resource.DecimalSI)
		},
		func(i *intstr.IntOrString, c randfill.Continue) {
			if c.Bool() {
				*i = intstr.FromInt32(c.Int31n(100))
			} else {
				*i = intstr.FromString(fuzzWords[c.Intn(len(fuzzWords))])
			}
		},
		func(e *corev1.TaintEffect, c randfill.Continue) {
			*e = []corev1.TaintEffect{"", corev1.TaintEffectNoExecute, corev1.TaintEffectNoSchedule, corev1.TaintEffectPreferNoSchedule}[c.Intn(4)]
		},
		func(o *corev1.TolerationOperator, c randfill.Continue) {
			*o = []corev1.TolerationOperator{"", corev1.TolerationOpExists, corev1.TolerationOpEqual}[c.Intn(3)]
		},
		func(p *corev1.Protocol, c randfill.Continue) {
			*p = []corev1.Protocol{corev1.ProtocolTCP, corev1.ProtocolUDP, ""}[c.Intn(3)]
		},
		func(p **int64, c randfill.Continue) {
			switch c.Intn(3) {
			case 0:
				*p = nil
			case 1:
				*p = ptr.To[int64](0)
			default:
				*p = ptr.To(c.Int63n(1000))
			}
		},
	)
	var mask uint32
	f.Fill(&mask)
	parts := []func(){
		func() { f.Fill(&pod.Labels) },
		func() { f.Fill(&pod.Annotations) },
		func() { f.Fill(&pod.Finalizers) },
		func() { f.Fill(&pod.OwnerReferences) },
		func() { f.Fill(&pod.Spec.SchedulingGates) },
		func() { f.Fill(&pod.Spec.Tolerations) },
		func() { f.Fill(&pod.Spec.Volumes) },
		func() { f.Fill(&pod.Spec.Containers) },
		func() { f.Fill(&pod.Spec.InitContainers) },
		func() { f.Fill(&pod.Spec.EphemeralContainers) },
		func() { f.Fill(&pod.Spec.Affinity) },
		func() { f.Fill(&pod.Spec.NodeSelector) },
		func() { f.Fill(&pod.Spec.TopologySpreadConstraints) },
		func() { f.Fill(&pod.Spec.ResourceClaims) },
		func() { f.Fill(&pod.Spec.HostNetwork) },
		func() { f.Fill(&pod.Spec.SchedulerName) },
		func() { f.Fill(&pod.Spec.TerminationGracePeriodSeconds) },
		func() { f.Fill(&pod.Spec.PreemptionPolicy) },
		func() { f.Fill(&pod.Spec.NodeName) },
		func() { f.Fill(&pod.Namespace) },
	}
	for i, part := range parts {
		if mask&(1<<i) != 0 {
			part()
		}
	}
}

// fuzzSeedPods are the seed corpus: the table tests' kinds of pods, and a
// proxy already sealed (so the fuzzer also works on second passes and on
// altered seals).
func fuzzSeedPods() []*corev1.Pod {
	full := makePod("ns", "full").initContainer("init").addContainer("side").
		nodeSelector(corev1.LabelTopologyZone, "a").zoneAffinity("a").spread(corev1.LabelTopologyZone).
		scheduler("volcano").grace(60).
		port("app", 80, 8080).port("init", 90, 90).port("side", 53, 0).
		emptyDir("cache").pvc("data", "data-0").ephemeral("scratch").
		mount("app", "cache", "/cache").mount("app", "data", "/data").device("side", "scratch", "/dev/x").mount("init", "data", "/data").
		resourceClaim("gpu", "gpu-t").containerClaim("app", "gpu").
		gates("example.com/gate").finalizers("example.com/fin").
		annotate(v1alpha1.AnnotationClusterSelector, "region=eu").label("app", "web").obj()
	sealed, err := Mutate(full, Options{Keys: testKeys})
	if err != nil {
		panic(err)
	}
	return []*corev1.Pod{
		makePod("ns", "plain").obj(),
		full,
		sealed.Pod,
		makePod("ns", "hostnet").hostNetwork().port("app", 80, 80).obj(),
		makePod("ns", "opted-out").annotate(v1alpha1.AnnotationElect, "false").obj(),
		makePod("ns", "delegate").label(v1alpha1.LabelParentUID, "u").obj(),
		makePod("ns", "daemon").owner("apps/v1", "DaemonSet", "ds").obj(),
		makePod("ns", "virtual").nodeName("fleetlet-c2").obj(),
		makePod("ns", "forged").gates(v1alpha1.SchedulingGateElection).
			annotate(v1alpha1.AnnotationSourceSpec, `{"v":1,"mac":"AAAA","spec":{"nodeSelector":{"a":"b"}}}`).obj(),
	}
}
