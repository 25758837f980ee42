// Package webhook is the proxy-pod webhook: the mutating admission webhook
// that turns every pod created in an enabled namespace into a proxy pod
// (docs/design.md, "The life of a proxy pod", step 1).
//
// # What it does
//
// Mutate is the whole decision, a pure function of the pod, the seal key
// and whether a node is a fleetlet virtual node:
//
//   - Left alone: pods labelled multicluster.fleetlet.io/parent-uid
//     (candidates and delegates: in a `self` target they are created in the
//     source cluster itself), mirror pods, DaemonSet pods, pods annotated
//     multicluster.fleetlet.io/elect: "false", and pods with spec.nodeName.
//   - Refused: a pod whose spec.nodeName is a fleetlet virtual node (labelled
//     type=virtual-kubelet and either labelled with its target or named
//     fleetlet-…; another virtual-kubelet provider's nodes are not
//     fleetlet's to refuse). Nothing would ever run it there.
//   - Otherwise the pod becomes a proxy the source's own scheduler can
//     always bind once the election pins it: the multicluster.fleetlet.io/
//     delegate finalizer and multicluster.fleetlet.io/election scheduling
//     gate are appended (others kept, in order; ours never twice); the
//     nodeSelector becomes type=virtual-kubelet (a map the election adds
//     kubernetes.io/hostname to); affinity, topology spread, hostPorts,
//     ephemeral volumes with the mounts and devices that use them, and
//     resource claims (pod and containers) are removed (PersistentVolumeClaim
//     volumes stay: a StatefulSet matches them, and the election binds each
//     claim to a volume of the pod's virtual node, package claims); the scheduler name is reset to the default; the tolerations
//     are the user's plus those of the virtual nodes' taint and of
//     unschedulable and not-ready (NoSchedule), with any bounded
//     unreachable NoExecute toleration (the 300 s default) replaced by an
//     unbounded one, so that fleetlet being down never evicts a proxy. The
//     grace period stays the pod's: a delete's grace means for a proxy what
//     it means for any pod, and the elector makes the last delete once the
//     delegate is gone, as a kubelet does (releases before this one set it
//     to 0 and sealed the user's). Priority and preemptionPolicy are never
//     touched:
//     the Priority admission plugin runs again on reinvocation and refuses
//     a policy that differs from the PriorityClass.
//   - What was removed or replaced is recorded as a SourceSpec: the user's
//     nodeSelector, affinity, spread, scheduler name and tolerations, and
//     each item taken out of a list with its index. The
//     candidate in each target must get the user's values, not the
//     proxy's: SourceSpec.Restore puts them back onto a copy of the proxy's
//     spec, exactly (Restore(Open(Mutate(pod))) is the user's spec).
//   - Other multicluster.fleetlet.io/ labels and annotations the pod
//     arrives with are removed, except the user's own annotations (elect,
//     cluster-selector, follow).
//   - The containers (not init containers) of a hostNetwork pod keep their
//     hostPorts: the API server requires them equal to their
//     containerPorts there.
//   - The API server's PodSecurity admission sees only the proxy, so on a
//     first pass the pod as the user made it is checked against its
//     namespace's enforced Pod Security level (podsecurity.go) and refused
//     as PodSecurity would refuse it: the seal never hides a hostPort
//     from the source's policy.
//
// # The seal
//
// The SourceSpec is stored in the multicluster.fleetlet.io/source-spec
// annotation as
//
//	{"v":1,"mac":"<base64url, no padding>","spec":<SourceSpec JSON>}
//
// where mac is HMAC-SHA-256, under a key only fleetlet holds, of
// "multicluster.fleetlet.io/source-spec/v1", the pod's namespace and the
// spec's exact bytes. Open accepts only the exact bytes fleetlet writes
// (no whitespace, reordering, duplicate or unknown fields, lax base64) for
// the pod's own namespace; anything else is ErrUntrusted and nothing of it
// is used. The namespace is the only identity a pod has at admission (no
// UID yet, often no name). A spec sealed for one pod and copied onto
// another of the same namespace is only what its author could have
// written into that pod anyway.
//
// The keys are the Secret fleetlet-seal-key in fleetlet's namespace, made
// once by the chart with a random 32-byte "key" and read by every replica
// every few seconds (SecretKeys): "key" seals, and "previous-*" keys still
// open what they sealed, so a rotation never makes the proxies sealed
// before it untrusted. fleetlet never makes the Secret: while it is
// missing, the webhook refuses pods that would become proxies (fail
// closed) and the elector cannot open a spec (InvalidSourceSpec, retried),
// rather than replicas sealing with keys the others do not know.
//
// # Reinvocation
//
// The configuration asks for reinvocation IfNeeded. A pod that carries our
// gate and a source spec whose seal verifies is a second pass: the proxy's
// spec, with the sealed values put back and merged with what later
// webhooks set on the stripped fields (a sidecar injector's volumes and
// mounts, a nodeSelector key, tolerations, required node affinity ANDed
// term by term), is the user's pod again, and is stripped and sealed anew.
// With nothing new the result is byte for byte the same: Unchanged, no
// patch.
//
// # Serving
//
// Handler answers pods CREATE with a JSON patch computed between the pod as
// these types read it and the mutated pod (never from the raw request, so
// fields a newer API server sends and these types do not know are left
// alone). It looks nodes up in the manager's cache of Node metadata, and
// asks the API server when the cache does not know a node yet.
//
// Setup serves it from the manager on every replica (not leader-elected),
// on its own webhook server with HTTP/2 off, with two readyz checks:
// "webhook" (the server answers TLS) and "webhook-certs" (a certificate is
// issued and the configuration trusts it). Certificates come from:
//
//   - in a cluster, behind a Service (the default): cert-controller's
//     rotator keeps a CA and a serving certificate for the Service's names
//     in the Secret fleetlet-webhook-cert and injects the CA into the
//     MutatingWebhookConfiguration fleetlet-proxy-pods, which the chart
//     ships with a Service reference. Every replica copies the Secret's
//     certificate into its server (and its certificate folder) as it
//     changes: no restart, no Secret volume.
//   - with a URL (the local sandbox, no Service): an in-memory CA whose
//     certificate names the URL's host (an IP address, which
//     cert-controller does not issue), renewed before its end; the manager
//     creates or updates the configuration itself with that URL and CA.
//   - with rotation off (cert-manager or anyone else): tls.crt and tls.key
//     in a folder, reloaded when they change (ca.crt too, with a URL).
//
// MutatingWebhookConfiguration is the configuration: pods CREATE,
// namespaces labelled multicluster.fleetlet.io/enabled=true except
// kube-system and fleetlet's own, failurePolicy Fail, reinvocation
// IfNeeded, no side effects, and match conditions that keep candidates,
// delegates, mirror pods, DaemonSet pods and opted-out pods from calling
// the webhook at all, so they never depend on fleetlet being up.
//
// The manager needs: get/create on Secrets in its namespace (seal key,
// certificate; list/watch too for the certificate), list/watch on Nodes,
// and get/list/watch/update on MutatingWebhookConfigurations (create as
// well with a URL).
package webhook
