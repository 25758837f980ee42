package v1alpha1

import (
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// Prefix is the prefix of every label, annotation, finalizer, scheduling
// gate and condition fleetlet owns ("mf/" in docs/design.md).
const Prefix = GroupName + "/"

// Labels, annotations, finalizers and scheduling gates on user objects
// (namespaces and pods of the source cluster).
const (
	// LabelEnabled on a Namespace, with value LabelEnabledValue, makes every
	// pod created there a proxy pod.
	LabelEnabled = Prefix + "enabled"

	// LabelEnabledValue is the value of LabelEnabled that enables a
	// namespace.
	LabelEnabledValue = "true"

	// AnnotationElect set to AnnotationElectDisabled on a pod opts it out
	// of fleetlet in an enabled namespace.
	AnnotationElect = Prefix + "elect"

	// AnnotationElectDisabled is the value of AnnotationElect that opts a
	// pod out.
	AnnotationElectDisabled = "false"

	// SchedulingGateElection holds a proxy pod back from the source
	// scheduler until its delegate is elected and bound.
	SchedulingGateElection = Prefix + "election"

	// FinalizerDelegate keeps a proxy pod until its delegate and chaperons
	// are gone in every target.
	FinalizerDelegate = Prefix + "delegate"

	// FinalizerDelegatePod keeps an elected PodChaperon, once deleted,
	// until its pod is gone: the source adds it with the mark that elects
	// the chaperon and deletes it without propagation, and the target's
	// chaperon controller deletes the pod (with the grace period the
	// source passed) and removes it. It does what Foreground propagation
	// did (a chaperon goes only after its pod) without the garbage
	// collector's live reads and finalizer patches.
	FinalizerDelegatePod = Prefix + "delegate-pod"

	// FinalizerDrain keeps a deleted Target or ClusterTarget until its
	// proxies are evicted and this source's chaperons are gone there.
	FinalizerDrain = Prefix + "drain"

	// AnnotationTarget on a virtual node names the target it stands for:
	// "<namespace>/<name>" for a Target, "<name>" for a ClusterTarget. A
	// node of a target that is gone is deleted; one that names another
	// target is never deleted for this one. On a PersistentVolumeClaim of
	// the source it names the target that holds the claim's copy: every
	// pod that mounts the claim is elected there, and only there (removing
	// it is how a user moves the claim, without its data). On a shared
	// ResourceClaim of the source it names the target its copy is
	// allocated in: every pod that shares it is elected there.
	AnnotationTarget = Prefix + "target"

	// AnnotationProbe set to "true" on a PodChaperon marks a candidate
	// that places a pod's claims: an emptyDir stands for each claim not
	// placed yet, and it is never elected. The target of the best probe
	// is recorded on the claims, then the pod is elected there with them.
	AnnotationProbe = Prefix + "probe"

	// LabelClaimMirror set to "true" marks a PersistentVolume of the
	// source that stands for a claim placed in a target: a local volume of
	// that target's virtual node, pre-bound to the claim.
	LabelClaimMirror = Prefix + "claim-mirror"

	// LabelGroup on proxy pods names their group (a gang) in their
	// namespace: the members are elected together, into one target, once
	// AnnotationGroupMinMembers of them are reserved there.
	LabelGroup = Prefix + "group"
	// AnnotationGroupMinMembers is how many members of a group must be
	// reserved in one target before any is elected (a positive integer;
	// required with LabelGroup).
	AnnotationGroupMinMembers = Prefix + "group-min-members"

	// AnnotationEvictWithClaims set to "true" on a proxy lets it be evicted
	// although it mounts a claim kept in its virtual node's target (the
	// webhook refuses that eviction otherwise).
	AnnotationEvictWithClaims = Prefix + "evict-with-claims"

	// AnnotationTargetVolume on a PersistentVolumeClaim of the source names
	// the volume its copy is bound to in the claim's target.
	AnnotationTargetVolume = Prefix + "target-volume"

	// AnnotationDevices on a proxy pod names the devices its delegate's
	// resource claims were allocated in its target: "request=driver/pool/
	// device" entries (claim name first when the pod has several claims),
	// comma-separated.
	AnnotationDevices = Prefix + "devices"

	// AnnotationForceDisconnect set to "true" on a Target or ClusterTarget
	// ends its drain at once: what is still there is left behind (an Event
	// says what).
	AnnotationForceDisconnect = Prefix + "force-disconnect"

	// AnnotationSourceSpec on a proxy pod records, as sealed JSON, what the
	// webhook took off it (nodeSelector, affinity, topology spread,
	// hostPorts, volumes, resource claims, scheduler name). It is written
	// by fleetlet only, never taken from the user.
	AnnotationSourceSpec = Prefix + "source-spec"

	// AnnotationClusterSelector on a pod is a label selector over the
	// targets' shared node labels: cluster-level placement.
	AnnotationClusterSelector = Prefix + "cluster-selector"

	// AnnotationFollow on a pod lists extra objects to take along to the
	// target, as "kind/name,…".
	AnnotationFollow = Prefix + "follow"

	// AnnotationGlobal set to "true" on a Service makes it global: each
	// target holding its copy also gets an EndpointSlice of the ready
	// delegates it selects in the other clusters (only where the operator
	// declares pod networks routable between clusters).
	AnnotationGlobal = Prefix + "global"

	// EndpointSliceManagedBy is the endpointslice.kubernetes.io/managed-by
	// value of the EndpointSlices fleetlet keeps for global Services: the
	// target's own EndpointSlice controller leaves them alone.
	EndpointSliceManagedBy = "endpointslice." + GroupName

	// ConditionElected is the proxy pod condition that records the
	// election: True naming the chosen target and chaperon, or False with
	// the reason for each cluster.
	ConditionElected corev1.PodConditionType = Prefix + "Elected"

	// ConditionNotRun is the condition a virtual node sets, True, on a
	// DaemonSet's pod bound to it: a virtual node stands for a whole
	// cluster, whose own nodes run their own daemons, so the pod is
	// acknowledged (Ready, so that its DaemonSet is available) and never
	// run anywhere. Reason ReasonNotRunOnVirtualNode.
	ConditionNotRun corev1.PodConditionType = Prefix + "NotRun"

	// ReasonNotRunOnVirtualNode is the reason of ConditionNotRun, and of
	// the Ready condition and container states of such a pod.
	ReasonNotRunOnVirtualNode = "NotRunOnVirtualNode"
)

// Labels and annotations on the objects fleetlet creates in targets
// (chaperons, candidates, delegates and followed objects).
const (
	// LabelParentUID is the UID of the proxy pod (or other source object)
	// that owns a remote object.
	LabelParentUID = Prefix + "parent-uid"

	// LabelParentCluster is the name of the source cluster that owns a
	// remote object: the name of its Source or ClusterSource in the target.
	LabelParentCluster = Prefix + "parent-cluster"

	// AnnotationParentName is the name of the object that owns a remote
	// object.
	AnnotationParentName = Prefix + "parent-name"

	// AnnotationParentNamespace is the namespace of the object that owns a
	// remote object.
	AnnotationParentNamespace = Prefix + "parent-namespace"

	// AnnotationFollowers on a followed object's copy in a target lists the
	// proxy pods whose candidates or delegates there need it, as
	// comma-separated "<pod name>/<pod UID>" sorted by UID. The copy is
	// deleted when the list becomes empty.
	AnnotationFollowers = Prefix + "followers"

	// AnnotationReserved on a PodChaperon is written by the candidate
	// scheduler: the node reserved for the candidate.
	AnnotationReserved = Prefix + "reserved"

	// AnnotationElected on a PodChaperon is written by the source: this
	// candidate becomes the delegate.
	AnnotationElected = Prefix + "elected"

	// AnnotationElectedAt on a PodChaperon is written with
	// AnnotationElected: when (RFC 3339) the source marked it, from which
	// its bind timeout counts.
	AnnotationElectedAt = Prefix + "elected-at"

	// AnnotationDeletionGracePeriod on a PodChaperon is written by the
	// source before it deletes the chaperon of a proxy deleted with a grace
	// period other than the pod's own (`kubectl delete --grace-period=N`,
	// `--force`): the seconds, which the target's chaperon controller
	// deletes the delegate with, as a kubelet would stop its containers.
	AnnotationDeletionGracePeriod = Prefix + "deletion-grace-period-seconds"

	// AnnotationRemovedLabels and AnnotationRemovedAnnotations on a
	// delegate's PodChaperon are written by the source with each update of
	// its template: the label and annotation keys (comma-separated) its
	// user removed from the running proxy since the delegate was created,
	// and has not set again. The target's chaperon controller removes them
	// from the pod, and only them: keys the target's own admission added
	// to the pod stay.
	AnnotationRemovedLabels      = Prefix + "removed-labels"
	AnnotationRemovedAnnotations = Prefix + "removed-annotations"

	// AnnotationPreviousDelegate on a proxy pod is written by the source
	// when an election record is dropped: the record (target=... chaperon=...)
	// of the candidate that may have become its delegate. The next
	// delegate is marked elected only once that one is confirmed gone.
	AnnotationPreviousDelegate = Prefix + "previous-delegate"

	// DelegateLabelPrefix replaces a pod label's key, in a self target,
	// on candidates and delegates: label k becomes DelegateLabelPrefix + k
	// with "/" replaced by ".", so that the source's own selectors never
	// count a pod twice.
	DelegateLabelPrefix = "delegate." + Prefix

	// SourceLabelPrefix plus a ClusterSource's name, with value "true",
	// selects a namespace for that ClusterSource when it has no
	// namespaceSelector.
	SourceLabelPrefix = "source." + Prefix
)

// Namespaces created on demand (ClusterSource spec.namespaces).
const (
	// LabelCreatedBySource on a target's namespace names the source that
	// created it there: the source may delete it (once its own namespace
	// is gone and nothing but its objects is left in it), and its
	// ClusterSource selects it. Removing the label keeps the namespace for
	// good.
	LabelCreatedBySource = Prefix + "created-by-source"

	// AnnotationTargetLabels and AnnotationTargetAnnotations on a source
	// namespace list (comma-separated) the label and annotation keys of
	// that namespace a source copies onto the namespace it creates in a
	// target, besides the Pod Security labels; the target's ClusterSource
	// must allow each.
	AnnotationTargetLabels      = Prefix + "target-labels"
	AnnotationTargetAnnotations = Prefix + "target-annotations"
)

// Virtual nodes.
const (
	// VirtualNodeNamePrefix starts the name of every virtual node:
	// fleetlet-<target> or fleetlet-<namespace>-<target>.
	VirtualNodeNamePrefix = "fleetlet-"

	// LabelCluster on a virtual node names the target it stands for.
	LabelCluster = Prefix + "cluster"

	// TargetLabelPrefix prefixes, on a virtual node, the labels its
	// target's nodes share (with "/" in their keys replaced by "."), so that
	// no constraint in the source mistakes a virtual node for a zone or
	// region of its own.
	TargetLabelPrefix = "target." + Prefix

	// LabelNodeType is the conventional virtual-kubelet node label.
	LabelNodeType = "type"

	// NodeTypeVirtualKubelet is the value of LabelNodeType on virtual
	// nodes; proxy pods select it.
	NodeTypeVirtualKubelet = "virtual-kubelet"

	// LabelNodeRole is the node role label.
	LabelNodeRole = "kubernetes.io/role"

	// NodeRoleCluster is the value of LabelNodeRole on virtual nodes.
	NodeRoleCluster = "cluster"

	// LabelHostname is the hostname label, with which a proxy pod is pinned
	// to its virtual node.
	LabelHostname = corev1.LabelHostname

	// TaintKeyProvider is the key of the taint on every virtual node.
	TaintKeyProvider = "virtual-kubelet.io/provider"

	// TaintValueProvider is the value of the TaintKeyProvider taint.
	TaintValueProvider = "fleetlet"

	// TaintEffectProvider is the effect of the TaintKeyProvider taint: only
	// proxy pods, which tolerate it, land on virtual nodes.
	TaintEffectProvider = corev1.TaintEffectNoSchedule
)

// IsFleetletKey reports whether a label or annotation key is fleetlet's:
// its prefix is GroupName or one of its sub-domains (delegate., source.,
// target.). Such keys are never copied from a user's object, so that no
// one forges what fleetlet writes.
func IsFleetletKey(key string) bool {
	prefix, _, ok := strings.Cut(key, "/")
	return ok && (prefix == GroupName || strings.HasSuffix(prefix, "."+GroupName))
}

// VirtualNodeTaint returns the taint every virtual node carries.
func VirtualNodeTaint() corev1.Taint {
	return corev1.Taint{Key: TaintKeyProvider, Value: TaintValueProvider, Effect: TaintEffectProvider}
}

// Names of objects in target clusters.
const (
	// PriorityClassCandidate is the PriorityClass of every candidate (value
	// 0, preemptionPolicy Never).
	PriorityClassCandidate = "fleetlet-candidate"

	// SchedulerNameCandidate is the scheduler name of the candidate
	// scheduler.
	SchedulerNameCandidate = "fleetlet-candidate"

	// ClusterRoleSource is the least-privilege ClusterRole bound to every
	// Source's and ClusterSource's ServiceAccount.
	ClusterRoleSource = "fleetlet-source"

	// SourceServiceAccountPrefix plus the Source's name is the default
	// ServiceAccount name of a Source or ClusterSource.
	SourceServiceAccountPrefix = "fleetlet-source-"

	// ClusterSummaryName is the name of the one ClusterSummary.
	ClusterSummaryName = "default"

	// DefaultKubeconfigKey is the default key of a kubeconfig in its
	// Secret.
	DefaultKubeconfigKey = "config"
)

// Condition types of fleetlet objects.
const (
	// ConditionReady is the Ready condition of Targets, ClusterTargets,
	// Sources, ClusterSources and the ClusterSummary.
	ConditionReady = "Ready"

	// ConditionDraining is the condition of a deleted Target or
	// ClusterTarget while fleetlet empties it: what it waits for, or what
	// blocks it.
	ConditionDraining = "Draining"

	// ConditionSummaryStale is the condition of a Target or ClusterTarget
	// whose ClusterSummary has stopped being renewed: the target's fleetlet
	// is down, so no new election goes there, while its virtual node stays
	// Ready (what runs there keeps running).
	ConditionSummaryStale = "SummaryStale"

	// ConditionCandidateScheduler is the condition of the ClusterSummary,
	// copied to the Targets and ClusterTargets that reach the cluster, that
	// says whether the cluster's candidate scheduler runs (holds and renews
	// its leader election Lease). False: no new candidate goes there, since
	// none would be scheduled; what runs there keeps running. Unknown: the
	// Lease cannot be read; the cluster stays eligible.
	ConditionCandidateScheduler = "CandidateSchedulerRunning"

	// ConditionPodCreated is the PodChaperon condition that says whether
	// the chaperon controller could create the pod it holds. True is
	// written with the pod's first news (bound, unschedulable, started):
	// a candidate's pod that no scheduler has touched yet has none.
	ConditionPodCreated = "PodCreated"
)

// Reasons of the Ready condition of a Target or ClusterTarget.
const (
	// ReasonConnected: the target answers, the credentials are authorized
	// and fleetlet runs there.
	ReasonConnected = "Connected"

	// ReasonKubeconfigSecretNotFound: the kubeconfig Secret or its key does
	// not exist.
	ReasonKubeconfigSecretNotFound = "KubeconfigSecretNotFound"

	// ReasonBadKubeconfig: the kubeconfig cannot be parsed or uses a refused
	// field (exec, auth-provider, file paths, proxy).
	ReasonBadKubeconfig = "BadKubeconfig"

	// ReasonUnreachable: the target's API server does not answer.
	ReasonUnreachable = "Unreachable"

	// ReasonForbidden: the target refuses the credentials or they lack a
	// permission fleetlet needs.
	ReasonForbidden = "Forbidden"

	// ReasonFleetletMissing: fleetlet is not installed in the target (its
	// CRDs or ClusterSummary are missing).
	ReasonFleetletMissing = "FleetletMissing"

	// ReasonInvalidSpec: the spec is invalid in a way the API server cannot
	// check, such as an excludedLabelsRegexp that does not compile.
	ReasonInvalidSpec = "InvalidSpec"

	// ReasonHostNotAllowed: the kubeconfig's server is not among the hosts
	// the manager allows targets to name (--allowed-target-hosts).
	ReasonHostNotAllowed = "HostNotAllowed"

	// ReasonTLS: the target's API server's certificate is not trusted or
	// does not match its name.
	ReasonTLS = "TLSError"

	// ReasonDuplicateCluster: another Target or ClusterTarget of this
	// source, registered first, reaches the same cluster (the same
	// ClusterSummary clusterID); this one is refused while that one stays.
	ReasonDuplicateCluster = "DuplicateCluster"

	// ReasonNodeNameTaken: another Target or ClusterTarget, registered
	// first, maps to the same virtual node name (a ClusterTarget a-b and a
	// Target b in namespace a); this one gets no virtual node while that
	// one stays.
	ReasonNodeNameTaken = "NodeNameTaken"
)

// Reasons of the SummaryStale condition of a Target or ClusterTarget.
const (
	// ReasonSummaryRenewed: the target's ClusterSummary is renewed.
	ReasonSummaryRenewed = "Renewed"
	// ReasonSummaryNotRenewed: the target's ClusterSummary has not moved
	// for longer than the staleness threshold.
	ReasonSummaryNotRenewed = "NotRenewed"
)

// Reasons of the CandidateSchedulerRunning condition.
const (
	// ReasonLeaseHeld: the candidate scheduler holds its Lease and renews
	// it.
	ReasonLeaseHeld = "LeaseHeld"
	// ReasonLeaseMissing: there is no Lease: the candidate scheduler has
	// not started.
	ReasonLeaseMissing = "LeaseMissing"
	// ReasonLeaseReleased: the last holder released the Lease (it
	// stopped) and no replica has taken it.
	ReasonLeaseReleased = "LeaseReleased"
	// ReasonLeaseExpired: the Lease has not been renewed for longer than
	// its duration: the candidate scheduler stopped or hangs.
	ReasonLeaseExpired = "LeaseExpired"
	// ReasonLeaseUnreadable: the Lease cannot be read (status Unknown).
	ReasonLeaseUnreadable = "LeaseUnreadable"
)

// Reasons of other conditions.
const (
	// ReasonProvisioned: a Source's or ClusterSource's ServiceAccount and
	// bindings are in place.
	ReasonProvisioned = "Provisioned"

	// ReasonServiceAccountNotOwned: a Source's ServiceAccount exists and
	// belongs to another Source or ClusterSource, so it is not used.
	ReasonServiceAccountNotOwned = "ServiceAccountNotOwned"

	// ReasonPodCreated: a PodChaperon's pod exists.
	ReasonPodCreated = "PodCreated"

	// ReasonPodRejected: the target refused to create a PodChaperon's pod
	// (RBAC, Pod Security, quota or validation); the message says why.
	ReasonPodRejected = "PodRejected"

	// ReasonPodDeleted: a PodChaperon's pod was created and has since been
	// deleted. It is final: the pod is never created again for that
	// chaperon (the source's feedback deletes the proxy).
	ReasonPodDeleted = "PodDeleted"
)
