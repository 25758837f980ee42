package webhook

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
)

// testKey is a seal key for unit tests.
var testKey = []byte("0123456789abcdef0123456789abcdef")

// testKeys is a key set of testKey alone.
var testKeys = Keys{Seal: testKey}

// podWrapper builds test pods as admission sees them: defaulted (default
// scheduler, 30 s grace period, the DefaultTolerationSeconds tolerations),
// one container "app".
type podWrapper struct{ corev1.Pod }

func makePod(namespace, name string) *podWrapper {
	return &podWrapper{corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Spec: corev1.PodSpec{
			Containers:                    []corev1.Container{{Name: "app", Image: "registry.k8s.io/pause:3.10"}},
			SchedulerName:                 corev1.DefaultSchedulerName,
			TerminationGracePeriodSeconds: ptr.To[int64](30),
			RestartPolicy:                 corev1.RestartPolicyAlways,
			DNSPolicy:                     corev1.DNSClusterFirst,
			Tolerations: []corev1.Toleration{
				{Key: corev1.TaintNodeNotReady, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To[int64](300)},
				{Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To[int64](300)},
			},
		},
	}}
}

func (w *podWrapper) obj() *corev1.Pod { return w.DeepCopy() }

func (w *podWrapper) label(k, v string) *podWrapper {
	if w.Labels == nil {
		w.Labels = map[string]string{}
	}
	w.Labels[k] = v
	return w
}

func (w *podWrapper) annotate(k, v string) *podWrapper {
	if w.Annotations == nil {
		w.Annotations = map[string]string{}
	}
	w.Annotations[k] = v
	return w
}

func (w *podWrapper) owner(apiVersion, kind, name string) *podWrapper {
	w.OwnerReferences = append(w.OwnerReferences, metav1.OwnerReference{APIVersion: apiVersion, Kind: kind, Name: name, UID: "uid-" + "name", Controller: ptr.To(true)})
	return w
}

func (w *podWrapper) nodeName(n string) *podWrapper {
	w.Spec.NodeName = n
	return w
}

func (w *podWrapper) gates(names ...string) *podWrapper {
	for _, n := range names {
		w.Spec.SchedulingGates = append(w.Spec.SchedulingGates, corev1.PodSchedulingGate{Name: n})
	}
	return w
}

func (w *podWrapper) finalizers(names ...string) *podWrapper {
	w.Finalizers = append(w.Finalizers, names...)
	return w
}

func (w *podWrapper) nodeSelector(pairs ...string) *podWrapper {
	if w.Spec.NodeSelector == nil {
		w.Spec.NodeSelector = map[string]string{}
	}
	for i := 0; i+1 < len(pairs); i += 2 {
		w.Spec.NodeSelector[pairs[i]] = pairs[i+1]
	}
	return w
}

func (w *podWrapper) zoneAffinity(zone string) *podWrapper {
	w.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
		RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
			MatchExpressions: []corev1.NodeSelectorRequirement{{Key: corev1.LabelTopologyZone, Operator: corev1.NodeSelectorOpIn, Values: []string{zone}}},
		}}},
	}}
	return w
}

func (w *podWrapper) spread(key string) *podWrapper {
	w.Spec.TopologySpreadConstraints = append(w.Spec.TopologySpreadConstraints, corev1.TopologySpreadConstraint{
		MaxSkew: 1, TopologyKey: key, WhenUnsatisfiable: corev1.DoNotSchedule,
		LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "x"}},
	})
	return w
}

func (w *podWrapper) scheduler(name string) *podWrapper {
	w.Spec.SchedulerName = name
	return w
}

func (w *podWrapper) grace(s int64) *podWrapper {
	w.Spec.TerminationGracePeriodSeconds = &s
	return w
}

func (w *podWrapper) toleration(t corev1.Toleration) *podWrapper {
	w.Spec.Tolerations = append(w.Spec.Tolerations, t)
	return w
}

func (w *podWrapper) tolerations(ts ...corev1.Toleration) *podWrapper {
	w.Spec.Tolerations = ts
	return w
}

func (w *podWrapper) hostNetwork() *podWrapper {
	w.Spec.HostNetwork = true
	return w
}

