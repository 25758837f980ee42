package chaperon

import (
	"maps"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
	"github.com/fleetlet/fleetlet/pkg/target/access"
)

// chaperonWrapper builds test chaperons: by default labelled for source
// cluster-a, with a one-container template.
type chaperonWrapper struct{ v1alpha1.PodChaperon }

func makeChaperon(namespace, name string) *chaperonWrapper {
	return &chaperonWrapper{v1alpha1.PodChaperon{
		ObjectMeta: metav1.ObjectMeta{
			Namespace:  namespace,
			Name:       name,
			Generation: 1,
			Labels: map[string]string{
				v1alpha1.LabelParentUID:     "proxy-uid-" + name,
				v1alpha1.LabelParentCluster: "cluster-a",
			},
			Annotations: map[string]string{
				v1alpha1.AnnotationParentName:      "proxy-" + name,
				v1alpha1.AnnotationParentNamespace: "source-ns",
			},
		},
		Spec: v1alpha1.PodChaperonSpec{Template: v1alpha1.PodChaperonTemplate{
			Metadata: v1alpha1.PodChaperonTemplateMetadata{Labels: map[string]string{"app": name}},
			Spec: corev1.PodSpec{
				Containers: []corev1.Container{{Name: "app", Image: "registry.example/app:1"}},
			},
		}},
	}}
}

func (w *chaperonWrapper) uid(uid types.UID) *chaperonWrapper { w.UID = uid; return w }

func (w *chaperonWrapper) labels(l map[string]string) *chaperonWrapper {
	w.Labels = maps.Clone(l)
	return w
}

func (w *chaperonWrapper) label(k, v string) *chaperonWrapper {
	if w.Labels == nil {
		w.Labels = map[string]string{}
	}
	w.Labels[k] = v
	return w
}

func (w *chaperonWrapper) noLabel(k string) *chaperonWrapper { delete(w.Labels, k); return w }

func (w *chaperonWrapper) annotations(a map[string]string) *chaperonWrapper {
	w.Annotations = maps.Clone(a)
	return w
}

func (w *chaperonWrapper) annotation(k, v string) *chaperonWrapper {
	if w.Annotations == nil {
		w.Annotations = map[string]string{}
	}
	w.Annotations[k] = v
	return w
}

func (w *chaperonWrapper) templateLabels(l map[string]string) *chaperonWrapper {
	w.Spec.Template.Metadata.Labels = maps.Clone(l)
	return w
}

func (w *chaperonWrapper) templateAnnotations(a map[string]string) *chaperonWrapper {
	w.Spec.Template.Metadata.Annotations = maps.Clone(a)
	return w
}

func (w *chaperonWrapper) spec(s corev1.PodSpec) *chaperonWrapper {
	w.Spec.Template.Spec = *s.DeepCopy()
	return w
}

// cond sets the PodCreated condition.
func (w *chaperonWrapper) cond(status metav1.ConditionStatus, reason string) *chaperonWrapper {
	w.Status.Conditions = []metav1.Condition{{
		Type: v1alpha1.ConditionPodCreated, Status: status, Reason: reason, Message: "earlier",
		ObservedGeneration: w.Generation, LastTransitionTime: metav1.Unix(1000, 0),
	}}
	w.Status.ObservedGeneration = w.Generation
	return w
}

// condAt sets the PodCreated condition, last changed at t, with message.
func (w *chaperonWrapper) condAt(status metav1.ConditionStatus, reason string, t time.Time, message string) *chaperonWrapper {
	w.cond(status, reason)
	w.Status.Conditions[0].LastTransitionTime = metav1.NewTime(t)
	w.Status.Conditions[0].Message = message
	return w
}

// elected marks the chaperon elected by its source: its pod is a delegate.
func (w *chaperonWrapper) elected() *chaperonWrapper {
	return w.annotation(v1alpha1.AnnotationElected, "true")
}

func (w *chaperonWrapper) restartPolicy(p corev1.RestartPolicy) *chaperonWrapper {
	w.Spec.Template.Spec.RestartPolicy = p
	return w
}

func (w *chaperonWrapper) nodeName(n string) *chaperonWrapper { w.Status.NodeName = n; return w }

func (w *chaperonWrapper) deleting() *chaperonWrapper {
	now := metav1.Unix(2000, 0)
	w.DeletionTimestamp = &now
	w.Finalizers = append(w.Finalizers, metav1.FinalizerDeleteDependents)
	return w
}

func (w *chaperonWrapper) obj() *v1alpha1.PodChaperon { return w.DeepCopy() }

// readySource is a Source provisioned for its current generation.
func readySource(namespace, name, serviceAccount string) *v1alpha1.Source {
	return &v1alpha1.Source{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, Generation: 1},
		Status: v1alpha1.SourceStatus{
			ObservedGeneration: 1,
			ServiceAccountName: serviceAccount,
			Conditions: []metav1.Condition{{
				Type: v1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonProvisioned,
				ObservedGeneration: 1, LastTransitionTime: metav1.Unix(1000, 0),
			}},
		},
	}
}

// readyClusterSource is a ClusterSource provisioned for its current
// generation, selecting the namespaces labelled sel.
func readyClusterSource(name, saNamespace, serviceAccount string, sel map[string]string) *v1alpha1.ClusterSource {
	cs := &v1alpha1.ClusterSource{
		ObjectMeta: metav1.ObjectMeta{Name: name, Generation: 1},
		Spec:       v1alpha1.ClusterSourceSpec{ServiceAccountNamespace: saNamespace},
		Status: v1alpha1.ClusterSourceStatus{
			ObservedGeneration:      1,
			ServiceAccountName:      serviceAccount,
			ServiceAccountNamespace: saNamespace,
			Conditions: []metav1.Condition{{
				Type: v1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonProvisioned,
				ObservedGeneration: 1, LastTransitionTime: metav1.Unix(1000, 0),
			}},
		},
	}
	if sel != nil {
		cs.Spec.NamespaceSelector = &metav1.LabelSelector{MatchLabels: sel}
	}
	return cs
}

// heartbeatLease is the heartbeat Lease of source sourceName in namespace,
// as the source writes it: renewed at renew, lasting duration.
func heartbeatLease(namespace, sourceName string, renew time.Time, duration time.Duration) *coordinationv1.Lease {
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: namespace,
			Name:      access.HeartbeatLeaseName(sourceName),
			Labels:    map[string]string{v1alpha1.LabelParentCluster: sourceName},
		},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity:       &sourceName,
			LeaseDurationSeconds: ptrTo(int32(duration / time.Second)),
			RenewTime:            &metav1.MicroTime{Time: renew},
		},
	}
}

func namespace(name string, labels map[string]string) *corev1.Namespace {
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
}

// heldPod is the pod BuildPod makes for ch, as if created, with a status.
func heldPod(ch *v1alpha1.PodChaperon, uid types.UID, nodeName string, phase corev1.PodPhase) *corev1.Pod {
	pod := BuildPod(ch)
	pod.UID = uid
	pod.Spec.NodeName = nodeName
	pod.Status = corev1.PodStatus{Phase: phase, QOSClass: corev1.PodQOSBestEffort}
	return pod
}

// foreignPod is a pod of the given name that no chaperon owns.
func foreignPod(namespace, name string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, UID: "foreign-uid", Labels: map[string]string{"owner": "someone"}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "other"}}},
		Status:     corev1.PodStatus{Phase: corev1.PodRunning},
	}
}

func (w *chaperonWrapper) noAnnotation(k string) *chaperonWrapper { delete(w.Annotations, k); return w }
