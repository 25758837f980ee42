package feedback

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/assert"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
)

var (
	t0 = metav1.NewTime(time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC))
	t1 = metav1.NewTime(t0.Add(time.Minute))
)

func proxyPod(containers []string, init []string, conds ...corev1.PodCondition) *corev1.Pod {
	p := &corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodPending, QOSClass: corev1.PodQOSBurstable, Conditions: conds}}
	for _, c := range containers {
		p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: c, Image: "img-" + c})
	}
	for _, c := range init {
		p.Spec.InitContainers = append(p.Spec.InitContainers, corev1.Container{Name: c, Image: "img-" + c})
	}
	return p
}

func running(name string, restarts int32) corev1.ContainerStatus {
	return corev1.ContainerStatus{
		Name: name, Image: "img-" + name, ImageID: "sha256:" + name, ContainerID: "containerd://" + name,
		Ready: true, Started: ptr.To(true), RestartCount: restarts,
		State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: t0}},
		// Node-specific details that must not reach the proxy.
		VolumeMounts: []corev1.VolumeMountStatus{{Name: "kube-api-access-xyz", MountPath: "/var/run/secrets"}},
		User:         &corev1.ContainerUser{Linux: &corev1.LinuxContainerUser{UID: 1000}},
	}
}

func cond(t corev1.PodConditionType, s corev1.ConditionStatus, at metav1.Time) corev1.PodCondition {
	return corev1.PodCondition{Type: t, Status: s, LastTransitionTime: at}
}

