package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
	"github.com/fleetlet/fleetlet/pkg/sandbox"
)

// The upstream specs `make conformance` runs (issue 33): sig-node Pods,
// Pods Extended, PodTemplates and container lifecycle hooks; sig-apps
// Deployment, ReplicaSet, ReplicationController, Job, StatefulSet basics
// and DisruptionController; not the Serial, Disruptive, Flaky or Slow ones.
const (
	conformanceFull = `\[sig-node\] Pods |\[sig-node\] Pods Extended|\[sig-node\] PodTemplates|\[sig-node\] Container Lifecycle Hook|` +
		`\[sig-apps\] Deployment|\[sig-apps\] ReplicaSet|\[sig-apps\] ReplicationController|\[sig-apps\] Job|` +
		`\[sig-apps\] StatefulSet Basic StatefulSet functionality|\[sig-apps\] DisruptionController`
	conformanceSkip = `\[Serial\]|\[Disruptive\]|\[Flaky\]|\[Slow\]|\[Alpha\]|\[Feature:OffByDefault\]`
	// conformanceSubset is what CI runs: specs of each kind that take
	// seconds and pass plain on the sandbox.
	conformanceSubset = `\[sig-node\] Pods should be submitted and removed|\[sig-node\] Pods should be updated|` +
		`\[sig-node\] Pods should get a host IP|\[sig-node\] Pods should delete a collection of pods|` +
		`\[sig-node\] PodTemplates should run the lifecycle of PodTemplates|` +
		`\[sig-node\] Pods Extended Pods Set QOS Class should be set on Pods with matching resource requests and limits for memory and cpu|` +
		`\[sig-apps\] Deployment RollingUpdateDeployment should delete old pods and create new ones|` +
		`\[sig-apps\] Job should run a job to completion when tasks succeed|` +
		`\[sig-apps\] DisruptionController should create a PodDisruptionBudget`
)

// conformanceDoc lists the specs that pass in a plain namespace and not in
// an enabled one, with the reason, and those that fail in both.
const conformanceDoc = "../docs/conformance.md"

// TestUpstreamSpecsPassEnabledAsPlain runs upstream Kubernetes e2e specs
// (bin/kube-e2e.test, built from the k8s.io/kubernetes module of the
// sandbox's version) against the source cluster twice: in plain
// namespaces, then in namespaces fleetlet enables as they are created (a
// MutatingAdmissionPolicy labels them, and the same namespaces are made in
// every target). Every spec that passes plain must pass enabled, or be
// listed in docs/conformance.md with the reason. CI runs conformanceSubset;
// `make conformance` sets FLEETLET_E2E_CONFORMANCE=full; any other value
// is a ginkgo focus of its own (`make conformance FOCUS='\[sig-apps\] Job'`).
func TestUpstreamSpecsPassEnabledAsPlain(t *testing.T) {
	need(t)
	bin := os.Getenv("FLEETLET_E2E_KUBE_E2E")
	require.NotEmpty(t, bin, "FLEETLET_E2E_KUBE_E2E names no upstream e2e binary: `make test` and `make conformance` build bin/kube-e2e.test and set it")
	focus := conformanceSubset
	switch mode := os.Getenv("FLEETLET_E2E_CONFORMANCE"); mode {
	case "", "subset":
	case "full":
		focus = conformanceFull
	default: // a ginkgo focus of its own: one group of the full set
		focus = mode
	}
	listed, err := readConformanceDoc(conformanceDoc)
	require.NoError(t, err)
	dir := t.TempDir()
	plain := runUpstream(t, bin, focus, filepath.Join(dir, "plain.json"))
	stop := enableNewNamespaces(t)
	enabled := runUpstream(t, bin, focus, filepath.Join(dir, "enabled.json"))
	proxies := stop()
	// The enabled run really ran proxies: pods bound to virtual nodes.
	t.Logf("the enabled run's pods bound to virtual nodes: %d", proxies)
	assert.NotZero(t, proxies, "no pod of the enabled run was bound to a virtual node: the namespaces were not enabled")

	table, problems := compareConformance(plain, enabled, listed)
	t.Logf("upstream specs, plain and enabled:\n%s", table)
	if out := os.Getenv("FLEETLET_E2E_CONFORMANCE_TABLE"); out != "" {
		assert.NoError(t, os.WriteFile(out, []byte(table), 0o644))
	}
	assert.NotEmpty(t, plain, "no upstream spec ran: the focus matches nothing")
	for _, p := range problems {
		assert.Fail(t, p)
	}
}

