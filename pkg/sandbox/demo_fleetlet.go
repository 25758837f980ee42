package sandbox

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
)

// DemoNamespace is where the demo Deployment runs, in every cluster.
const DemoNamespace = "fleetlet-demo"

// demoReplicas is how many replicas the demo Deployment has.
const demoReplicas = 6

// demoDeployment runs a Deployment in an enabled namespace of the source and
// prints where each replica runs: which virtual node (cluster) the proxy is
// bound to, and the node its delegate runs on there.
func (s *Sandbox) demoDeployment(ctx context.Context, out io.Writer) error {
	names := s.ClusterNames()
	for _, name := range names {
		cs, err := s.Client(name)
		if err != nil {
			return err
		}
		labels := map[string]string{"source.multicluster.fleetlet.io/" + SourceCluster: "true"}
		if name == SourceCluster {
			labels[v1alpha1.LabelEnabled] = "true"
		}
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: DemoNamespace, Labels: labels}}
		if _, err := cs.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("%s: creating namespace %s: %w", name, DemoNamespace, err)
		}
	}
	src, err := s.Client(SourceCluster)
	if err != nil {
		return err
	}
	labels := map[string]string{"app": "web"}
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: DemoNamespace},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](demoReplicas),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					TerminationGracePeriodSeconds: ptr.To[int64](0),
					Containers: []corev1.Container{{Name: "web", Image: "registry.k8s.io/pause:3.10", Resources: corev1.ResourceRequirements{
						Requests: corev1.ResourceList{corev1.ResourceCPU: resourceQuantity("100m"), corev1.ResourceMemory: resourceQuantity("64Mi")}}}},
				},
			},
		},
	}
	if _, err := src.AppsV1().Deployments(DemoNamespace).Create(ctx, d, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating the demo Deployment: %w", err)
	}
	fmt.Fprintf(out, "Deployment %s/web (%d replicas) created in %s; each replica is elected a cluster…\n\n", DemoNamespace, demoReplicas, SourceCluster)

	var proxies []corev1.Pod
	err = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		list, err := src.CoreV1().Pods(DemoNamespace).List(ctx, metav1.ListOptions{LabelSelector: "app=web"})
		if err != nil {
			return false, nil
		}
		bound := 0
		for _, p := range list.Items {
			if strings.HasPrefix(p.Spec.NodeName, v1alpha1.VirtualNodeNamePrefix) {
				bound++
			}
		}
		proxies = list.Items
		return bound >= demoReplicas, nil
	})
	if err != nil {
		return fmt.Errorf("the demo replicas were not all bound to virtual nodes: %w", err)
	}
	sort.Slice(proxies, func(i, j int) bool { return proxies[i].Name < proxies[j].Name })
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "REPLICA (cluster-1)\tVIRTUAL NODE\tCLUSTER\tDELEGATE\tNODE THERE")
	for _, p := range proxies {
		if !strings.HasPrefix(p.Spec.NodeName, v1alpha1.VirtualNodeNamePrefix) {
			continue
		}
		cluster := strings.TrimPrefix(p.Spec.NodeName, v1alpha1.VirtualNodeNamePrefix)
		delegate, node := "-", "-"
		if cs, err := s.Client(cluster); err == nil {
			if ds, err := cs.CoreV1().Pods(DemoNamespace).List(ctx, metav1.ListOptions{LabelSelector: v1alpha1.LabelParentUID + "=" + string(p.UID)}); err == nil && len(ds.Items) > 0 {
				delegate, node = ds.Items[0].Name, ds.Items[0].Spec.NodeName
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", p.Name, p.Spec.NodeName, cluster, delegate, node)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	return s.demoLogs(ctx, out, proxies)
}

// demoLogs shows `kubectl logs` of one replica, through its virtual node,
// preferring one that runs in another cluster than the source.
func (s *Sandbox) demoLogs(ctx context.Context, out io.Writer, proxies []corev1.Pod) error {
	var pick *corev1.Pod
	for i := range proxies {
		p := &proxies[i]
		if strings.HasPrefix(p.Spec.NodeName, v1alpha1.VirtualNodeNamePrefix) && (pick == nil || p.Spec.NodeName != v1alpha1.VirtualNodeNamePrefix+SourceCluster) {
			pick = p
		}
	}
	if pick == nil {
		return nil
	}
	args := []string{"--context", SourceCluster, "-n", DemoNamespace, "logs", pick.Name, "--tail=3"}
	fmt.Fprintf(out, "\n$ kubectl %s   # through virtual node %s\n", strings.Join(args, " "), pick.Spec.NodeName)
	cmd := exec.CommandContext(ctx, filepath.Join(s.opts.BinDir, "kubectl"), args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+filepath.Join(s.opts.Dir, MergedKubeconfig))
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("kubectl logs through the virtual node: %w", err)
	}
	return nil
}
