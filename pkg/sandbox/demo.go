package sandbox

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
)

// DemoPodName is the pod the demo runs in every cluster.
const DemoPodName = "fleetlet-demo"

// Demo prints every cluster's nodes (cluster-1's virtual nodes among them),
// then, with fleetlet, runs a Deployment in cluster-1 whose replicas are
// elected across the clusters and shows where each runs; without fleetlet,
// runs one pod in every cluster.
func (s *Sandbox) Demo(ctx context.Context, out io.Writer) error {
	if err := s.printNodes(ctx, out); err != nil {
		return err
	}
	fmt.Fprintln(out)
	if !s.opts.NoFleetlet {
		return s.demoDeployment(ctx, out)
	}
	return s.demoPods(ctx, out)
}

// demoPods runs one pod in every cluster and prints where it runs.
func (s *Sandbox) demoPods(ctx context.Context, out io.Writer) error {
	for _, name := range s.ClusterNames() {
		cs, err := s.Client(name)
		if err != nil {
			return err
		}
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: DemoPodName, Namespace: corev1.NamespaceDefault, Labels: map[string]string{"app": DemoPodName}},
			Spec: corev1.PodSpec{
				TerminationGracePeriodSeconds: ptr.To[int64](0),
				Containers: []corev1.Container{{
					Name:  "web",
					Image: "registry.k8s.io/pause:3.10",
					Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
						corev1.ResourceCPU: resourceQuantity("100m"), corev1.ResourceMemory: resourceQuantity("64Mi"),
					}},
				}},
			},
		}
		if _, err := cs.CoreV1().Pods(pod.Namespace).Create(ctx, pod, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("%s: creating pod %s: %w", name, DemoPodName, err)
		}
	}

	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "CLUSTER\tPOD\tNODE\tPHASE\tIP")
	for _, name := range s.ClusterNames() {
		cs, err := s.Client(name)
		if err != nil {
			return err
		}
		var pod *corev1.Pod
		err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			pod, err = cs.CoreV1().Pods(corev1.NamespaceDefault).Get(ctx, DemoPodName, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			return pod.Status.Phase == corev1.PodRunning, nil
		})
		if err != nil {
			return fmt.Errorf("%s: pod %s is not Running: %w", name, DemoPodName, err)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", name, pod.Name, pod.Spec.NodeName, pod.Status.Phase, pod.Status.PodIP)
	}
	return tw.Flush()
}

// printNodes prints every cluster's nodes.
func (s *Sandbox) printNodes(ctx context.Context, out io.Writer) error {
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "CLUSTER\tNODE\tREADY\tCPU\tMEMORY\tZONE")
	for _, name := range s.ClusterNames() {
		cs, err := s.Client(name)
		if err != nil {
			return err
		}
		nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return fmt.Errorf("%s: listing nodes: %w", name, err)
		}
		for _, n := range nodes.Items {
			fmt.Fprintf(tw, "%s\t%s\t%t\t%s\t%s\t%s\n", name, n.Name, NodeIsReady(&n),
				n.Status.Allocatable.Cpu(), n.Status.Allocatable.Memory(), n.Labels[LabelZone])
		}
	}
	return tw.Flush()
}
