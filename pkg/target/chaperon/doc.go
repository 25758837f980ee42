// Package chaperon is the target side of running a pod for a source cluster:
// the PodChaperon controller creates the pod each chaperon holds, as the
// source's own ServiceAccount, and mirrors the pod back onto the chaperon,
// where the source reads it.
//
// # What it owns
//
// For every PodChaperon (created in this cluster by a source; labelled
// multicluster.fleetlet.io/parent-cluster=<source> and parent-uid) the
// PodChaperonReconciler creates one pod, BuildPod:
//
//   - the chaperon's name and namespace;
//   - the template's labels plus the chaperon's parent-uid and
//     parent-cluster labels, and the template's annotations plus the
//     chaperon's parent-name and parent-namespace annotations — under those
//     four keys the chaperon's values win over the template's (and a key the
//     chaperon lacks is dropped), so a source cannot make its pod pass for
//     another's;
//   - the template's spec, as it is;
//   - an ownerReference to the chaperon with controller and
//     blockOwnerDeletion, so the garbage collector deletes the pod with the
//     chaperon and a Foreground deletion of the chaperon finishes only once
//     the pod is gone.
//
// An elected chaperon carries the finalizer
// multicluster.fleetlet.io/delegate-pod, which the source's mark adds, and
// the source deletes it without propagation: this controller deletes its
// pod (with the grace period the source passed) and, once the cache no
// longer shows the pod, removes the finalizer, so that the chaperon is gone
// only after its pod, as Foreground would have it, without the garbage
// collector's live reads and finalizer patch (about 8.5 requests per
// delegate). The source confirms the pod gone before its proxy goes.
//
// It writes the chaperon's status, through the status subresource, only
// when something changed, as a JSON patch that first tests that the
// status's conditions (its records) are still those it read, so that the
// metadata others write meanwhile (the candidate scheduler's reservation,
// the source's marks) refuses nothing: observedGeneration; podStatus, the
// pod's whole status; nodeName, the pod's spec.nodeName once bound (the
// reservation before it stays the multicluster.fleetlet.io/reserved
// annotation's); and the PodCreated condition:
//
//   - True, PodCreated: the pod exists and is this chaperon's;
//   - True, DelegateRecreated: the same, for a delegate created again
//     while its source was unreachable (see "When the source is
//     unreachable"), for as long as that pod lives;
//   - False, InvalidChaperon: a parent label is missing;
//   - False, SourceNotFound / SourceNotReady / NamespaceNotSelected: no
//     identity to create the pod as (see below); retried when the Source or
//     ClusterSource changes, and every RetryInterval;
//   - False, PodRejected: the target refused the pod — RBAC, Pod Security,
//     quota, an admission policy or webhook, validation — with the API
//     server's message; retried with exponential backoff
//     (RejectedBackoffInitial to RejectedBackoffMax);
//   - False, PodNotOwned: a pod of that name exists that the chaperon does
//     not control; it is never touched, and checked again every
//     RetryInterval (once it is gone, the chaperon gets its pod);
//   - False, PodDeleted: the pod was created and is gone. Final, but for a
//     delegate whose source is unreachable; the message says which, and
//     when the pod comes back.
//
// A condition that turns False, or changes its reason or message, is also
// an Event on the chaperon (Warning, reason as above); a created pod is a
// Normal PodCreated Event naming the identity it was created as, and a
// recreated delegate a Normal DelegateRecreated Event.
//
// # Updates
//
// A source passes what its user changes on a running proxy by updating the
// delegate's chaperon template (metadata.generation moves). The pod it
// holds, while neither is being deleted and it has not finished, is then
// brought up to the template, as the source's ServiceAccount (update.go),
// in three requests: the template's new ephemeral containers (the
// ephemeralcontainers subresource), an in-place resize of every container
// whose template resources differ (the resize subresource; requests and
// limits the template does not name stay), then labels, annotations,
// container and init container images, activeDeadlineSeconds and the
// template's tolerations the pod lacks. Label and annotation keys the
// template lacks are removed only if the source lists them as its user's
// removals (AnnotationRemovedLabels, AnnotationRemovedAnnotations): keys
// this cluster's admission added stay. status.observedGeneration says the
// generation the pod was brought up to. A part the target refuses is a
// Warning UpdateRejected Event and waits for the next change of the
// template; a pod updated is a Normal PodUpdated Event.
//
// It deletes no pod but the pod of a chaperon being deleted, at once (see
// deletePod); otherwise deletion is the garbage collector's, through the
// owner reference.
//
// # Whose identity
//
// The pod is created impersonating the ServiceAccount of the chaperon's
// source, so that this cluster's RBAC, Pod Security, quotas and admission
// policies judge what a source runs as they would judge the source itself
// (a manager creating pods as itself would be a confused deputy). The
// source is the Source named <parent-cluster> in the chaperon's namespace,
// else the ClusterSource named <parent-cluster> if its namespace selector
// (pkg/target/access.NamespaceSelector) selects the chaperon's namespace; it must
// be Ready for its current generation and not being deleted, and its
// status.serviceAccountName (and serviceAccountNamespace) name the
// ServiceAccount. The user is system:serviceaccount:<namespace>:<name>,
// impersonated by user name only (the API server adds the ServiceAccount's
// groups), with one client per user built from the manager's REST config
// and kept (Impersonator).
//
// # Never twice
//
// A pod that was created and then disappeared is not created again here:
// deleting a delegate deletes its proxy pod, whose controller makes a new
// one. The one exception, a delegate whose source is unreachable, is the
// next section. Telling "never created" from "created, then deleted"
// rests on the chaperon's status: PodCreated True, or False with reason
// PodDeleted, means the pod was created. Status is the record because only
// this controller writes it — a source may read a chaperon's status but not
// write it, so it cannot erase the record to have a pod created twice.
//
// The record waits for the pod's first news (recordWaits): a candidate's
// pod that no scheduler or kubelet has touched costs no status write, so
// a losing candidate, reserved and then deleted, costs its target none at
// all (with a candidate in every target, that write was a third of each
// target's chaperon writes). Until then the source's mark (the elected
// annotation, which no source removes) stands for the record: a source
// marks only a candidate whose pod the candidate scheduler reserved a node
// for, and that scheduler binds only a marked candidate, so a pod that may
// have run is always recorded. A candidate's pod deleted before its mark
// and its first news never ran; it is created again, as a new candidate.
// Both directions of cache lag are checked:
//
//   - no pass acts on a cache that has not shown our last status write: it
//     waits for the event that shows it (the version the write made; the
//     cache's events come in order), or a second if a relist skipped it;
//   - no pass creates a pod this controller created within 5 s and the
//     cache has not shown yet (createdPods): it waits for the pod's event;
//   - before creating, the chaperon is read again from the API server when
//     the cache may lack our own "created" record: it has not shown a
//     status write of ours yet (a pass that waited past 5 s), or the
//     chaperon is older than this controller's lead (plus a margin: a
//     manager before it may have recorded a creation). A burst of new
//     chaperons thus costs no read, and no cache behind our record can
//     cause a second creation;
//   - a pod recorded as created but missing from the cache is read from the
//     API server before it is declared deleted, so a pod created a moment
//     ago is not mistaken for a deleted one;
//   - a creation that finds the name taken (AlreadyExists) reads the pod
//     and adopts it only if the chaperon controls it.
//
// The one window left: the candidate scheduler binds a marked pod, its
// kubelet starts it, and it is deleted before this controller has seen
// the mark (a pass behind by the mark's event): the pod is then created
// once more. Before the record waited, the window was the same with the
// manager stopping between a creation and its record.
//
// A chaperon being deleted gets no pod and no status write at all: its
// pod is deleted, and its status stays as it was (its pod's going is no
// news; the source reads the pod itself).
//
// # When the source is unreachable
//
// Sources and targets talk one way: only the source can replace a deleted
// delegate (by deleting its proxy, whose controller makes a new one), and
// it cannot while it is unreachable. Each source's manager renews a
// heartbeat Lease in the target, fleetlet-source-<source>
// (access.HeartbeatLeaseName) in the namespace of the source's
// ServiceAccount — the Source's namespace, or a ClusterSource's
// status.serviceAccountNamespace — found through the chaperon's
// parent-cluster label as for the pod's identity. The Lease expires at
// renewTime + leaseDurationSeconds.
//
// While it is expired, the target keeps the workload alive: a chaperon
// whose pod was created and is gone has it created again, with the same
// name, by the same path as the first time (as the source's
// ServiceAccount, held by the same chaperon), when all of these hold
// (decideRecreate):
//
//   - the chaperon is elected (multicluster.fleetlet.io/elected=true): a
//     candidate never elected is never created again;
//   - its template's restartPolicy is Always (or unset, which a pod
//     defaults to Always): an OnFailure or Never pod that is gone has
//     finished or was meant to go;
//   - the chaperon is not being deleted and no pod of that name exists;
//   - the heartbeat Lease exists, has been renewed and has a duration, and
//     is expired. A missing Lease never counts as expired: a self target
//     has none, a source may predate its heartbeat, and this controller
//     cannot tell a Lease deleted from one never created — leaving a pod
//     deleted is the side that can never make two delegates;
//   - RecreateDelay (--delegate-recreate-delay, default one minute) has
//     passed since the later of the heartbeat's expiry and the moment the
//     pod was seen deleted, which is the PodDeleted condition's
//     lastTransitionTime (to the second; it survives restarts). Counting
//     from the later of the two gives a source that was reachable a
//     moment ago the whole delay to notice the deletion and delete the
//     chaperon itself, and damps a storm of deletions; counting from the
//     deletion alone would recreate at once a pod deleted long before an
//     outage.
//
// Before creating, the chaperon and the Lease are read again from the API
// server, so that neither a cache behind a renewal nor one behind the
// source deleting the chaperon causes a recreation. The condition becomes
// True with reason DelegateRecreated; a refusal keeps PodDeleted (with the
// API server's message) and is retried with the PodRejected backoff, so
// that a source that comes back finds nothing created behind its back
// after it returned.
//
// When the source is back, nothing is doubled: the recreated pod has the
// chaperon's fixed name and is held by the chaperon the source elected, so
// there is still one delegate, whose status the source reads as before.
// From then on a deleted delegate stays deleted again.
//
// Expiry is time passing, not an event: a chaperon whose delegate is gone
// is requeued for the heartbeat's expiry while the source is reachable,
// and for the recreation instant once it is not; every change of a
// heartbeat Lease wakes the chaperons of that source that may be
// recreated (field index IndexAwaitingRecreation), so a renewal is seen
// at once. There is no polling per pod.
//
// renewTime is written by the source's clock, and expiry judged by this
// manager's: a skew between the two shifts the expiry by as much, and
// RecreateDelay should exceed any skew expected. A source's heartbeat
// Role lets it create any Lease in its ServiceAccount's namespace (RBAC
// cannot limit create to a name), so another source sharing that
// namespace could create this source's Lease before it does; the real
// source's next renewal (it may update its own Lease) corrects it.
//
// # What it watches
//
// PodChaperons (not our own status writes), pods controlled by a
// PodChaperon (status, nodeName, deletion), Sources and ClusterSources
// (each change wakes the chaperons that name it and wait for their pod, or
// for their delegate to be created again), and Leases named
// fleetlet-source-* whose expiry changed (each wakes the chaperons of that
// source whose delegate may be created again). The manager's cache of
// Leases can be restricted to the heartbeat Leases, labelled
// parent-cluster by their source, with HeartbeatLeaseCache; the manager
// does so.
// Pods are read from the manager's cache, which the ClusterSummary
// controller already fills with every pod of the cluster; restricting the
// manager's pod cache to pods labelled parent-uid would break that
// controller, so this package adds no cache option.
//
// # RBAC
//
// The manager needs: get, list and watch on podchaperons, sources,
// clustersources, pods, namespaces and coordination.k8s.io leases; get and patch on podchaperons/status;
// create and patch on events.k8s.io events; and the right to impersonate
// each source's ServiceAccount and nothing else. With constrained
// impersonation (Kubernetes 1.35+, beta and on by default since 1.36) that
// is, per source: impersonate:serviceaccount on serviceaccounts in API
// group authentication.k8s.io (not the core group) with resourceNames
// [<its ServiceAccount>] in the ServiceAccount's namespace, and
// impersonate-on:serviceaccount:create on pods (core group) in each
// namespace the source may act in (or once, cluster-wide: the
// impersonated account's own RBAC still decides where it creates pods) —
// the manager can then only create pods as the source, not even run
// discovery as it, which is why the clients share the manager's REST
// mapper. The legacy verb impersonate on
// serviceaccounts (core group) with the same resourceNames works too, but
// lets the manager do anything the source may.
//
// The source's ServiceAccount needs create on pods in each namespace it may
// act in (and, where the OwnerReferencesPermissionEnforcement admission
// plugin is enabled, update on podchaperons/finalizers, to set
// blockOwnerDeletion). That right is usable by the source directly too; it
// adds no authority, since a chaperon's template already makes this
// controller create any pod the ServiceAccount may create — same
// namespaces, same RBAC, Pod Security and quota. For updates it needs patch
// on pods, pods/resize and pods/ephemeralcontainers (and the manager
// impersonate-on:serviceaccount:patch on the same); the
// fleetlet-source-pod-updates admission policy holds a source's patches to
// the pods that carry its own parent labels. It needs no delete on pods.
package chaperon
