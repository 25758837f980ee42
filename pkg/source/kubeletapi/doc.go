// Package kubeletapi runs in the source cluster's manager: it serves the
// kubelet API of every virtual node the manager holds, so that `kubectl
// logs`, `exec`, `attach` and `port-forward` on a proxy pod reach its
// delegate in the elected target.
//
// # One port per node
//
// Each virtual node gets a TLS listener of its own (Serve), whose port the
// node advertises in status.daemonEndpoints: a request names its node by
// the port it arrives on, also for paths such as /pods that name none. The
// node's InternalIP is the serving manager's address, so the address
// follows the leader, which alone runs the virtual nodes.
//
// # Callers are authenticated and authorized as a kubelet does it
//
// A client certificate is verified against the operator's CA (the API
// server calls kubelets with one), a bearer token through a TokenReview;
// anyone else gets 401. The caller is then authorized by a
// SubjectAccessReview with the kubelet's mapping of a request to node
// subresources (requestAttributes): /stats → nodes/stats, /metrics →
// nodes/metrics, /logs → nodes/log, /pods → nodes/pods or nodes/proxy,
// anything else (containerLogs, exec, attach, portForward) → nodes/proxy,
// always for the node of the port; a refusal is 403.
//
// # Requests go to the delegate through the target's API
//
// A pod path is served only for a proxy whose spec.nodeName is the node of
// the port (else 404, as a kubelet answers for a pod it does not run). The
// delegate is found from the proxy's election record (target and
// chaperon, whose pod has the chaperon's name in the proxy's namespace),
// and reached through the target's API with the Source's identity there:
// pods/log for container logs, pods/exec and pods/attach (WebSocket, with
// SPDY as fallback) and pods/portforward (SPDY). An error from the target
// is answered with its message.
//
// # Usage comes from the target's metrics.k8s.io
//
// /metrics/resource and /stats/summary report the proxies bound to the
// node with their delegates' usage, read from the target's PodMetrics with
// the Source's identity there (pods.metrics.k8s.io get and list, in the
// admitted namespaces; never nodes/proxy, never the target's nodes). The
// CPU rates of the samples are integrated into the cumulative seconds a
// kubelet reports, per proxy container, so that a count never goes back
// (not across a replaced delegate either); the node's figures are the sums
// of its proxies'. A proxy whose target cannot be read, or whose delegate
// has no sample newer than two minutes, is left out, and scrape_error is 1
// while a target could not be read (usage.go).
package kubeletapi