func TestTranslate(t *testing.T) {
	elected := corev1.PodCondition{Type: v1alpha1.ConditionElected, Status: corev1.ConditionTrue, Reason: "Elected", Message: "target=c2 chaperon=x"}
	scheduled := cond(corev1.PodScheduled, corev1.ConditionTrue, t0)
	disruption := cond(corev1.DisruptionTarget, corev1.ConditionTrue, t0)
	gate := cond("example.com/gate", corev1.ConditionFalse, t0)

	tests := []struct {
		name     string
		proxy    *corev1.Pod
		delegate corev1.PodStatus
		want     func(*corev1.PodStatus)
	}{
		{
			name:  "running delegate: phase, IPs, host, start time, statuses, conditions merged",
			proxy: proxyPod([]string{"app"}, nil, elected, scheduled, gate),
			delegate: corev1.PodStatus{
				Phase: corev1.PodRunning, PodIP: "10.2.0.5", PodIPs: []corev1.PodIP{{IP: "10.2.0.5"}}, HostIP: "192.168.0.9",
				StartTime:         &t0,
				ContainerStatuses: []corev1.ContainerStatus{running("app", 2)},
				Conditions: []corev1.PodCondition{
					cond(corev1.PodScheduled, corev1.ConditionTrue, t1),
					cond(corev1.PodReady, corev1.ConditionTrue, t1),
					cond(corev1.ContainersReady, corev1.ConditionTrue, t1),
					cond(corev1.PodInitialized, corev1.ConditionTrue, t0),
				},
			},
			want: func(s *corev1.PodStatus) {
				s.Phase = corev1.PodRunning
				s.PodIP, s.PodIPs = "10.2.0.5", []corev1.PodIP{{IP: "10.2.0.5"}}
				s.HostIP, s.HostIPs = "127.0.0.9", []corev1.HostIP{{IP: "127.0.0.9"}}
				s.StartTime = &t0
				s.ContainerStatuses = []corev1.ContainerStatus{{
					Name: "app", Image: "img-app", ImageID: "sha256:app", ContainerID: "containerd://app",
					Ready: true, Started: ptr.To(true), RestartCount: 2,
					State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: t0}},
				}}
				// The proxy's own scheduler's PodScheduled and the foreign
				// gate condition stay; the kubelet's come after.
				s.Conditions = []corev1.PodCondition{elected, scheduled, gate,
					cond(corev1.PodReady, corev1.ConditionTrue, t1),
					cond(corev1.ContainersReady, corev1.ConditionTrue, t1),
					cond(corev1.PodInitialized, corev1.ConditionTrue, t0)}
			},
		},
		{
			name: "missing container waits; init container still running",
			proxy: proxyPod([]string{"app", "sidecar"}, []string{"setup"}, elected,
				cond(corev1.PodInitialized, corev1.ConditionFalse, t0)),
			delegate: corev1.PodStatus{
				Phase:                 corev1.PodPending,
				InitContainerStatuses: []corev1.ContainerStatus{running("setup", 0)},
				ContainerStatuses: []corev1.ContainerStatus{{Name: "app", Image: "img-app",
					State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "PodInitializing"}}}},
				Conditions: []corev1.PodCondition{cond(corev1.PodInitialized, corev1.ConditionFalse, t1)},
			},
			want: func(s *corev1.PodStatus) {
				setup := running("setup", 0)
				setup.VolumeMounts, setup.User = nil, nil
				s.InitContainerStatuses = []corev1.ContainerStatus{setup}
				s.ContainerStatuses = []corev1.ContainerStatus{
					{Name: "app", Image: "img-app", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "PodInitializing"}}},
					{Name: "sidecar", Image: "img-sidecar", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: ReasonPodInitializing}}},
				}
				// Same status: the proxy keeps the transition it showed.
				s.Conditions = []corev1.PodCondition{elected, cond(corev1.PodInitialized, corev1.ConditionFalse, t0)}
			},
		},
		{
			name:  "terminated delegate: Succeeded with the exit code; a container the proxy lacks is left out",
			proxy: proxyPod([]string{"app"}, nil, elected, disruption),
			delegate: corev1.PodStatus{
				Phase: corev1.PodSucceeded, Reason: "Completed",
				ContainerStatuses: []corev1.ContainerStatus{
					{Name: "app", Image: "img-app", State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0, Reason: "Completed", FinishedAt: t1}}},
					{Name: "istio-proxy", Image: "istio"},
				},
				Conditions: []corev1.PodCondition{cond(corev1.PodReady, corev1.ConditionFalse, t1), cond(corev1.DisruptionTarget, corev1.ConditionFalse, t1)},
			},
			want: func(s *corev1.PodStatus) {
				s.Phase, s.Reason = corev1.PodSucceeded, "Completed"
				s.HostIP, s.HostIPs = "127.0.0.9", []corev1.HostIP{{IP: "127.0.0.9"}}
				s.ContainerStatuses = []corev1.ContainerStatus{
					{Name: "app", Image: "img-app", State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0, Reason: "Completed", FinishedAt: t1}}},
				}
				// The delegate's DisruptionTarget is the target's business:
				// the proxy's own stays.
				s.Conditions = []corev1.PodCondition{elected, disruption, cond(corev1.PodReady, corev1.ConditionFalse, t1)}
			},
		},
		{
			name: "a finished proxy keeps its final status",
			proxy: func() *corev1.Pod {
				p := proxyPod([]string{"app"}, nil, elected)
				p.Status.Phase = corev1.PodFailed
				p.Status.Reason = "Evicted"
				return p
			}(),
			delegate: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.0.0.1"},
			want:     func(*corev1.PodStatus) {},
		},
		{
			name:  "restarts and last termination are carried; a pending delegate gets no host yet",
			proxy: proxyPod([]string{"app"}, nil),
			delegate: corev1.PodStatus{
				Phase: corev1.PodPending,
				ContainerStatuses: []corev1.ContainerStatus{{Name: "app", Image: "img-app", RestartCount: 4,
					State:                corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff", Message: "back-off"}},
					LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1, Reason: "Error"}}}},
			},
			want: func(s *corev1.PodStatus) {
				s.ContainerStatuses = []corev1.ContainerStatus{{Name: "app", Image: "img-app", RestartCount: 4,
					State:                corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff", Message: "back-off"}},
					LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1, Reason: "Error"}}}}
			},
		},
		{
			name:  "a resize: the resources and allocated resources, and the kubelet's resize condition",
			proxy: proxyPod([]string{"app"}, nil, elected),
			delegate: corev1.PodStatus{
				Phase: corev1.PodRunning,
				ContainerStatuses: func() []corev1.ContainerStatus {
					app := running("app", 0)
					app.Resources = &corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("150m")}}
					app.AllocatedResources = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")}
					return []corev1.ContainerStatus{app}
				}(),
				Conditions: []corev1.PodCondition{{Type: corev1.PodResizeInProgress, Status: corev1.ConditionTrue, LastTransitionTime: t1}},
			},
			want: func(s *corev1.PodStatus) {
				s.Phase = corev1.PodRunning
				s.HostIP, s.HostIPs = "127.0.0.9", []corev1.HostIP{{IP: "127.0.0.9"}}
				app := running("app", 0)
				app.VolumeMounts, app.User = nil, nil
				app.Resources = &corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("150m")}}
				app.AllocatedResources = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")}
				s.ContainerStatuses = []corev1.ContainerStatus{app}
				s.Conditions = []corev1.PodCondition{elected, {Type: corev1.PodResizeInProgress, Status: corev1.ConditionTrue, LastTransitionTime: t1}}
			},
		},
		{
			name: "ephemeral containers are reported by name",
			proxy: func() *corev1.Pod {
				p := proxyPod([]string{"app"}, nil)
				p.Spec.EphemeralContainers = []corev1.EphemeralContainer{{EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: "debug", Image: "busybox"}}}
				return p
			}(),
			delegate: corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{running("app", 0)}},
			want: func(s *corev1.PodStatus) {
				s.Phase = corev1.PodRunning
				s.HostIP, s.HostIPs = "127.0.0.9", []corev1.HostIP{{IP: "127.0.0.9"}}
				app := running("app", 0)
				app.VolumeMounts, app.User = nil, nil
				s.ContainerStatuses = []corev1.ContainerStatus{app}
				s.EphemeralContainerStatuses = []corev1.ContainerStatus{{Name: "debug", Image: "busybox",
					State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: ReasonContainerCreating}}}}
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := tc.proxy.DeepCopy()
			want := *tc.proxy.Status.DeepCopy()
			tc.want(&want)
			got := Translate(tc.proxy, &tc.delegate, "127.0.0.9")
			assert.Empty(t, cmp.Diff(want, got), "status (-want +got)")
			assert.Empty(t, cmp.Diff(before, tc.proxy), "Translate changed the proxy (-before +after)")
			// Translating again changes nothing: no write loop.
			p := tc.proxy.DeepCopy()
			p.Status = got
			if again := Translate(p, &tc.delegate, "127.0.0.9"); !statusEqual(&got, &again) {
				assert.Failf(t, "not idempotent:\n", "not idempotent:\n%s", cmp.Diff(got, again))
			}
		})
	}
}

// A shared claim is named by the delegate's spec (its status has no entry
// for it); a claim made from a template by the status, once made.
func TestResourceClaimsOf(t *testing.T) {
	spec := &corev1.PodSpec{ResourceClaims: []corev1.PodResourceClaim{
		{Name: "shared", ResourceClaimName: ptr.To("team-gpu")},
		{Name: "own", ResourceClaimTemplateName: ptr.To("one-gpu")},
		{Name: "not-made-yet", ResourceClaimTemplateName: ptr.To("one-gpu")},
	}}
	status := &corev1.PodStatus{ResourceClaimStatuses: []corev1.PodResourceClaimStatus{{Name: "own", ResourceClaimName: ptr.To("pod-own-x7k2")}}}
	want := []corev1.PodResourceClaimStatus{
		{Name: "shared", ResourceClaimName: ptr.To("team-gpu")},
		{Name: "own", ResourceClaimName: ptr.To("pod-own-x7k2")},
	}
	assert.Empty(t, cmp.Diff(want, resourceClaimsOf(spec, status)), "resourceClaimsOf (-want,+got)")
}
