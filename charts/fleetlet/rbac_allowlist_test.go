package chart_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

// clusterWideWrites is every right to change objects anywhere in the cluster
// that the chart's identities hold (a ClusterRole bound by a
// ClusterRoleBinding, no resourceNames), each with what needs it and what
// narrows it. A new one fails TestClusterWideWritesAllowList until it is
// justified here. Keys: "identity verb resource.group".
var clusterWideWrites = map[string]string{
	// Source side: proxies and virtual nodes.
	"manager patch pods":                                            "pkg/source/elector pins, ungates and removes the finalizer of proxies; fleetlet-pod-annotations guards the annotations",
	"manager delete pods":                                           "pkg/source/elector, pkg/source/feedback delete proxies; pkg/target/chaperon deletes delegates; fleetlet-manager-deletes: only proxies and delegates",
	"manager update pods/status":                                    "pkg/source/feedback mirrors the delegate's status; pkg/source/elector writes the Elected condition",
	"manager patch pods/status":                                     "as update pods/status",
	"manager create pods/eviction":                                  "pkg/source/fleet drain evicts the proxies of a deleted target (PDBs respected)",
	"manager create nodes":                                          "pkg/source/vnode: one virtual node per target",
	"manager patch persistentvolumeclaims":                          "pkg/source/claims records the target a proxy's claim is kept in, and binds it to its mirror volume (spec.volumeName, once)",
	"manager patch resourceclaims.resource.k8s.io":                  "pkg/source/devices records the target a shared ResourceClaim is placed in (mf/target); fleetlet-pod-annotations does not cover claims, the annotation key is fleetlet's",
	"manager create persistentvolumes":                              "pkg/source/claims: the mirror volume of a placed claim, a local volume of its target's virtual node, pre-bound to that claim",
	"manager delete persistentvolumes":                              "pkg/source/claims (MirrorReaper) deletes a Released mirror volume; fleetlet-manager-deletes: only those labelled claim-mirror",
	"manager update nodes":                                          "pkg/source/vnode (virtual-kubelet's node controller)",
	"manager patch nodes":                                           "pkg/source/vnode labels and the target annotation",
	"manager delete nodes":                                          "pkg/source/vnode, pkg/target/orphans.go; fleetlet-manager-deletes: only virtual nodes",
	"manager update nodes/status":                                   "pkg/source/vnode (virtual-kubelet's node controller)",
	"manager patch nodes/status":                                    "pkg/source/vnode (virtual-kubelet's node controller)",
	"manager create pods/exec":                                      "pkg/source/kubeletapi: kubectl exec on a proxy elected into the self target reaches its delegate with the manager's own credentials",
	"manager create pods/attach":                                    "pkg/source/kubeletapi: kubectl attach, as pods/exec",
	"manager create pods/portforward":                               "pkg/source/kubeletapi: kubectl port-forward, as pods/exec",
	"manager create certificatesigningrequests.certificates.k8s.io": "pkg/source/kubeletapi requests each virtual node's serving certificate (kubelet-serving signer; approve only on that signer, by name)",
	"manager update certificatesigningrequests/approval.certificates.k8s.io": "pkg/source/kubeletapi approves its own CSRs for its own nodes (approvable)",
	"manager create tokenreviews.authentication.k8s.io":                      "the virtual nodes' kubelet API authenticates its callers",
	"manager create subjectaccessreviews.authorization.k8s.io":               "the virtual nodes' kubelet API authorizes its callers",
	"manager patch targets.multicluster.fleetlet.io":                         "pkg/source/fleet adds and removes the drain finalizer",
	"manager patch clustertargets.multicluster.fleetlet.io":                  "pkg/source/fleet adds and removes the drain finalizer",
	"manager update targets/status.multicluster.fleetlet.io":                 "pkg/source/fleet writes Ready, Draining, SummaryStale",
	"manager patch targets/status.multicluster.fleetlet.io":                  "as update",
	"manager update clustertargets/status.multicluster.fleetlet.io":          "pkg/source/fleet writes Ready, Draining, SummaryStale",
	"manager patch clustertargets/status.multicluster.fleetlet.io":           "as update",
	"manager create events.events.k8s.io":                                    "Events on proxies, Targets, chaperons, Sources",
	"manager patch events.events.k8s.io":                                     "Event series",
	"manager update events.events.k8s.io":                                    "Event series",
	"manager create events":                                                  "leader election's Events (core)",
	"manager patch events":                                                   "leader election's Events (core)",
	"manager update events":                                                  "leader election's Events (core)",
	"manager create podchaperons.multicluster.fleetlet.io":                   "a self target is reached with the manager's own credentials; fleetlet-chaperon-parent-cluster: only its clusterName",
	"manager update podchaperons.multicluster.fleetlet.io":                   "self target: the elected mark; the chaperon policy keeps parent-cluster",
	"manager patch podchaperons.multicluster.fleetlet.io":                    "self target: as update",
	"manager delete podchaperons.multicluster.fleetlet.io":                   "self target: losers and finalize",
	// Target side.
	"manager create clustersummaries.multicluster.fleetlet.io":             "pkg/target/summary creates the ClusterSummary named default",
	"manager update clustersummaries/status.multicluster.fleetlet.io":      "pkg/target/summary",
	"manager patch clustersummaries/status.multicluster.fleetlet.io":       "pkg/target/summary (server-side apply)",
	"manager create priorityclasses.scheduling.k8s.io":                     "pkg/target/summary recreates fleetlet-candidate (RBAC cannot name a create)",
	"manager update podchaperons/status.multicluster.fleetlet.io":          "pkg/target/chaperon mirrors the pod's status",
	"manager patch podchaperons/status.multicluster.fleetlet.io":           "pkg/target/chaperon",
	"manager update sources.multicluster.fleetlet.io":                      "pkg/target/access: the finalizer",
	"manager patch sources.multicluster.fleetlet.io":                       "pkg/target/access: the finalizer",
	"manager update clustersources.multicluster.fleetlet.io":               "pkg/target/access: the finalizer",
	"manager patch clustersources.multicluster.fleetlet.io":                "pkg/target/access: the finalizer",
	"manager update sources/status.multicluster.fleetlet.io":               "pkg/target/access",
	"manager patch sources/status.multicluster.fleetlet.io":                "pkg/target/access",
	"manager update clustersources/status.multicluster.fleetlet.io":        "pkg/target/access",
	"manager patch clustersources/status.multicluster.fleetlet.io":         "pkg/target/access",
	"manager update sources/finalizers.multicluster.fleetlet.io":           "owner references with blockOwnerDeletion",
	"manager update clustersources/finalizers.multicluster.fleetlet.io":    "owner references with blockOwnerDeletion",
	"manager create serviceaccounts":                                       "pkg/target/access makes each source's ServiceAccount (in any namespace a Source lives in)",
	"manager delete serviceaccounts":                                       "pkg/target/access deletes one it made and no longer uses; fleetlet-manager-deletes: only fleetlet's",
	"manager create roles.rbac.authorization.k8s.io":                       "pkg/target/access: the heartbeat Role (RBAC checks it holds what it grants)",
	"manager update roles.rbac.authorization.k8s.io":                       "pkg/target/access keeps it",
	"manager patch roles.rbac.authorization.k8s.io":                        "pkg/target/access keeps it",
	"manager delete roles.rbac.authorization.k8s.io":                       "pkg/target/access; fleetlet-manager-deletes: only fleetlet's",
	"manager create rolebindings.rbac.authorization.k8s.io":                "pkg/target/access binds sources to fleetlet-source (bind by name below)",
	"manager update rolebindings.rbac.authorization.k8s.io":                "pkg/target/access keeps them",
	"manager patch rolebindings.rbac.authorization.k8s.io":                 "pkg/target/access keeps them",
	"manager delete rolebindings.rbac.authorization.k8s.io":                "pkg/target/access; fleetlet-manager-deletes: only fleetlet's",
	"manager create clusterrolebindings.rbac.authorization.k8s.io":         "pkg/target/access binds sources to fleetlet-source-reader (bind by name)",
	"manager update clusterrolebindings.rbac.authorization.k8s.io":         "pkg/target/access keeps them",
	"manager patch clusterrolebindings.rbac.authorization.k8s.io":          "pkg/target/access keeps them",
	"manager delete clusterrolebindings.rbac.authorization.k8s.io":         "pkg/target/access; fleetlet-manager-deletes: only fleetlet's",
	"manager create leases.coordination.k8s.io":                            "the heartbeat Role grants create (RBAC: only what it holds); fleetlet-manager-leases: only fleetlet's",
	"manager update leases.coordination.k8s.io":                            "the heartbeat Role grants update; fleetlet-manager-leases: only fleetlet's",
	"manager impersonate-on:serviceaccount:create pods":                    "pkg/target/chaperon creates pods as the source, constrained to the ServiceAccounts listed per namespace",
	"manager impersonate-on:serviceaccount:patch pods":                     "pkg/target/chaperon passes a proxy's updates to its delegate as the source; fleetlet-source-pod-updates: only its own",
	"manager impersonate-on:serviceaccount:patch pods/resize":              "pkg/target/chaperon resizes a delegate in place as the source; fleetlet-source-pod-updates: only its own",
	"manager impersonate-on:serviceaccount:patch pods/ephemeralcontainers": "pkg/target/chaperon adds a proxy's ephemeral containers to its delegate as the source; fleetlet-source-pod-updates: only its own",
	// The candidate scheduler (upstream roles and its own).
	"scheduler patch podchaperons.multicluster.fleetlet.io": "pkg/target/candidate writes the reservation",
	// The uninstall hook (exists only while helm uninstall runs).
	"cleanup patch pods":                                           "fleetlet cleanup removes fleetlet's finalizer",
	"cleanup delete pods":                                          "fleetlet cleanup deletes never-elected proxies",
	"cleanup delete nodes":                                         "fleetlet cleanup deletes the virtual nodes",
	"cleanup patch targets.multicluster.fleetlet.io":               "the drain finalizer",
	"cleanup patch clustertargets.multicluster.fleetlet.io":        "the drain finalizer",
	"cleanup delete podchaperons.multicluster.fleetlet.io":         "every PodChaperon",
	"cleanup patch podchaperons.multicluster.fleetlet.io":          "the delegate-pod finalizer no chaperon controller will remove",
	"cleanup patch sources.multicluster.fleetlet.io":               "the Sources' finalizer",
	"cleanup update sources.multicluster.fleetlet.io":              "the Sources' finalizer",
	"cleanup patch clustersources.multicluster.fleetlet.io":        "the finalizer",
	"cleanup update clustersources.multicluster.fleetlet.io":       "the finalizer",
	"cleanup delete clusterrolebindings.rbac.authorization.k8s.io": "what fleetlet made for sources (labelled)",
	"cleanup delete rolebindings.rbac.authorization.k8s.io":        "what fleetlet made for sources (labelled)",
	"cleanup delete roles.rbac.authorization.k8s.io":               "what fleetlet made for sources (labelled)",
	"cleanup delete serviceaccounts":                               "what fleetlet made for sources (labelled)",
}

