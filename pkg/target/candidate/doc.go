// Package candidate is the candidate plugin of fleetlet's candidate
// scheduler (`fleetlet scheduler`, one per target cluster): kube-scheduler's
// framework with every default plugin, plus this plugin, in a profile named
// fleetlet-candidate (the schedulerName of every candidate pod).
//
// In a target, each PodChaperon a source creates gets a candidate pod (same
// name and namespace, the chaperon as its controller). The default plugins
// find it a real node; this plugin then turns the scheduling cycle into a
// reservation that the source's election can rely on:
//
//   - Reserve records the node on the chaperon, as the annotation
//     multicluster.fleetlet.io/reserved=<node>, without waiting for the API
//     server: the write is queued, and workers apply the latest intent of
//     each chaperon, retry failed writes with backoff, and skip writes that
//     would change nothing. The node stays reserved in the scheduler's
//     cache while the candidate waits.
//   - Permit reads the chaperon synchronously, from the plugin's cache:
//     elected (multicluster.fleetlet.io/elected: "true") allows the
//     candidate at once, which is what lets a restarted scheduler bind an
//     elected candidate; gone, replaced by another chaperon of the same name,
//     or being deleted rejects it; otherwise the candidate waits, up to
//     Args.PermitTimeout (below the framework's 15-minute cap). A "gone" read
//     from the cache is confirmed with a read from the API server, the only
//     request on Permit's path, since a cache may lag behind a chaperon just
//     created.
//   - While candidates wait, the plugin's watch on chaperons allows one the
//     moment its chaperon is elected and rejects it the moment the chaperon
//     is deleted or starts being deleted. Nothing polls. A decision that
//     arrives before the framework has registered the waiting pod is retried
//     after a few milliseconds.
//   - Unreserve (rejection, Permit timeout, failed binding, pod deleted)
//     removes the reservation, queued like Reserve's, and only if the
//     annotation still names this node on this chaperon (a JSON patch with
//     test operations on the UID and the node).
//   - A candidate that waited past the Permit timeout is activated (sent back
//     to the active queue) when its chaperon is elected; the scheduler's
//     periodic flush of unschedulable pods retries it in any case, renewing
//     its reservation.
//
// The plugin acts only on pods of scheduler fleetlet-candidate whose
// controller is a PodChaperon; every other pod passes untouched. An
// unschedulable candidate gets PodScheduled=False with the scheduler's
// message from the framework itself; the chaperon controller mirrors it.
// A candidate that lost (rejected because its chaperon is gone, replaced or
// being deleted) gets nothing written: QuietLosses drops it from the
// scheduler's queue without the FailedScheduling Event and the status patch
// kube-scheduler writes for a rejection, since its pod goes with its
// chaperon. The scheduler runs with kube-scheduler's
// NominatedNodeNameForExpectation gate off (SchedulerFeatureDefaults), so a
// candidate waiting at Permit gets no nominatedNodeName either: the
// reservation on the chaperon says the same.
//
// What it watches: the metadata of every PodChaperon (a metadata-only
// informer, started through the scheduler's kubeconfig; pod templates are
// never cached), and pods through the scheduler's own informer. What it
// writes: the multicluster.fleetlet.io/reserved annotation of chaperons,
// nothing else. RBAC: get, list, watch and patch on podchaperons.
//
// One election costs the target's API server one request per candidate,
// the reservation: Permit and the watch read the cache, and the removal of a
// loser's reservation is skipped once its chaperon is known to be deleted
// (a confirming read is made only when the cache alone would reject).
//
// Metrics, served by the scheduler on /metrics beside its scheduler_*
// metrics: fleetlet_candidate_permit_total{result},
// fleetlet_candidate_waits_total{result},
// fleetlet_candidate_wait_duration_seconds{result},
// fleetlet_candidate_waiting_pods,
// fleetlet_candidate_reservation_writes_total{operation,result} and
// fleetlet_candidate_reservation_latency_seconds.
//
// The package also builds the scheduler's default configuration
// (Configuration) and checks a user's (CheckConfiguration).
package candidate