// specResult is one spec's outcome.
type specResult struct {
	state   string
	runTime time.Duration
	failure string
}

// runUpstream runs the upstream binary on the source cluster with focus and
// returns each spec's outcome, by full name.
// With FLEETLET_E2E_GINKGO naming the ginkgo CLI, the specs run in parallel
// (FLEETLET_E2E_CONFORMANCE_PROCS processes, default 6): many wait out
// the upstream framework's timeouts for what kwok's containers never do.
func runUpstream(t *testing.T, bin, focus, report string) map[string]specResult {
	t.Helper()
	framework := []string{
		"--kubeconfig", filepath.Join(sb.Dir(), sandbox.MergedKubeconfig), "--context", sandbox.SourceCluster,
		// The virtual nodes' taint does not make the cluster unready.
		"--non-blocking-taints", v1alpha1.TaintKeyProvider + ",node-role.kubernetes.io/control-plane",
	}
	var cmd *exec.Cmd
	if cli := os.Getenv("FLEETLET_E2E_GINKGO"); cli != "" {
		procs := os.Getenv("FLEETLET_E2E_CONFORMANCE_PROCS")
		if procs == "" {
			procs = "6"
		}
		args := []string{"--procs=" + procs, "--no-color", "--focus=" + focus, "--skip=" + conformanceSkip,
			"--json-report=" + report, "--timeout=3h", bin, "--"}
		cmd = exec.Command(cli, append(args, framework...)...)
	} else {
		args := []string{"--ginkgo.focus", focus, "--ginkgo.skip", conformanceSkip, "--ginkgo.no-color",
			"--ginkgo.json-report", report, "--ginkgo.timeout", "3h"}
		cmd = exec.Command(bin, append(args, framework...)...)
	}
	cmd.Dir = filepath.Dir(report)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	err := cmd.Run()
	results, rerr := readGinkgoReport(report)
	require.NoErrorf(t, rerr, "%s (%v)\n%s", bin, err, tail(out.String(), 4000))
	t.Logf("%d upstream specs in %s (%s)", len(results), time.Since(start).Round(time.Second), filepath.Base(report))
	return results
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// readGinkgoReport reads a ginkgo JSON report: the It specs that ran, by
// their full name (containers and leaf, as ginkgo prints them).
func readGinkgoReport(path string) (map[string]specResult, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var reports []struct {
		SpecReports []struct {
			ContainerHierarchyTexts []string
			LeafNodeText            string
			LeafNodeType            string
			State                   string
			RunTime                 time.Duration
			Failure                 struct{ Message string }
		}
	}
	if err := json.Unmarshal(data, &reports); err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	out := map[string]specResult{}
	for _, r := range reports {
		for _, s := range r.SpecReports {
			if s.LeafNodeType != "It" || s.State == "skipped" || s.State == "pending" {
				continue
			}
			name := strings.Join(append(slices.Clone(s.ContainerHierarchyTexts), s.LeafNodeText), " ")
			out[name] = specResult{state: s.State, runTime: s.RunTime, failure: s.Failure.Message}
		}
	}
	return out, nil
}

// conformanceListing is what docs/conformance.md says of a spec.
type conformanceListing struct {
	kind   listingKind
	reason string
}

// listingKind is the section of docs/conformance.md a spec is listed in.
type listingKind int

const (
	// failingBoth: "## Failing in both", specs kwok's nodes cannot pass.
	failingBoth listingKind = iota
	// difference: "## Differences", specs that pass plain and not enabled.
	difference
	// unsteady: "## Unsteady on the sandbox", specs whose result on kwok's
	// nodes changes from run to run in either column: shown, not judged.
	unsteady
)

// readConformanceDoc reads the rows of docs/conformance.md's tables whose
// first cell is a spec name in backquotes, with the section they are in
// (listingKind).
func readConformanceDoc(path string) (map[string]conformanceListing, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return parseConformanceDoc(string(data)), nil
}

func parseConformanceDoc(doc string) map[string]conformanceListing {
	row := regexp.MustCompile("^\\| `([^`]+)` \\|(.*)\\|\\s*$")
	out := map[string]conformanceListing{}
	kind := failingBoth
	for _, line := range strings.Split(doc, "\n") {
		switch {
		case strings.HasPrefix(line, "## Differences"):
			kind = difference
		case strings.HasPrefix(line, "## Unsteady"):
			kind = unsteady
		case strings.HasPrefix(line, "## "):
			kind = failingBoth
		}
		if m := row.FindStringSubmatch(line); m != nil {
			cells := strings.Split(m[2], "|")
			out[m[1]] = conformanceListing{kind: kind, reason: strings.TrimSpace(cells[len(cells)-1])}
		}
	}
	return out
}

// compareConformance prints the two columns side by side, and says what is
// wrong: a spec passing plain and not enabled without being listed as a
// difference, a spec failing plain without being listed, and a listing
// that is no longer true. An unsteady spec is shown and not judged.
func compareConformance(plain, enabled map[string]specResult, listed map[string]conformanceListing) (string, []string) {
	names := make([]string, 0, len(plain))
	for n := range plain {
		names = append(names, n)
	}
	sort.Strings(names)
	var b strings.Builder
	var problems []string
	passedPlain, passedBoth := 0, 0
	b.WriteString("| spec | plain | enabled | reason |\n|---|---|---|---|\n")
	for _, n := range names {
		p, e := plain[n], enabled[n]
		l, isListed := listed[n]
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s |\n", n, p.state, e.state, l.reason)
		if p.state == "passed" {
			passedPlain++
			if e.state == "passed" {
				passedBoth++
			}
		}
		switch {
		case isListed && l.kind == unsteady:
		case p.state == "passed" && e.state == "passed":
			if isListed {
				problems = append(problems, fmt.Sprintf("%q passes in both now: take it out of %s", n, conformanceDoc))
			}
		case p.state == "passed":
			if !isListed || l.kind != difference {
				problems = append(problems, fmt.Sprintf("%q passes plain and is %s enabled, and %s does not list it as a difference: %s",
					n, e.state, conformanceDoc, firstLine(e.failure)))
			}
		case !isListed || l.kind != failingBoth:
			problems = append(problems, fmt.Sprintf("%q is %s plain, and %s does not list it under \"Failing in both\": %s",
				n, p.state, conformanceDoc, firstLine(p.failure)))
		}
	}
	fmt.Fprintf(&b, "\n%d specs: %d pass plain, %d of them pass enabled too\n", len(names), passedPlain, passedBoth)
	return b.String(), problems
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	return s
}

// The labels the upstream framework puts on the namespaces it creates.
const upstreamNamespaceLabel = "e2e-framework"

// enableNewNamespaces makes every namespace the upstream framework creates
// in the source an enabled one, and creates it, labelled for the source and
// with its Pod Security labels, in every target (deleting it there once it
// is gone from the source), as a platform team's automation would. It
// returns the function that stops both and says how many of those
// namespaces' pods it saw bound to a virtual node.
func enableNewNamespaces(t *testing.T) func() int {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	admission := kube(t, sandbox.SourceCluster).AdmissionregistrationV1()
	sourceLabel := "source.multicluster.fleetlet.io/" + sandbox.SourceCluster
	policy := &admissionregistrationv1.MutatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "e2e-enable-upstream-namespaces"},
		Spec: admissionregistrationv1.MutatingAdmissionPolicySpec{
			FailurePolicy: ptr.To(admissionregistrationv1.Fail),
			MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionregistrationv1.RuleWithOperations{
					Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
					Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"namespaces"}},
				},
			}}},
			MatchConditions: []admissionregistrationv1.MatchCondition{{Name: "upstream-framework",
				Expression: fmt.Sprintf("has(object.metadata.labels) && %q in object.metadata.labels", upstreamNamespaceLabel)}},
			ReinvocationPolicy: admissionregistrationv1.NeverReinvocationPolicy,
			Mutations: []admissionregistrationv1.Mutation{{
				PatchType: admissionregistrationv1.PatchTypeApplyConfiguration,
				ApplyConfiguration: &admissionregistrationv1.ApplyConfiguration{Expression: fmt.Sprintf(
					`Object{metadata: Object.metadata{labels: {%q: "true", %q: "true"}}}`, v1alpha1.LabelEnabled, sourceLabel)},
			}},
		},
	}
	_, err := admission.MutatingAdmissionPolicies().Create(ctx, policy, metav1.CreateOptions{})
	require.Falsef(t, err != nil && !apierrors.IsAlreadyExists(err), "creating the namespace policy: %v", err)
	binding := &admissionregistrationv1.MutatingAdmissionPolicyBinding{ObjectMeta: metav1.ObjectMeta{Name: policy.Name},
		Spec: admissionregistrationv1.MutatingAdmissionPolicyBindingSpec{PolicyName: policy.Name}}
	_, err = admission.MutatingAdmissionPolicyBindings().Create(ctx, binding, metav1.CreateOptions{})
	require.Falsef(t, err != nil && !apierrors.IsAlreadyExists(err), "creating the namespace policy's binding: %v", err)
	eventually(t, 30*time.Second, "the namespace policy in force", func(ctx context.Context) (bool, string) {
		probe := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "e2e-policy-probe", Labels: map[string]string{upstreamNamespaceLabel: "probe"}}}
		got, err := kube(t, sandbox.SourceCluster).CoreV1().Namespaces().Create(ctx, probe, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil {
			return false, err.Error()
		}
		return got.Labels[v1alpha1.LabelEnabled] == "true", fmt.Sprintf("labels %v", got.Labels)
	})
	done := make(chan struct{})
	proxies := map[string]bool{}
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			mirrorNamespaces(ctx, t, sourceLabel)
			countProxies(ctx, t, proxies)
			select {
			case <-ctx.Done():
			case <-time.After(500 * time.Millisecond):
			}
		}
	}()
	return func() int {
		cancel()
		<-done
		bg := context.Background()
		_ = admission.MutatingAdmissionPolicyBindings().Delete(bg, binding.Name, metav1.DeleteOptions{})
		_ = admission.MutatingAdmissionPolicies().Delete(bg, policy.Name, metav1.DeleteOptions{})
		return len(proxies)
	}
}

