package sandbox

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/apiserver/pkg/authentication/serviceaccount"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// ComponentCleanup is the process name of `fleetlet cleanup`, run once per
// cluster by Uninstall (its log is logs/<cluster>/fleetlet-cleanup.log).
const ComponentCleanup = "fleetlet-cleanup"

// cleanupHookTemplate is the chart's post-delete hook.
const cleanupHookTemplate = "templates/cleanup-hook.yaml"

// cleanupHook is the chart's post-delete hook as rendered for a cluster:
// the objects Helm creates before the Job, in hook-weight order, and what
// the Job would run.
type cleanupHook struct {
	objects        []client.Object
	serviceAccount string
	args           []string
	deadline       time.Duration
}

// renderCleanupHook renders the post-delete hook as Helm would run it for a
// release with Deployments (localProcesses=false), from the cluster's
// values.
func (s *Sandbox) renderCleanupHook(ctx context.Context, c *ClusterState) (*cleanupHook, error) {
	s.chartMu.Lock()
	dir, values, err := s.writeChart(c)
	if err != nil {
		s.chartMu.Unlock()
		return nil, err
	}
	out, err := s.helm(ctx, "template", ReleaseName, dir, "--namespace", FleetletNamespace,
		"--values", values, "--set", "localProcesses=false", "--show-only", cleanupHookTemplate)
	s.chartMu.Unlock()
	if err != nil {
		return nil, fmt.Errorf("rendering the cleanup hook: %w", err)
	}
	return parseCleanupHook(out)
}

// parseCleanupHook reads the rendered hook: a ServiceAccount, its RBAC and
// the Job. Any other kind is an error, so that a chart change the sandbox
// does not know fails loudly instead of being skipped.
func parseCleanupHook(manifest []byte) (*cleanupHook, error) {
	type weighted struct {
		obj    client.Object
		weight int
	}
	var objs []weighted
	h := &cleanupHook{}
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(manifest)))
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
		if len(bytes.TrimSpace(doc)) == 0 || strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(string(doc)), "---")) == "" {
			continue
		}
		decoded, _, err := scheme.Codecs.UniversalDeserializer().Decode(doc, nil, nil)
		if err != nil {
			return nil, fmt.Errorf("decoding the cleanup hook: %w", err)
		}
		obj, ok := decoded.(client.Object)
		if !ok {
			return nil, fmt.Errorf("cleanup hook: unexpected %T", decoded)
		}
		weight, err := strconv.Atoi(obj.GetAnnotations()["helm.sh/hook-weight"])
		if err != nil {
			return nil, fmt.Errorf("cleanup hook: %T %s: hook weight: %w", obj, obj.GetName(), err)
		}
		switch o := obj.(type) {
		case *corev1.ServiceAccount:
			h.serviceAccount = o.Name
			objs = append(objs, weighted{o, weight})
		case *rbacv1.ClusterRole, *rbacv1.ClusterRoleBinding:
			objs = append(objs, weighted{o, weight})
		case *batchv1.Job:
			cs := o.Spec.Template.Spec.Containers
			if len(cs) != 1 {
				return nil, fmt.Errorf("cleanup hook: Job %s has %d containers, want 1", o.Name, len(cs))
			}
			h.args = append(append([]string(nil), cs[0].Command...), cs[0].Args...)
			if d := o.Spec.ActiveDeadlineSeconds; d != nil {
				h.deadline = time.Duration(*d) * time.Second
			}
		default:
			return nil, fmt.Errorf("cleanup hook: the sandbox does not know how to run a %T (%s)", obj, obj.GetName())
		}
	}
	if h.serviceAccount == "" || len(h.args) == 0 {
		return nil, errors.New("cleanup hook: no ServiceAccount or no Job rendered")
	}
	if h.args[0] != "cleanup" {
		return nil, fmt.Errorf("cleanup hook: the Job runs %q, want `fleetlet cleanup`", h.args)
	}
	if h.deadline <= 0 {
		h.deadline = 5 * time.Minute
	}
	sort.SliceStable(objs, func(i, j int) bool { return objs[i].weight < objs[j].weight })
	for _, o := range objs {
		h.objects = append(h.objects, o.obj)
	}
	return h, nil
}

