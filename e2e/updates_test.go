package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
	"github.com/fleetlet/fleetlet/pkg/proxy"
	"github.com/fleetlet/fleetlet/pkg/sandbox"
)

// TestUpdatesReachTheDelegate: what a user changes on a running proxy with
// kubectl reaches its delegate, each kind checked on the delegate's own
// object in its target: labels (one removed, one added, a label the
// target's admission added kept), annotations, an image, activeDeadline
// Seconds, an added toleration, an in-place resize (the resize subresource)
// and an ephemeral container (`kubectl debug`), which `kubectl attach`
// reaches through the virtual node. Before: every one stopped at the proxy.
// After each spec change the proxy's status.observedGeneration reaches its
// generation once the delegate has acted on it, as a kubelet's does.
func TestUpdatesReachTheDelegate(t *testing.T) {
	need(t)
	ns := enabledNamespace(t, "updates", sb.ClusterNames()[1:]...)
	ctx := context.Background()
	src := kube(t, sandbox.SourceCluster).CoreV1().Pods(ns)
	spec := podSpec("100m")
	spec.InitContainers = []corev1.Container{{Name: "init", Image: "registry.k8s.io/pause:3.10"}}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web", Labels: map[string]string{"case": "updates", "tier": "web"},
		Annotations: map[string]string{"note": "first"}}, Spec: spec}
	_, err := src.Create(ctx, pod, metav1.CreateOptions{})
	require.NoError(t, err)
	p := waitBound(t, ns, "case=updates", 1, 2*time.Minute)[0]
	cluster := clusterOfNode(p.Spec.NodeName)
	delegateName := delegatesOf(t, ctx, &p)[cluster][0].Name
	target := kube(t, cluster).CoreV1().Pods(ns)
	// The target's own admission, say, labelled the delegate.
	_, err = kubectl(t, "--context", cluster, "-n", ns, "label", "pod", delegateName, "mesh.example/injected=true")
	require.NoError(t, err)
	run := func(args ...string) {
		t.Helper()
		out, err := kubectl(t, append([]string{"--context", sandbox.SourceCluster, "-n", ns}, args...)...)
		require.NoErrorf(t, err, "kubectl %s\n%s", strings.Join(args, " "), out)
	}
	delegateShows := func(what string, check func(d *corev1.Pod) string) {
		t.Helper()
		eventually(t, time.Minute, "the delegate shows "+what, func(ctx context.Context) (bool, string) {
			d, err := target.Get(ctx, delegateName, metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			why := check(d)
			return why == "", why
		})
	}

	// In the source's self target, the delegate's labels are moved.
	key := func(k string) string {
		if cluster == sandbox.SourceCluster {
			return proxy.SelfLabelKey(k)
		}
		return k
	}
	proxyShows := func(what string, check func(p *corev1.Pod) string) {
		t.Helper()
		eventually(t, time.Minute, "the proxy shows "+what, func(ctx context.Context) (bool, string) {
			p, err := src.Get(ctx, "web", metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			why := check(p)
			return why == "", why
		})
	}
	// As a kubelet does, once the delegate has acted on the proxy's spec
	// change, the proxy's status.observedGeneration says so.
	actedOn := func() {
		t.Helper()
		proxyShows("its generation acted on", func(p *corev1.Pod) string {
			if p.Status.ObservedGeneration != p.Generation {
				return fmt.Sprintf("generation %d, status.observedGeneration %d", p.Generation, p.Status.ObservedGeneration)
			}
			return ""
		})
	}
	actedOn()
	t.Run("labels", func(t *testing.T) {
		run("label", "pod", "web", "tier-", "debug=true")
		delegateShows("the new labels", func(d *corev1.Pod) string {
			if _, ok := d.Labels[key("tier")]; ok || d.Labels[key("debug")] != "true" || d.Labels["mesh.example/injected"] != "true" || d.Labels[key("case")] != "updates" {
				return fmt.Sprintf("labels %v: want debug=true, no tier, and case and the target's own kept", d.Labels)
			}
			return ""
		})
	})
	t.Run("annotations", func(t *testing.T) {
		run("annotate", "pod", "web", "--overwrite", "note=second", "owner=team-a")
		delegateShows("the new annotations", func(d *corev1.Pod) string {
			if d.Annotations["note"] != "second" || d.Annotations["owner"] != "team-a" {
				return fmt.Sprintf("annotations %v", d.Annotations)
			}
			return ""
		})
	})
	t.Run("image", func(t *testing.T) {
		run("set", "image", "pod/web", "main=registry.k8s.io/pause:3.9", "init=registry.k8s.io/pause:3.9")
		delegateShows("the new images", func(d *corev1.Pod) string {
			if d.Spec.Containers[0].Image != "registry.k8s.io/pause:3.9" || d.Spec.InitContainers[0].Image != "registry.k8s.io/pause:3.9" {
				return fmt.Sprintf("images %s, %s", d.Spec.Containers[0].Image, d.Spec.InitContainers[0].Image)
			}
			return ""
		})
		// The target's kubelet restarts the container with its new image:
		// the proxy says so, as a pod does.
		proxyShows("the restart", func(p *corev1.Pod) string {
			if len(p.Status.ContainerStatuses) == 0 {
				return "no container status"
			}
			cs := p.Status.ContainerStatuses[0]
			if cs.Image != "registry.k8s.io/pause:3.9" || cs.RestartCount != 1 || cs.LastTerminationState.Terminated == nil || cs.State.Running == nil {
				return fmt.Sprintf("container status image %s, restartCount %d, lastState %+v, state %+v", cs.Image, cs.RestartCount, cs.LastTerminationState, cs.State)
			}
			return ""
		})
		actedOn()
	})
	t.Run("activeDeadlineSeconds", func(t *testing.T) {
		run("patch", "pod", "web", "-p", `{"spec":{"activeDeadlineSeconds":86400}}`)
		delegateShows("the deadline", func(d *corev1.Pod) string {
			if d.Spec.ActiveDeadlineSeconds == nil || *d.Spec.ActiveDeadlineSeconds != 86400 {
				return fmt.Sprintf("activeDeadlineSeconds %v", d.Spec.ActiveDeadlineSeconds)
			}
			return ""
		})
		actedOn()
	})
	t.Run("toleration", func(t *testing.T) {
		run("patch", "pod", "web", "--type=json", "-p", `[{"op":"add","path":"/spec/tolerations/-","value":{"key":"spot","operator":"Exists","effect":"NoSchedule"}}]`)
		delegateShows("the toleration", func(d *corev1.Pod) string {
			for _, tol := range d.Spec.Tolerations {
				if tol.Key == "spot" && tol.Effect == corev1.TaintEffectNoSchedule {
					return ""
				}
			}
			return fmt.Sprintf("tolerations %v", d.Spec.Tolerations)
		})
		actedOn()
	})
	t.Run("resize", func(t *testing.T) {
		run("patch", "pod", "web", "--subresource", "resize", "-p", `{"spec":{"containers":[{"name":"main","resources":{"requests":{"cpu":"150m"}}}]}}`)
		delegateShows("the resize", func(d *corev1.Pod) string {
			if got := d.Spec.Containers[0].Resources.Requests.Cpu().String(); got != "150m" {
				return "cpu request " + got
			}
			return ""
		})
		proxyShows("the resize carried out", func(p *corev1.Pod) string {
			if len(p.Status.ContainerStatuses) == 0 || p.Status.ContainerStatuses[0].Resources == nil {
				return "no container resources in the status"
			}
			cs := p.Status.ContainerStatuses[0]
			if got, alloc := cs.Resources.Requests.Cpu().String(), cs.AllocatedResources.Cpu().String(); got != "150m" || alloc != "150m" {
				return fmt.Sprintf("status resources %s, allocated %s", got, alloc)
			}
			return ""
		})
		actedOn()
	})
	t.Run("debug", func(t *testing.T) {
		run("debug", "web", "--image=registry.k8s.io/pause:3.10", "-c", "debugger", "--profile=baseline")
		delegateShows("the ephemeral container", func(d *corev1.Pod) string {
			for _, e := range d.Spec.EphemeralContainers {
				if e.Name == "debugger" {
					return ""
				}
			}
			return fmt.Sprintf("ephemeral containers %v", d.Spec.EphemeralContainers)
		})
		proxyShows("the ephemeral container running", func(p *corev1.Pod) string {
			for _, e := range p.Status.EphemeralContainerStatuses {
				if e.Name == "debugger" && e.State.Running != nil {
					return ""
				}
			}
			return fmt.Sprintf("ephemeral container statuses %+v", p.Status.EphemeralContainerStatuses)
		})
		attachSees(t, cluster, fmt.Sprintf("debugger attached %d", time.Now().UnixNano()), "-n", ns, "attach", "web", "-c", "debugger")
		actedOn()
	})

	// The delegate is the same pod throughout, and its chaperon says it
	// is at the template's generation.
	var pc v1alpha1.PodChaperon
	require.NoError(t, ctrlClient(t, cluster).Get(ctx, client.ObjectKey{Namespace: ns, Name: delegateName}, &pc))
	assert.Falsef(t, pc.Status.ObservedGeneration != pc.Generation || pc.Generation < 8, "chaperon generation %d, observedGeneration %d: want 8 or more (one per update), observed", pc.Generation, pc.Status.ObservedGeneration)
	got := delegatesOf(t, ctx, &p)
	assert.Falsef(t, len(got[cluster]) != 1 || got[cluster][0].Name != delegateName || len(got) != 1, "delegates %v, want %s alone, updated in place", got, delegateName)
}
