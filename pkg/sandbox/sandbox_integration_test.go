package sandbox_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/fleetlet/fleetlet/pkg/sandbox"
	"github.com/fleetlet/fleetlet/pkg/testenv"
)

// The story of the Foundation issue: two real clusters come up, run a
// Deployment and a Job on their fake nodes, survive a stop and start of one
// of them with their objects, and leave no process behind after Down.
func TestSandboxClustersRunWorkloadsAndSurviveRestart(t *testing.T) {
	bin := testenv.RequireBinaries(t, "etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok")
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()

	var progress lockedBuffer
	s, err := sandbox.Up(ctx, sandbox.Options{
		Dir: t.TempDir(), BinDir: bin, Clusters: 2, Nodes: 3,
		CompleteAfter: 2 * time.Second, DieWithParent: true, Out: io.MultiWriter(testWriter{t}, &progress), NoFleetlet: true,
	})
	require.NoError(t, err)
	// A first start says each step as it begins, per cluster, with the time.
	for _, want := range []string{
		`Starting 2 clusters in `,
		`cluster-1 \(1 of 2\) \[\+\d+\.\ds\]: starting etcd, kube-apiserver`,
		`cluster-2 \(2 of 2\) \[\+\d+\.\ds\]: starting etcd, kube-apiserver`,
		`cluster-2 \(2 of 2\) \[\+\d+\.\ds\]: control plane serving; creating 3 fake nodes`,
		`cluster-1 ready in `, `Sandbox with 2 clusters ready in `,
	} {
		assert.Truef(t, regexp.MustCompile(want).MatchString(progress.String()), "the start did not say %q:\n%s", want, progress.String())
	}
	recorded := s.State().AllProcesses()
	t.Cleanup(func() {
		assert.NoError(t, s.Down(context.Background()), "Down")
	})
	assert.Len(t, recorded, 2*5, "recorded processes, want 5 components × 2 clusters")

	for _, name := range s.ClusterNames() {
		cs := client(t, s, name)
		nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		require.NoError(t, err)
		require.Lenf(t, nodes.Items, 3, "%s has %d nodes, want 3", name, len(nodes.Items))
		for _, n := range nodes.Items {
			assert.Truef(t, sandbox.NodeIsReady(&n), "%s: node %s not Ready", name, n.Name)
			assert.Falsef(t, n.Labels[sandbox.LabelRegion] != name || !strings.HasPrefix(n.Labels[sandbox.LabelZone], name+"-"), "%s: node %s has region/zone labels %v", name, n.Name, n.Labels)
			cpu := n.Status.Allocatable.Cpu()
			assert.Zerof(t, cpu.Cmp(resource.MustParse("32")), "%s: node %s allocatable cpu = %s, want 32", name, n.Name, cpu)
		}
		_, err = cs.CoreV1().Pods("default").Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "probe"}}, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		assert.Error(t, err, "%s: the apiserver accepted a pod without containers: validation is off?", name)
		createDeployment(t, ctx, cs, "web", 3)
		createJob(t, ctx, cs, "once")
	}
	for _, name := range s.ClusterNames() {
		cs := client(t, s, name)
		waitDeploymentRunning(t, ctx, cs, name, "web", 3)
		waitJobComplete(t, ctx, cs, name, "once")
	}

	// An outage of cluster-2: its whole control plane stops, cluster-1 goes on.
	before := processesOf(s, "cluster-2")
	require.NoError(t, s.Stop(ctx, "cluster-2"))
	for _, p := range before {
		assert.Falsef(t, p.Alive(), "cluster-2 %s (pid %d) alive after Stop", p.Component, p.PID)
	}
	if _, err := client(t, s, "cluster-2").Discovery().ServerVersion(); err == nil {
		assert.Fail(t, "cluster-2 apiserver still answers after Stop")
	}
	if _, err := client(t, s, "cluster-1").Discovery().ServerVersion(); err != nil {
		assert.Failf(t, "cluster-1 stopped answering while cluster-2 was down", "%v", err)
	}

	require.NoError(t, s.Start(ctx, "cluster-2"))
	after := processesOf(s, "cluster-2")
	assert.Lenf(t, after, 5, "cluster-2 has %d processes after Start, want 5", len(after))
	cs2 := client(t, s, "cluster-2")
	waitDeploymentRunning(t, ctx, cs2, "cluster-2", "web", 3)
	job, err := cs2.BatchV1().Jobs("default").Get(ctx, "once", metav1.GetOptions{})
	require.NoError(t, err, "cluster-2 lost its Job across stop and start")
	assert.Equal(t, int32(1), job.Status.Succeeded, "cluster-2 Job succeeded after restart")

	all := s.State().AllProcesses()
	require.NoError(t, s.Down(ctx))
	for _, p := range append(recorded, all...) {
		assert.Falsef(t, p.Alive(), "%s (pid %d) still alive after Down", p.Component, p.PID)
	}
	_, err = os.Stat(s.State().Clusters[0].Kubeconfig)
	assert.NoError(t, err, "Down removed the kubeconfig")
}

