package sandbox

import (
	"context"
	"fmt"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// The system workloads a furnished cluster runs in kube-system, as a
// production cluster does from its first day: DaemonSets that tolerate
// every taint (a kube-proxy that selects Linux nodes, a CNI agent that
// selects every node) and a CoreDNS. fleetlet must leave them undisturbed,
// including on its virtual nodes.
const (
	FurnitureKubeProxy = "kube-proxy"
	FurnitureCNIAgent  = "cni-agent"
	FurnitureCoreDNS   = "coredns"
)

// furnish creates the system workloads in a cluster (those already there
// are left as they are).
func furnish(ctx context.Context, cs kubernetes.Interface) error {
	for _, ds := range []*appsv1.DaemonSet{
		daemonSet(FurnitureKubeProxy, "registry.k8s.io/kube-proxy:v1.37.2", "100m", "50Mi", map[string]string{corev1.LabelOSStable: "linux"}),
		daemonSet(FurnitureCNIAgent, "registry.example/cni-agent:1.0", "50m", "64Mi", nil),
	} {
		if _, err := cs.AppsV1().DaemonSets(metav1.NamespaceSystem).Create(ctx, ds, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating DaemonSet %s: %w", ds.Name, err)
		}
	}
	if _, err := cs.AppsV1().Deployments(metav1.NamespaceSystem).Create(ctx, coreDNS(), metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating Deployment %s: %w", FurnitureCoreDNS, err)
	}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "kube-dns", Namespace: metav1.NamespaceSystem, Labels: map[string]string{"k8s-app": "kube-dns"}},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"k8s-app": "kube-dns"}, Ports: []corev1.ServicePort{
			{Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP, TargetPort: intstr.FromInt32(53)},
			{Name: "dns-tcp", Port: 53, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(53)},
		}},
	}
	if _, err := cs.CoreV1().Services(metav1.NamespaceSystem).Create(ctx, svc, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating Service kube-dns: %w", err)
	}
	for _, m := range mutators() {
		if _, err := cs.AdmissionregistrationV1().MutatingAdmissionPolicies().Create(ctx, m, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating MutatingAdmissionPolicy %s: %w", m.Name, err)
		}
		binding := &admissionregistrationv1.MutatingAdmissionPolicyBinding{
			ObjectMeta: metav1.ObjectMeta{Name: m.Name},
			Spec:       admissionregistrationv1.MutatingAdmissionPolicyBindingSpec{PolicyName: m.Name},
		}
		if _, err := cs.AdmissionregistrationV1().MutatingAdmissionPolicyBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating MutatingAdmissionPolicyBinding %s: %w", m.Name, err)
		}
	}
	return nil
}

// Labels that turn the furnished clusters' other mutating admission on for
// a namespace: the sidecar injection of a service mesh, and the scheduler
// name a batch system's admission sets on every pod.
const (
	LabelInjectSidecar    = "sandbox.fleetlet.io/inject-sidecar"
	LabelRewriteScheduler = "sandbox.fleetlet.io/rewrite-scheduler"
	// SidecarName is the container the sidecar injection adds.
	SidecarName = "mesh-proxy"
	// RewrittenSchedulerName is the scheduler name the rewrite sets.
	RewrittenSchedulerName = "batch-scheduler"
)

