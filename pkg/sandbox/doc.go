// Package sandbox runs several real Kubernetes clusters as local processes,
// with no container engine: the embedded default that developers, the e2e
// suite and the benchmarks use.
//
// Each cluster is etcd, kube-apiserver, kube-controller-manager (every
// default controller but node IPAM), kube-scheduler and kwok, all built from
// Go modules and listening on 127.0.0.1 at ports chosen when the sandbox
// comes up. kwok plays the kubelets of a few fake nodes, so that pods are
// scheduled for real, go Running and Ready, and (restartPolicy Never or
// OnFailure) succeed after a while, so Jobs complete.
//
// fleetlet is installed in every cluster with its packaged Helm chart
// (BinDir's fleetlet-VERSION.tgz from `make chart`, the release artefact;
// PackagedChart), with BinDir's helm, in
// local-process mode: the chart makes the CRDs, ServiceAccounts, RBAC,
// webhook configuration (a loopback URL), PriorityClass and admission
// policies, and `fleetlet manager` and `fleetlet scheduler` run as local
// processes with TokenRequest tokens of the chart's ServiceAccounts
// (TokenExpiration, issued again on every start), never as an
// administrator, so that a right missing from the chart fails the e2e
// suite. Every cluster's manager may impersonate SourceCluster's
// ClusterSource ServiceAccount (chart value manager.rbac.impersonate).
// Uninstall does what `helm uninstall` and the chart's post-delete hook
// would, `fleetlet cleanup` included, as local processes.
//
// Everything a sandbox writes lives in one folder:
//
//	DIR/sandbox.json           clusters, ports, settings and every PID (State)
//	DIR/kubeconfig             one context per cluster
//	DIR/cluster-<i>.kubeconfig the administrator's kubeconfig of cluster i
//	DIR/cluster-<i>/           certificates, component configuration, etcd
//	                           data, the chart values, the fleetlet processes'
//	                           ServiceAccount kubeconfigs
//	DIR/helm/                  helm's own folders
//	DIR/logs/cluster-<i>/      one log per component
//
// Processes are recorded with their start time as well as their PID, so that
// Down, Stop and a later command never signal a process that merely reuses a
// PID. Stop takes one cluster's control plane down with its data kept, and
// Start brings it back on the same ports, which is how tests simulate a
// cluster outage. A lock on the folder keeps two commands from changing one
// sandbox at once.
package sandbox
