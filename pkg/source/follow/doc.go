// Package follow takes along to a target what a proxy pod needs there:
// the ConfigMaps, Secrets and ServiceAccount its spec references, and the
// extra objects its multicluster.fleetlet.io/follow annotation asks for.
// It is a library: the proxy reconciler (package elector) calls Ensure and
// Release, a source-change watch calls Sync, and the garbage collector
// (package gc) runs its Collectors.
//
// # What is followed
//
// Refs reads the user's spec (the proxy's with the sealed source spec
// restored): volumes and projected volumes (configMap, secret, and the
// Secrets of volume plugins such as csi.nodePublishSecretRef), env
// valueFrom and envFrom of containers, init and ephemeral containers,
// imagePullSecrets (optional: the kubelet pulls without them) and the
// ServiceAccount ("default" when none is named). kube-root-ca.crt is never
// followed: every namespace has its own. The annotation lists "kind/name"
// pairs in the pod's namespace, separated by commas; a kind is written as
// a Kind or resource name, singular or plural, in any case, optionally
// with its group ("configmap", "ConfigMaps", "persistentvolumeclaim",
// "deployments.apps"). Only namespaced kinds whose Kind is in the
// allow-list (--follow-allowed-kinds) are taken; short names are not
// understood. A PersistentVolumeClaim the pod mounts is left out of the
// annotation's list: package claims keeps it in the pod's one target.
//
// # When
//
// Ensure at StageCandidate copies ServiceAccounts, ConfigMaps and the
// allowed kinds but Secrets to a target before its candidate is created;
// at StageDelegate it also copies Secrets, to the elected target only,
// before the delegate may bind. A ServiceAccount that already exists in
// the target and that fleetlet did not make satisfies the need only when
// it is "default" or labelled source.multicluster.fleetlet.io/<source>=true
// by the target's admin (any other is a clash: the target is filtered),
// and is never modified;
// service-account-token Secrets are never copied; self targets follow
// nothing (the caller does not call Ensure for them).
//
// # Ownership
//
// A copy keeps the source object's name (the spec names it) and carries
// the multicluster.fleetlet.io/parent-cluster label (this source), the
// parent-name and parent-namespace annotations (the source object), and
// multicluster.fleetlet.io/followers: the proxy pods whose candidates or
// delegates need it, "name/UID" sorted by UID. Two sources sharing a
// target namespace each own their own copies; an object of the same name
// without this source's label is a clash, refused, and left untouched.
// Only copies with this source's label are ever updated or deleted. A
// copy (but a PersistentVolumeClaim, whose data goes only with its source
// claim: package claims adopts and collects it) is deleted when its
// followers list becomes empty (Release, or the
// collector when a proxy is gone), with UID and resourceVersion
// preconditions so that a follower added meanwhile keeps it.
//
// # Content
//
// ConfigMaps: data, binaryData, immutable. Secrets: type, data, immutable.
// ServiceAccounts: automountServiceAccountToken and metadata, never their
// secrets or imagePullSecrets (the target has its own token mechanics).
// Other kinds: every field but status and system metadata, merged into an
// existing copy so that what the target adds stays (fields removed in the
// source are not removed from the copy); a PersistentVolumeClaim loses
// spec.volumeName and its binding annotations. Labels and annotations are
// the source's, minus fleetlet's own (which a source object cannot forge)
// and kubectl's last-applied configuration. An immutable ConfigMap or
// Secret whose content changed in the source (it was recreated) is
// recreated.
//
// # Reads
//
// ConfigMaps and ServiceAccounts are read through Options.Source (the
// manager's cache); Secrets and other kinds through Options.SourceAPI,
// uncached and by name, so Secrets are never cached cluster-wide with
// their data. Targets are read with their uncached clients.
//
// # Source changes
//
// Sync pushes a source object's content to this source's copy in one
// target. When the source object is gone, a copy still followed is kept
// (a running delegate may mount it) and Sync returns a *SourceGone for
// the caller to report with an Event; the copy goes with its last
// follower.
//
// # Errors and metrics
//
// A *Refusal (NotAllowed, NotFound, Clash, ClusterScoped, Forbidden,
// Malformed) says which object cannot be followed and why — Forbidden when
// the target does not let this source manage an allowed kind (its
// fleetlet-source role grants ConfigMaps, Secrets and ServiceAccounts
// only) or does not serve it: the caller filters the target,
// records an Event and writes the Elected condition. A malformed
// annotation is refused by Refs, for every target. Metrics:
// fleetlet_follow_objects{cluster,kind} (copies held per target) and
// fleetlet_follow_errors_total{cluster,reason}.
package follow