// mutators are the furnished clusters' other mutating admission, besides
// fleetlet's webhook: a sidecar injector and a scheduler-name rewriter, each
// for the namespaces labelled for it (MutatingAdmissionPolicies: the same
// mutating admission phase as webhooks, reinvoked as theirs are, with no
// server to run).
func mutators() []*admissionregistrationv1.MutatingAdmissionPolicy {
	onPodCreate := func(label string) *admissionregistrationv1.MatchResources {
		return &admissionregistrationv1.MatchResources{
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{label: "true"}},
			ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{RuleWithOperations: admissionregistrationv1.RuleWithOperations{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
				Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}},
			}}},
		}
	}
	fail := ptr.To(admissionregistrationv1.Fail)
	return []*admissionregistrationv1.MutatingAdmissionPolicy{
		{
			ObjectMeta: metav1.ObjectMeta{Name: "sandbox-sidecar-injector"},
			Spec: admissionregistrationv1.MutatingAdmissionPolicySpec{
				MatchConstraints:   onPodCreate(LabelInjectSidecar),
				FailurePolicy:      fail,
				ReinvocationPolicy: admissionregistrationv1.IfNeededReinvocationPolicy,
				MatchConditions: []admissionregistrationv1.MatchCondition{{Name: "not-injected",
					Expression: fmt.Sprintf("!object.spec.containers.exists(c, c.name == '%s')", SidecarName)}},
				Mutations: []admissionregistrationv1.Mutation{{PatchType: admissionregistrationv1.PatchTypeJSONPatch, JSONPatch: &admissionregistrationv1.JSONPatch{
					Expression: fmt.Sprintf(`[JSONPatch{op: "add", path: "/spec/containers/-", value: Object.spec.containers{name: "%s", image: "registry.example/mesh-proxy:1.0"}}]`, SidecarName),
				}}},
			},
		},
		{
			ObjectMeta: metav1.ObjectMeta{Name: "sandbox-scheduler-rewriter"},
			Spec: admissionregistrationv1.MutatingAdmissionPolicySpec{
				MatchConstraints:   onPodCreate(LabelRewriteScheduler),
				FailurePolicy:      fail,
				ReinvocationPolicy: admissionregistrationv1.NeverReinvocationPolicy,
				Mutations: []admissionregistrationv1.Mutation{{PatchType: admissionregistrationv1.PatchTypeApplyConfiguration, ApplyConfiguration: &admissionregistrationv1.ApplyConfiguration{
					Expression: fmt.Sprintf(`Object{spec: Object.spec{schedulerName: "%s"}}`, RewrittenSchedulerName),
				}}},
			},
		},
	}
}

// daemonSet is a node agent as clusters run them: host network, the
// system-node-critical priority, a toleration of every taint.
func daemonSet(name, image, cpu, memory string, nodeSelector map[string]string) *appsv1.DaemonSet {
	labels := map[string]string{"k8s-app": name}
	return &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: metav1.NamespaceSystem, Labels: labels},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			UpdateStrategy: appsv1.DaemonSetUpdateStrategy{Type: appsv1.RollingUpdateDaemonSetStrategyType,
				RollingUpdate: &appsv1.RollingUpdateDaemonSet{MaxUnavailable: ptr.To(intstr.FromString("10%"))}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					HostNetwork:                   true,
					PriorityClassName:             "system-node-critical",
					NodeSelector:                  nodeSelector,
					Tolerations:                   []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
					TerminationGracePeriodSeconds: ptr.To[int64](1),
					Containers:                    []corev1.Container{agentContainer(name, image, cpu, memory)},
				},
			},
		},
	}
}

// coreDNS is a cluster DNS Deployment as kubeadm makes it.
func coreDNS() *appsv1.Deployment {
	labels := map[string]string{"k8s-app": "kube-dns"}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: FurnitureCoreDNS, Namespace: metav1.NamespaceSystem, Labels: labels},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](2),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					PriorityClassName: "system-cluster-critical",
					NodeSelector:      map[string]string{corev1.LabelOSStable: "linux"},
					Tolerations: []corev1.Toleration{
						{Key: "CriticalAddonsOnly", Operator: corev1.TolerationOpExists},
						{Key: "node-role.kubernetes.io/control-plane", Effect: corev1.TaintEffectNoSchedule},
					},
					TerminationGracePeriodSeconds: ptr.To[int64](1),
					Containers:                    []corev1.Container{agentContainer("coredns", "registry.k8s.io/coredns/coredns:v1.12.1", "100m", "70Mi")},
				},
			},
		},
	}
}

func agentContainer(name, image, cpu, memory string) corev1.Container {
	return corev1.Container{Name: name, Image: image, Resources: corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse(memory)},
		Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse(memory)},
	}}
}