// countProxies adds to seen the pods of the upstream framework's namespaces
// bound to a virtual node.
//
// It runs on a goroutine of its own: a failure is an assert, never a
// require (kube's).
func countProxies(ctx context.Context, t *testing.T, seen map[string]bool) {
	cs, err := sb.Client(sandbox.SourceCluster)
	if !assert.NoError(t, err) {
		return
	}
	pods, err := cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return
	}
	for _, p := range pods.Items {
		if strings.HasPrefix(p.Spec.NodeName, "fleetlet-") && !strings.HasPrefix(p.Namespace, "kube-") {
			seen[string(p.UID)] = true
		}
	}
}

// mirroredLabel marks the namespaces enableNewNamespaces made in targets.
const mirroredLabel = "e2e.fleetlet.io/mirrored"

// mirrorNamespaces makes one pass: the source's live upstream namespaces
// are created in every target, and the targets' mirrors whose source is
// gone or going are deleted.
//
// It runs on a goroutine of its own: a failure is an assert, never a
// require (kube's).
func mirrorNamespaces(ctx context.Context, t *testing.T, sourceLabel string) {
	src, err := sb.Client(sandbox.SourceCluster)
	if !assert.NoError(t, err) {
		return
	}
	list, err := src.CoreV1().Namespaces().List(ctx, metav1.ListOptions{LabelSelector: upstreamNamespaceLabel})
	if err != nil {
		return
	}
	live := map[string]corev1.Namespace{}
	for _, ns := range list.Items {
		if ns.DeletionTimestamp == nil {
			live[ns.Name] = ns
		}
	}
	for _, c := range sb.ClusterNames()[1:] {
		cs, err := sb.Client(c)
		if !assert.NoError(t, err) {
			continue
		}
		namespaces := cs.CoreV1().Namespaces()
		for name, ns := range live {
			labels := map[string]string{sourceLabel: "true", mirroredLabel: "true"}
			for k, v := range ns.Labels {
				if strings.HasPrefix(k, "pod-security.kubernetes.io/") {
					labels[k] = v
				}
			}
			_, err := namespaces.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}, metav1.CreateOptions{})
			if err != nil && !apierrors.IsAlreadyExists(err) {
				continue
			}
		}
		mirrors, err := namespaces.List(ctx, metav1.ListOptions{LabelSelector: mirroredLabel})
		if err != nil {
			continue
		}
		for _, m := range mirrors.Items {
			if _, ok := live[m.Name]; !ok && m.DeletionTimestamp == nil {
				_ = namespaces.Delete(ctx, m.Name, metav1.DeleteOptions{})
			}
		}
	}
}