var readVerbs = []string{"get", "list", "watch"}

// Every cluster-wide right to write that the chart grants is in the
// allow-list above, with what needs it; no wildcard anywhere. The
// scheduler's upstream system:kube-scheduler and system:volume-scheduler
// roles are Kubernetes' own and not rendered here.
func TestClusterWideWritesAllowList(t *testing.T) {
	objs := mustRender(t, "manager:\n  rbac:\n    impersonate: [{namespace: team-a, name: fleetlet-source-cluster-2}]\n")
	seen := map[string]bool{}
	for who, sa := range map[string]string{"manager": managerSA, "scheduler": schedulerSA, "cleanup": "fl-fleetlet-cleanup"} {
		cluster, _ := rulesFor(t, objs, sa)
		for _, r := range cluster {
			if len(r.ResourceNames) > 0 {
				continue // by name: narrow by construction
			}
			for _, verb := range r.Verbs {
				if slices.Contains(readVerbs, verb) {
					continue
				}
				for _, group := range r.APIGroups {
					for _, res := range r.Resources {
						key := fmt.Sprintf("%s %s %s", who, verb, res)
						if group != "" {
							key += "." + group
						}
						seen[key] = true
						_, ok := clusterWideWrites[key]
						assert.Truef(t, ok, "a cluster-wide right not in the allow-list: %q (justify it in clusterWideWrites, or narrow it)", key)
					}
				}
			}
		}
	}
	// The list stays true: nothing in it the chart no longer grants.
	for key := range clusterWideWrites {
		assert.Truef(t, seen[key], "the allow-list names %q, which the chart does not grant", key)
	}
	if t.Failed() {
		t.Log("granted:", strings.Join(sortedKeys(seen), "; "))
	}
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