// lockedBuffer collects what clusters starting at once write.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func client(t *testing.T, s *sandbox.Sandbox, name string) kubernetes.Interface {
	t.Helper()
	cs, err := s.Client(name)
	require.NoError(t, err)
	return cs
}

func processesOf(s *sandbox.Sandbox, name string) []sandbox.Process {
	for _, c := range s.State().Clusters {
		if c.Name == name {
			return c.Processes
		}
	}
	return nil
}

func podTemplate(labels map[string]string, restart corev1.RestartPolicy) corev1.PodTemplateSpec {
	return corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: labels},
		Spec: corev1.PodSpec{
			RestartPolicy:                 restart,
			TerminationGracePeriodSeconds: ptr.To[int64](0),
			Containers: []corev1.Container{{
				Name: "main", Image: "registry.k8s.io/pause:3.10",
				Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")}},
			}},
		},
	}
}

func createDeployment(t *testing.T, ctx context.Context, cs kubernetes.Interface, name string, replicas int32) {
	t.Helper()
	labels := map[string]string{"app": name}
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(replicas),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: podTemplate(labels, corev1.RestartPolicyAlways),
		},
	}
	_, err := cs.AppsV1().Deployments("default").Create(ctx, d, metav1.CreateOptions{})
	require.NoError(t, err)
}

func createJob(t *testing.T, ctx context.Context, cs kubernetes.Interface, name string) {
	t.Helper()
	j := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec:       batchv1.JobSpec{Template: podTemplate(nil, corev1.RestartPolicyNever)},
	}
	_, err := cs.BatchV1().Jobs("default").Create(ctx, j, metav1.CreateOptions{})
	require.NoError(t, err)
}

// waitDeploymentRunning waits until the Deployment has n available replicas
// whose pods are Running on the cluster's fake nodes.
func waitDeploymentRunning(t *testing.T, ctx context.Context, cs kubernetes.Interface, cluster, name string, n int) {
	t.Helper()
	var last string
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		d, err := cs.AppsV1().Deployments("default").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			last = err.Error()
			return false, nil
		}
		pods, err := cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=" + name})
		if err != nil {
			last = err.Error()
			return false, nil
		}
		running := 0
		for _, p := range pods.Items {
			if p.Status.Phase == corev1.PodRunning && strings.HasPrefix(p.Spec.NodeName, cluster+"-node-") && p.DeletionTimestamp == nil {
				running++
			}
		}
		last = fmt.Sprintf("available=%d running=%d", d.Status.AvailableReplicas, running)
		return int(d.Status.AvailableReplicas) == n && running == n, nil
	})
	require.NoError(t, err, "%s: Deployment %s never had %d replicas Running (%s)", cluster, name, n, last)
}

func waitJobComplete(t *testing.T, ctx context.Context, cs kubernetes.Interface, cluster, name string) {
	t.Helper()
	var last batchv1.JobStatus
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		j, err := cs.BatchV1().Jobs("default").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		last = j.Status
		for _, c := range j.Status.Conditions {
			if c.Type == batchv1.JobComplete && c.Status == corev1.ConditionTrue {
				return true, nil
			}
		}
		return false, nil
	})
	require.NoError(t, err, "%s: Job %s never completed (status %+v)", cluster, name, last)
}