// runCleanupHook creates the hook's objects, runs `fleetlet cleanup` with
// a token of its ServiceAccount, and deletes them once it succeeded.
func (s *Sandbox) runCleanupHook(ctx context.Context, c *ClusterState, h *cleanupHook) error {
	cs, err := s.Client(c.Name)
	if err != nil {
		return err
	}
	for _, obj := range h.objects {
		// hook-delete-policy before-hook-creation: a failed run's objects
		// are replaced.
		if err := hookObject(ctx, cs, obj, false); err != nil {
			return err
		}
		if err := hookObject(ctx, cs, obj, true); err != nil {
			return err
		}
	}
	// The RBAC authorizer learns of new bindings through its informers:
	// wait until it lets the ServiceAccount act, as a Job's pod start
	// would give it time to.
	user := serviceaccount.MakeUsername(FleetletNamespace, h.serviceAccount)
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := s.waitFor(wctx, c, "the cleanup hook's RBAC", nil, func(ctx context.Context) error {
		sar, err := cs.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User:               user,
			ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: "list", Resource: "pods"},
		}}, metav1.CreateOptions{})
		if err != nil {
			return err
		}
		if !sar.Status.Allowed {
			return fmt.Errorf("%s may not list pods yet", user)
		}
		return nil
	}); err != nil {
		return err
	}
	kubeconfig := c.componentKubeconfig(ComponentCleanup)
	if err := s.writeTokenKubeconfig(ctx, c, h.serviceAccount, kubeconfig); err != nil {
		return err
	}
	if err := s.runCleanup(ctx, c, h, kubeconfig); err != nil {
		return err
	}
	// hook-delete-policy hook-succeeded.
	for i := len(h.objects) - 1; i >= 0; i-- {
		if err := hookObject(ctx, cs, h.objects[i], false); err != nil {
			return err
		}
	}
	return os.Remove(kubeconfig)
}

// runCleanup runs the hook Job's command as a local process, within the
// Job's activeDeadlineSeconds.
func (s *Sandbox) runCleanup(ctx context.Context, c *ClusterState, h *cleanupHook, kubeconfig string) error {
	ctx, cancel := context.WithTimeout(ctx, h.deadline)
	defer cancel()
	logPath := c.logFile(ComponentCleanup)
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logFile.Close()
	args := append(append([]string(nil), h.args...), "--kubeconfig="+kubeconfig)
	bin := s.binary(binFleetlet)
	fmt.Fprintf(logFile, "\n=== %s starting %s %s\n", time.Now().Format(time.RFC3339), bin, strings.Join(args, " "))
	var stdout bytes.Buffer
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Stdout = io.MultiWriter(logFile, &stdout)
	cmd.Stderr = logFile
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("fleetlet cleanup: %w; last lines of %s:\n%s", err, logPath, tailFile(logPath, 20))
	}
	for _, line := range strings.Split(strings.TrimSpace(stdout.String()), "\n") {
		fmt.Fprintf(s.opts.Out, "%s: %s\n", c.Name, line)
	}
	return nil
}

// hookObject creates one hook object, or deletes it (absent is fine).
func hookObject(ctx context.Context, cs kubernetes.Interface, obj client.Object, create bool) error {
	var err error
	switch o := obj.(type) {
	case *corev1.ServiceAccount:
		api := cs.CoreV1().ServiceAccounts(FleetletNamespace)
		if create {
			_, err = api.Create(ctx, o.DeepCopy(), metav1.CreateOptions{})
		} else {
			err = api.Delete(ctx, o.Name, metav1.DeleteOptions{})
		}
	case *rbacv1.ClusterRole:
		api := cs.RbacV1().ClusterRoles()
		if create {
			_, err = api.Create(ctx, o.DeepCopy(), metav1.CreateOptions{})
		} else {
			err = api.Delete(ctx, o.Name, metav1.DeleteOptions{})
		}
	case *rbacv1.ClusterRoleBinding:
		api := cs.RbacV1().ClusterRoleBindings()
		if create {
			_, err = api.Create(ctx, o.DeepCopy(), metav1.CreateOptions{})
		} else {
			err = api.Delete(ctx, o.Name, metav1.DeleteOptions{})
		}
	default:
		return fmt.Errorf("cleanup hook: unexpected %T", obj)
	}
	if !create && apierrors.IsNotFound(err) {
		err = nil
	}
	if err != nil {
		verb := "deleting"
		if create {
			verb = "creating"
		}
		return fmt.Errorf("cleanup hook: %s %T %s: %w", verb, obj, obj.GetName(), err)
	}
	return nil
}