// port adds a port to container c.
func (w *podWrapper) port(c string, containerPort, hostPort int32) *podWrapper {
	ctr := w.container(c)
	ctr.Ports = append(ctr.Ports, corev1.ContainerPort{ContainerPort: containerPort, HostPort: hostPort, Protocol: corev1.ProtocolTCP})
	return w
}

func (w *podWrapper) volume(v corev1.Volume) *podWrapper {
	w.Spec.Volumes = append(w.Spec.Volumes, v)
	return w
}

func (w *podWrapper) pvc(name, claim string) *podWrapper {
	return w.volume(corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim}}})
}

func (w *podWrapper) emptyDir(name string) *podWrapper {
	return w.volume(corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}})
}

func (w *podWrapper) ephemeral(name string) *podWrapper {
	return w.volume(corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{Ephemeral: &corev1.EphemeralVolumeSource{
		VolumeClaimTemplate: &corev1.PersistentVolumeClaimTemplate{Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
		}},
	}}})
}

func (w *podWrapper) mount(c, volume, path string) *podWrapper {
	ctr := w.container(c)
	ctr.VolumeMounts = append(ctr.VolumeMounts, corev1.VolumeMount{Name: volume, MountPath: path})
	return w
}

func (w *podWrapper) device(c, volume, path string) *podWrapper {
	ctr := w.container(c)
	ctr.VolumeDevices = append(ctr.VolumeDevices, corev1.VolumeDevice{Name: volume, DevicePath: path})
	return w
}

func (w *podWrapper) resourceClaim(name, template string) *podWrapper {
	w.Spec.ResourceClaims = append(w.Spec.ResourceClaims, corev1.PodResourceClaim{Name: name, ResourceClaimTemplateName: &template})
	return w
}

func (w *podWrapper) containerClaim(c, claim string) *podWrapper {
	ctr := w.container(c)
	ctr.Resources.Claims = append(ctr.Resources.Claims, corev1.ResourceClaim{Name: claim})
	return w
}

func (w *podWrapper) initContainer(name string) *podWrapper {
	w.Spec.InitContainers = append(w.Spec.InitContainers, corev1.Container{Name: name, Image: "registry.k8s.io/pause:3.10"})
	return w
}

func (w *podWrapper) addContainer(name string) *podWrapper {
	w.Spec.Containers = append(w.Spec.Containers, corev1.Container{Name: name, Image: "registry.k8s.io/pause:3.10"})
	return w
}

// container returns the init or regular container named c.
func (w *podWrapper) container(c string) *corev1.Container {
	for i := range w.Spec.InitContainers {
		if w.Spec.InitContainers[i].Name == c {
			return &w.Spec.InitContainers[i]
		}
	}
	for i := range w.Spec.Containers {
		if w.Spec.Containers[i].Name == c {
			return &w.Spec.Containers[i]
		}
	}
	panic("no container " + c)
}

// Tolerations of a proxy.
var (
	tolProvider       = corev1.Toleration{Key: v1alpha1.TaintKeyProvider, Operator: corev1.TolerationOpEqual, Value: v1alpha1.TaintValueProvider, Effect: corev1.TaintEffectNoSchedule}
	tolUnschedulable  = corev1.Toleration{Key: corev1.TaintNodeUnschedulable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}
	tolNotReadyNS     = corev1.Toleration{Key: corev1.TaintNodeNotReady, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}
	tolUnreachable    = corev1.Toleration{Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute}
	tolNotReady300    = corev1.Toleration{Key: corev1.TaintNodeNotReady, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To[int64](300)}
	tolUnreachable300 = corev1.Toleration{Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To[int64](300)}
)

// proxyNodeSelector is every proxy's node selector.
func proxyNodeSelector() map[string]string {
	return map[string]string{v1alpha1.LabelNodeType: v1alpha1.NodeTypeVirtualKubelet}
}

// virtualNodes is an IsVirtualNode for the given names.
func virtualNodes(names ...string) func(string) (bool, error) {
	return func(n string) (bool, error) {
		for _, x := range names {
			if x == n {
				return true, nil
			}
		}
		return false, nil
	}
}
