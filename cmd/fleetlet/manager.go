package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"regexp"
	"strings"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
	"github.com/fleetlet/fleetlet/pkg/crashpoint"
	"github.com/fleetlet/fleetlet/pkg/indexer"
	"github.com/fleetlet/fleetlet/pkg/proxy"
	"github.com/fleetlet/fleetlet/pkg/source/claims"
	"github.com/fleetlet/fleetlet/pkg/source/elector"
	"github.com/fleetlet/fleetlet/pkg/source/feedback"
	"github.com/fleetlet/fleetlet/pkg/source/fleet"
	"github.com/fleetlet/fleetlet/pkg/source/follow"
	"github.com/fleetlet/fleetlet/pkg/source/gc"
	"github.com/fleetlet/fleetlet/pkg/source/services"
	"github.com/fleetlet/fleetlet/pkg/source/vnode"
	"github.com/fleetlet/fleetlet/pkg/source/webhook"
	"github.com/fleetlet/fleetlet/pkg/target/candidate"
	"github.com/fleetlet/fleetlet/pkg/target/chaperon"
	"github.com/fleetlet/fleetlet/pkg/version"
)

// managerOptions are the flags of `fleetlet manager`. Every timeout is one.
type managerOptions struct {
	kubeconfig  string
	clusterName string
	namespace   string

	leaderElect                 bool
	leaderElectionID            string
	leaderElectionNamespace     string
	leaderElectionLeaseDuration time.Duration
	leaderElectionRenewDeadline time.Duration
	leaderElectionRetryPeriod   time.Duration

	metricsAddr string
	probeAddr   string
	pprofAddr   string

	targetProbeInterval time.Duration
	targetProbeTimeout  time.Duration
	targetProbeBackoff  time.Duration
	targetProbeFailures int
	heartbeatDuration   time.Duration
	summaryStaleAfter   time.Duration
	schedulerLease      string
	allowedTargetHosts  []string
	secretNamespaces    []string

	nodeLeaseDuration  time.Duration
	nodeStatusInterval time.Duration
	kubeletAPI         kubeletAPIOptions
	nodeAddress        string

	gracefulShutdown time.Duration

	electionDeadline     time.Duration
	bindTimeout          time.Duration
	unboundTimeout       time.Duration
	electedTargetTimeout time.Duration
	pendingTargets       int
	candidateTargets     int
	electionsInFlight    int
	electionRetry        time.Duration
	groupTimeout         time.Duration
	electionResync       time.Duration
	electorWorkers       int
	crashPoint           string
	gcInterval           time.Duration
	gcMinAge             time.Duration

	kubeAPIQPS     float32
	kubeAPIBurst   int
	targetAPIQPS   float32
	targetAPIBurst int

	delegateRecreateDelay time.Duration

	// followAllowedKinds are the namespaced kinds a pod may ask to take
	// along (multicluster.fleetlet.io/follow), besides what it references.
	followAllowedKinds []string
	// followServices copies the Services that select proxies to the
	// targets where their delegates run; serviceLoadBalancers keeps a
	// LoadBalancer one a LoadBalancer there.
	followServices       bool
	serviceLoadBalancers bool
	// serviceNodePorts keeps a followed NodePort Service a NodePort in
	// the targets.
	serviceNodePorts bool
	// routablePodNetworks: pod IPs are routable between the clusters, so
	// global Services may list delegates of other clusters.
	routablePodNetworks bool
	// hidePodIPs are the targets whose delegates' pod IPs are not
	// published on proxies ("*": every target but self targets).
	hidePodIPs []string

	webhook webhookOptions
}

func defaultManagerOptions() managerOptions {
	ns := os.Getenv("POD_NAMESPACE")
	if ns == "" {
		ns = "fleetlet-system"
	}
	addr := os.Getenv("POD_IP")
	if addr == "" {
		addr = "127.0.0.1"
	}
	return managerOptions{
		namespace:                   ns,
		leaderElect:                 true,
		leaderElectionID:            "fleetlet-manager",
		leaderElectionLeaseDuration: 15 * time.Second,
		leaderElectionRenewDeadline: 10 * time.Second,
		leaderElectionRetryPeriod:   2 * time.Second,
		metricsAddr:                 ":8080",
		probeAddr:                   ":8081",
		targetProbeInterval:         fleet.DefaultProbeInterval,
		targetProbeTimeout:          fleet.DefaultProbeTimeout,
		targetProbeBackoff:          fleet.DefaultProbeBackoffInitial,
		targetProbeFailures:         fleet.DefaultProbeFailureThreshold,
		heartbeatDuration:           fleet.DefaultHeartbeatDuration,
		summaryStaleAfter:           fleet.DefaultSummaryStaleAfter,
		schedulerLease:              candidate.DefaultLeaseName,
		nodeLeaseDuration:           vnode.DefaultLeaseDuration,
		nodeStatusInterval:          vnode.DefaultStatusInterval,
		kubeletAPI:                  defaultKubeletAPIOptions(),
		nodeAddress:                 addr,
		gracefulShutdown:            30 * time.Second,
		electionDeadline:            elector.DefaultElectionDeadline,
		bindTimeout:                 elector.DefaultBindTimeout,
		unboundTimeout:              elector.DefaultUnboundTimeout,
		electedTargetTimeout:        elector.DefaultElectedTargetTimeout,
		pendingTargets:              elector.DefaultPendingTargets,
		electionRetry:               elector.DefaultRetryInterval,
		groupTimeout:                elector.DefaultGroupTimeout,
		electionResync:              elector.DefaultResyncInterval,
		electorWorkers:              elector.DefaultWorkers,
		electionsInFlight:           elector.DefaultElectionsInFlight,
		gcInterval:                  gc.DefaultInterval,
		gcMinAge:                    gc.DefaultMinAge,
		kubeAPIQPS:                  200,
		kubeAPIBurst:                400,
		targetAPIQPS:                fleet.DefaultQPS,
		targetAPIBurst:              fleet.DefaultBurst,
		delegateRecreateDelay:       chaperon.DefaultRecreateDelay,
		followAllowedKinds:          []string{"ConfigMap", "Secret", "ServiceAccount"},
		followServices:              true,
		webhook:                     defaultWebhookOptions(),
	}
}

func newManagerCommand() *cobra.Command {
	o := defaultManagerOptions()
	cmd := &cobra.Command{
		Use:   "manager",
		Short: "Run fleetlet's controllers: target registry and virtual nodes (source side), cluster summary and sources (target side)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runManager(runContext(cmd), o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig of the cluster fleetlet runs in (default: in-cluster, else $KUBECONFIG)")
	f.StringVar(&o.clusterName, "cluster-name", "", "this cluster's name as its targets know it: the name of its Source there and the parent-cluster label on what it creates (required)")
	f.StringVar(&o.namespace, "namespace", o.namespace, "namespace fleetlet runs in (default $POD_NAMESPACE, else fleetlet-system)")
	f.BoolVar(&o.leaderElect, "leader-elect", o.leaderElect, "elect a leader among replicas; only the leader runs controllers")
	f.StringVar(&o.leaderElectionID, "leader-election-id", o.leaderElectionID, "name of the leader election Lease")
	f.StringVar(&o.leaderElectionNamespace, "leader-election-namespace", "", "namespace of the leader election Lease (default --namespace)")
	f.DurationVar(&o.leaderElectionLeaseDuration, "leader-election-lease-duration", o.leaderElectionLeaseDuration, "how long non-leaders wait before taking over a lease that is not renewed")
	f.DurationVar(&o.leaderElectionRenewDeadline, "leader-election-renew-deadline", o.leaderElectionRenewDeadline, "how long the leader retries renewing before it gives up leadership")
	f.DurationVar(&o.leaderElectionRetryPeriod, "leader-election-retry-period", o.leaderElectionRetryPeriod, "how often leader election is tried")
	f.StringVar(&o.metricsAddr, "metrics-bind-address", o.metricsAddr, "address of the Prometheus metrics endpoint; 0 disables it")
	f.StringVar(&o.probeAddr, "health-probe-bind-address", o.probeAddr, "address of the /healthz and /readyz endpoints; 0 disables them")
	f.StringVar(&o.pprofAddr, "pprof-bind-address", "", "address of Go's /debug/pprof endpoints (heap and CPU profiles, for diagnosis); empty or 0 disables them")
	f.DurationVar(&o.targetProbeInterval, "target-probe-interval", o.targetProbeInterval, "how often a healthy target is probed (and the source's heartbeat Lease there renewed)")
	f.DurationVar(&o.targetProbeTimeout, "target-probe-timeout", o.targetProbeTimeout, "how long one probe of a target may take")
	f.DurationVar(&o.targetProbeBackoff, "target-probe-backoff", o.targetProbeBackoff, "first retry delay after a failed probe; it doubles up to --target-probe-interval")
	f.IntVar(&o.targetProbeFailures, "target-probe-failure-threshold", o.targetProbeFailures, "how many probes in a row must fail before a Ready target is called NotReady")
	f.DurationVar(&o.heartbeatDuration, "source-heartbeat-duration", o.heartbeatDuration, "duration of the heartbeat Lease this source renews in each target")
	f.StringSliceVar(&o.allowedTargetHosts, "allowed-target-hosts", nil, "the API servers a Target's kubeconfig may name: host names, *.suffix, IP addresses, CIDRs (comma-separated); empty allows any https host")
	f.StringSliceVar(&o.secretNamespaces, "secret-namespaces", nil, "the only namespaces whose Secrets the manager reads and watches (comma-separated; its own --namespace is always one): those of Targets' kubeconfig Secrets and of the enabled namespaces whose proxies reference Secrets; empty: every namespace")
	f.DurationVar(&o.summaryStaleAfter, "target-summary-stale-after", o.summaryStaleAfter, "how long a target's ClusterSummary may go unrenewed (its fleetlet down) before the target gets SummaryStale and no new election")
	f.StringVar(&o.schedulerLease, "candidate-scheduler-lease", o.schedulerLease, "name of the candidate scheduler's leader election Lease in --namespace, read to tell sources whether it runs (no new candidate goes to a cluster whose scheduler does not); empty when it runs without leader election")
	f.DurationVar(&o.nodeLeaseDuration, "node-lease-duration", o.nodeLeaseDuration, "duration of the virtual nodes' Leases in kube-node-lease")
	f.DurationVar(&o.nodeStatusInterval, "node-status-interval", o.nodeStatusInterval, "how often the virtual nodes' status is refreshed when nothing changed")
	addKubeletAPIFlags(f, &o.kubeletAPI)
	f.StringVar(&o.nodeAddress, "node-address", o.nodeAddress, "InternalIP the virtual nodes advertise (default $POD_IP, else 127.0.0.1)")
	f.DurationVar(&o.gracefulShutdown, "graceful-shutdown-timeout", o.gracefulShutdown, "how long runnables get to stop")
	f.DurationVar(&o.electionDeadline, "election-deadline", o.electionDeadline, "how long an election waits for the other candidates after the first reservation")
	f.DurationVar(&o.bindTimeout, "election-bind-timeout", o.bindTimeout, "how long an elected candidate may take to be bound in its target before it is deleted and the election rerun")
	f.DurationVar(&o.unboundTimeout, "unbound-proxy-timeout", o.unboundTimeout, "how long a pinned, ungated proxy may stay unbound before it is deleted")
	f.StringVar(&o.crashPoint, "crash-point", "", "fault injection, for tests only: crash (SIGKILL) at this named point of a proxy's life ("+strings.Join(crashpoint.Points, ", ")+"; <point>:<n> at its n-th pass); also $"+crashpoint.EnvVar)
	f.DurationVar(&o.electedTargetTimeout, "elected-target-timeout", o.electedTargetTimeout, "how long the elected target of a proxy not yet bound may stay NotReady before the election is rerun (a pinned proxy is deleted instead)")
	f.Float32Var(&o.kubeAPIQPS, "kube-api-qps", o.kubeAPIQPS, "requests per second to this cluster's API server (client-side limit)")
	f.IntVar(&o.kubeAPIBurst, "kube-api-burst", o.kubeAPIBurst, "burst above --kube-api-qps")
	f.Float32Var(&o.targetAPIQPS, "target-api-qps", o.targetAPIQPS, "requests per second to each target's API server (client-side limit): every candidate costs a few")
	f.IntVar(&o.targetAPIBurst, "target-api-burst", o.targetAPIBurst, "burst above --target-api-qps")
	f.DurationVar(&o.gcInterval, "gc-interval", o.gcInterval, "how often chaperons, delegates and copies whose proxy is gone are collected in every target")
	f.DurationVar(&o.gcMinAge, "gc-min-age", o.gcMinAge, "how old a chaperon or copy in a target must be before the collector may delete it: raise it where the source's watches lag")
	f.DurationVar(&o.groupTimeout, "group-timeout", o.groupTimeout, "how long the members of a group (label "+v1alpha1.LabelGroup+") hold reservations while too few of them are reserved in one target; then they give them up and try again after --election-retry-interval")
	f.DurationVar(&o.electionRetry, "election-retry-interval", o.electionRetry, "how often an election that no cluster can take now is run again (target changes bring it back sooner)")
	f.DurationVar(&o.electionResync, "election-resync-interval", o.electionResync, "how long an election waits for its candidates' answers before it looks again (their events usually bring it back sooner)")
	f.IntVar(&o.electorWorkers, "elector-workers", o.electorWorkers, "how many proxies are reconciled at once")
	f.IntVar(&o.pendingTargets, "pending-targets", o.pendingTargets, "how many targets keep a pending candidate of a pod no cluster can run now")
	f.IntVar(&o.electionsInFlight, "elections-in-flight", o.electionsInFlight, "how many proxies may have an election in flight in each target at once; the others wait their turn, oldest first (0: no bound)")
	f.IntVar(&o.candidateTargets, "candidate-targets", o.candidateTargets, "how many of the best-ranked eligible targets get a candidate first, the others only once all of those said no (0: every eligible target at once)")
	f.DurationVar(&o.delegateRecreateDelay, "delegate-recreate-delay", o.delegateRecreateDelay, "target side: how long a deleted delegate (restartPolicy Always) stays gone, once its source's heartbeat Lease has expired, before it is created again; counted from the later of the deletion and the expiry")
	f.StringSliceVar(&o.followAllowedKinds, "follow-allowed-kinds", o.followAllowedKinds, "namespaced kinds a pod may ask to take along to its targets with "+v1alpha1.Prefix+"follow (Kind names, comma-separated)")
	f.BoolVar(&o.followServices, "follow-services", o.followServices, "copy the Services that select proxies into the targets where their delegates run, so that delegates resolve them there")
	f.BoolVar(&o.serviceNodePorts, "service-node-ports", o.serviceNodePorts, "keep a followed NodePort Service a NodePort in the targets (each target then opens the port on every node); false: its copies are ClusterIP Services, so that no user of this cluster opens ports on a target's nodes")
	f.BoolVar(&o.serviceLoadBalancers, "service-load-balancers", o.serviceLoadBalancers, "keep a followed LoadBalancer Service a LoadBalancer in the targets (each target then provisions its own load balancer); false: its copies are ClusterIP Services")
	f.BoolVar(&o.routablePodNetworks, "routable-pod-networks", o.routablePodNetworks, "pod IPs are routable between this cluster's targets (a flat or routed pod network): Services annotated "+v1alpha1.AnnotationGlobal+"=true then get, in each target holding their copy, an EndpointSlice of their ready delegates in the other clusters; false: the annotation is refused with an Event")
	f.StringSliceVar(&o.hidePodIPs, "hide-pod-ips", o.hidePodIPs, "targets (ClusterTarget names, namespace/name of Targets, or * for all) whose pod network overlaps this cluster's: their delegates' pod IPs are not published on proxies, so that nothing here routes to an address that is another pod's (self targets always publish theirs)")
	addWebhookFlags(f, &o.webhook)

	fs := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(fs)
	f.AddGoFlagSet(fs)
	return cmd
}

func (o *managerOptions) validate() error {
	var errs []error
	if o.clusterName == "" {
		errs = append(errs, errors.New("--cluster-name is required"))
	}
	if o.namespace == "" {
		errs = append(errs, errors.New("--namespace must not be empty"))
	}
	if o.leaderElectionRenewDeadline >= o.leaderElectionLeaseDuration {
		errs = append(errs, fmt.Errorf("--leader-election-renew-deadline (%s) must be shorter than --leader-election-lease-duration (%s)", o.leaderElectionRenewDeadline, o.leaderElectionLeaseDuration))
	}
	if o.delegateRecreateDelay <= 0 {
		errs = append(errs, fmt.Errorf("--delegate-recreate-delay must be positive, got %s", o.delegateRecreateDelay))
	}
	if o.targetProbeFailures < 1 {
		errs = append(errs, fmt.Errorf("--target-probe-failure-threshold must be at least 1, got %d", o.targetProbeFailures))
	}
	if _, err := fleet.ParseHostAllowList(o.allowedTargetHosts); err != nil {
		errs = append(errs, fmt.Errorf("--allowed-target-hosts: %w", err))
	}
	for _, ns := range o.secretNamespaces {
		if msgs := validation.IsDNS1123Label(ns); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("--secret-namespaces: %q is not a namespace name: %s", ns, strings.Join(msgs, "; ")))
		}
	}
	if o.electorWorkers < 1 {
		errs = append(errs, fmt.Errorf("--elector-workers must be at least 1, got %d", o.electorWorkers))
	}
	if o.pendingTargets < 1 {
		errs = append(errs, fmt.Errorf("--pending-targets must be at least 1, got %d", o.pendingTargets))
	}
	if o.electionsInFlight < 0 {
		errs = append(errs, fmt.Errorf("--elections-in-flight must be 0 (no bound) or more, got %d", o.electionsInFlight))
	}
	if o.candidateTargets < 0 {
		errs = append(errs, fmt.Errorf("--candidate-targets must be 0 (every eligible target) or more, got %d", o.candidateTargets))
	}
	if err := validateKinds(o.followAllowedKinds); err != nil {
		errs = append(errs, fmt.Errorf("--follow-allowed-kinds: %w", err))
	}
	if err := o.webhook.validate(); err != nil {
		errs = append(errs, err)
	}
	if err := o.kubeletAPI.validate(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// kindName is what a Kind is spelled like: an upper-case letter, then
// letters and digits (ConfigMap, PersistentVolumeClaim).
var kindName = regexp.MustCompile(`^[A-Z][A-Za-z0-9]*$`)

// validateKinds checks a list of Kind names: each well-formed, none twice.
func validateKinds(kinds []string) error {
	var errs []error
	seen := make(map[string]bool, len(kinds))
	for _, k := range kinds {
		switch {
		case !kindName.MatchString(k):
			errs = append(errs, fmt.Errorf("%q is not a Kind name (such as ConfigMap)", k))
		case seen[k]:
			errs = append(errs, fmt.Errorf("%s is given twice", k))
		}
		seen[k] = true
	}
	return errors.Join(errs...)
}

// newScheme registers every type the manager reads or writes.
func newScheme() *runtime.Scheme {
	s := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(s))
	utilruntime.Must(v1alpha1.AddToScheme(s))
	return s
}

func restConfig(kubeconfig string) (*rest.Config, error) {
	if kubeconfig != "" {
		return clientcmd.BuildConfigFromFlags("", kubeconfig)
	}
	return ctrl.GetConfig()
}

func runManager(ctx context.Context, o managerOptions) error {
	if err := crashpoint.Set(o.crashPoint); err != nil {
		return err
	}
	if err := o.validate(); err != nil {
		return err
	}
	ctrl.SetLogger(klog.NewKlogr()) // honours -v and -vmodule
	log := ctrl.Log.WithName("setup")
	log.Info("fleetlet manager", version.Get().KeysAndValues()...)

	cfg, err := restConfig(o.kubeconfig)
	if err != nil {
		return fmt.Errorf("loading the cluster configuration: %w", err)
	}
	cfg.QPS, cfg.Burst = o.kubeAPIQPS, o.kubeAPIBurst
	cfg.UserAgent = "fleetlet-manager"

	leNamespace := o.leaderElectionNamespace
	if leNamespace == "" {
		leNamespace = o.namespace
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                        newScheme(),
		Metrics:                       metricsserver.Options{BindAddress: o.metricsAddr},
		HealthProbeBindAddress:        o.probeAddr,
		PprofBindAddress:              o.pprofAddr,
		LeaderElection:                o.leaderElect,
		LeaderElectionID:              o.leaderElectionID,
		LeaderElectionNamespace:       leNamespace,
		LeaderElectionReleaseOnCancel: true,
		LeaseDuration:                 &o.leaderElectionLeaseDuration,
		RenewDeadline:                 &o.leaderElectionRenewDeadline,
		RetryPeriod:                   &o.leaderElectionRetryPeriod,
		GracefulShutdownTimeout:       &o.gracefulShutdown,
		Client: client.Options{Cache: &client.CacheOptions{
			// Secrets are read when needed, never cached with their data.
			DisableFor: []client.Object{&corev1.Secret{}},
		}},
		Cache: o.cacheOptions(),
	})
	if err != nil {
		return fmt.Errorf("creating the manager: %w", err)
	}
	// Every field index, once, before any component reads by one.
	if err := indexer.Register(ctx, mgr.GetFieldIndexer(), indexer.All...); err != nil {
		return err
	}
	if err := setupProbes(mgr); err != nil {
		return err
	}
	keys, err := sealKeys(ctx, mgr, o.webhook, o.namespace)
	if err != nil {
		return err
	}
	if err := setupWebhook(ctx, mgr, o.webhook, o.namespace, keys); err != nil {
		return err
	}
	if err := setupSourceSide(ctx, mgr, o, keys); err != nil {
		return err
	}
	if err := setupTargetSide(ctx, mgr, o); err != nil {
		return err
	}
	log.Info("Starting the manager", "cluster", o.clusterName, "namespace", o.namespace, "leaderElection", o.leaderElect)
	return mgr.Start(ctx)
}

func setupProbes(mgr ctrl.Manager) error {
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return fmt.Errorf("adding the health check: %w", err)
	}
	if err := mgr.AddReadyzCheck("ping", healthz.Ping); err != nil {
		return fmt.Errorf("adding the ready check: %w", err)
	}
	return nil
}

// setupSourceSide wires the target registry, the virtual nodes and the
// proxy reconciler (elector).
func setupSourceSide(ctx context.Context, mgr ctrl.Manager, o managerOptions, sealKeys webhook.KeySource) error {
	targets := &registryTargets{}
	nodes, err := setupVirtualNodes(ctx, mgr, o, targets)
	if err != nil {
		return err
	}
	openSpec := specOpener(sealKeys)
	follower, err := newFollower(mgr, o)
	if err != nil {
		return err
	}
	// The feedback controller mirrors delegates' Events: it is made once
	// the registry it reads exists.
	var fb *feedback.Reconciler
	reg, err := newTargetRegistry(o, nodes, func(k proxy.TargetKey, e *corev1.Event) { fb.OnDelegateEvent(k, e) })
	if err != nil {
		return err
	}
	targets.reg = reg
	if err := reg.SetupWithManager(ctx, mgr); err != nil {
		return fmt.Errorf("setting up the target registry: %w", err)
	}
	if err := setupElector(ctx, mgr, o, openSpec, follower, reg); err != nil {
		return err
	}
	fb = feedback.New(reg)
	fb.HidePodIPs = hidden(o.hidePodIPs)
	if err := fb.SetupWithManager(mgr); err != nil {
		return fmt.Errorf("setting up the feedback controller: %w", err)
	}
	return setupFollowing(ctx, mgr, o, openSpec, follower, reg)
}

// setupVirtualNodes starts the virtual nodes' controller and their kubelet
// API, which reaches the targets through targets (filled in once the
// registry exists).
func setupVirtualNodes(ctx context.Context, mgr ctrl.Manager, o managerOptions, targets *registryTargets) (*vnode.Controller, error) {
	cs, err := kubernetes.NewForConfig(mgr.GetConfig())
	if err != nil {
		return nil, err
	}
	kubelet, err := newKubeletAPI(ctx, mgr, cs, o.kubeletAPI, o.nodeAddress, targets)
	if err != nil {
		return nil, fmt.Errorf("creating the virtual nodes' kubelet API: %w", err)
	}
	nodes, err := vnode.NewController(vnode.Config{
		Client:         cs,
		LeaseDuration:  o.nodeLeaseDuration,
		StatusInterval: o.nodeStatusInterval,
		Kubelet:        kubelet,
		NodeAddress:    o.nodeAddress,
	})
	if err != nil {
		return nil, fmt.Errorf("creating the virtual node controller: %w", err)
	}
	return nodes, mgr.Add(manager.RunnableFunc(nodes.Run))
}

// specOpener opens a proxy's sealed spec with the current seal keys: the
// pod as its user wrote it.
func specOpener(sealKeys webhook.KeySource) func(*corev1.Pod) (*corev1.PodSpec, error) {
	return func(pod *corev1.Pod) (*corev1.PodSpec, error) {
		keys, err := sealKeys.Keys()
		if err != nil {
			return nil, err
		}
		ss, err := webhook.Open(pod, keys)
		if err != nil {
			return nil, err
		}
		spec := pod.Spec.DeepCopy()
		ss.Restore(spec)
		return spec, nil
	}
}

func newFollower(mgr ctrl.Manager, o managerOptions) (*follow.Follower, error) {
	return follow.New(follow.Options{
		SourceName:   o.clusterName,
		AllowedKinds: o.followAllowedKinds,
		Source:       mgr.GetClient(),
		SourceAPI:    mgr.GetAPIReader(),
		Mapper:       mgr.GetRESTMapper(),

		ServiceLoadBalancers: o.serviceLoadBalancers,
		ServiceNodePorts:     o.serviceNodePorts,
		SecretNamespaces:     o.secretNamespacesWithOwn(),
	})
}

func newTargetRegistry(o managerOptions, nodes *vnode.Controller, onDelegateEvent func(proxy.TargetKey, *corev1.Event)) (*fleet.Registry, error) {
	allowed, err := fleet.ParseHostAllowList(o.allowedTargetHosts)
	if err != nil {
		return nil, err
	}
	return fleet.New(fleet.Options{
		AllowedHosts:          allowed,
		SecretNamespaces:      o.secretNamespacesWithOwn(),
		SourceName:            o.clusterName,
		ProbeInterval:         o.targetProbeInterval,
		ProbeTimeout:          o.targetProbeTimeout,
		ProbeBackoffInitial:   o.targetProbeBackoff,
		ProbeFailureThreshold: o.targetProbeFailures,
		HeartbeatDuration:     o.heartbeatDuration,
		SummaryStaleAfter:     o.summaryStaleAfter,
		QPS:                   o.targetAPIQPS,
		Burst:                 o.targetAPIBurst,
		OnDelegateEvent:       onDelegateEvent,
	}, nodes)
}

// electionsInFlight is the elector's bound for the flag's value (0: none).
func electionsInFlight(flag int) int {
	if flag == 0 {
		return -1
	}
	return flag
}

func setupElector(ctx context.Context, mgr ctrl.Manager, o managerOptions, openSpec func(*corev1.Pod) (*corev1.PodSpec, error), follower *follow.Follower, reg *fleet.Registry) error {
	proxies, err := elector.New(elector.Options{
		SourceName:           o.clusterName,
		Spec:                 openSpec,
		Follower:             follower,
		Registry:             reg,
		SourceAPI:            mgr.GetAPIReader(),
		ElectionDeadline:     o.electionDeadline,
		BindTimeout:          o.bindTimeout,
		UnboundTimeout:       o.unboundTimeout,
		ElectedTargetTimeout: o.electedTargetTimeout,
		PendingTargets:       o.pendingTargets,
		CandidateTargets:     o.candidateTargets,
		ElectionsInFlight:    electionsInFlight(o.electionsInFlight),
		GroupTimeout:         o.groupTimeout,
		RetryInterval:        o.electionRetry,
		ResyncInterval:       o.electionResync,
		Workers:              o.electorWorkers,
	})
	if err != nil {
		return err
	}
	if err := proxies.SetupWithManager(ctx, mgr); err != nil {
		return fmt.Errorf("setting up the proxy reconciler: %w", err)
	}
	return nil
}

// setupFollowing sets up what keeps the targets in line with the source
// besides the election: the garbage collector, the sync of followed
// objects, and the Service follower.
func setupFollowing(ctx context.Context, mgr ctrl.Manager, o managerOptions, openSpec func(*corev1.Pod) (*corev1.PodSpec, error), follower *follow.Follower, reg *fleet.Registry) error {
	collector, err := gc.New(gc.Options{SourceName: o.clusterName, Targets: gc.RegistryTargets(reg), Interval: o.gcInterval, MinAge: o.gcMinAge,
		Collectors: append(follower.Collectors(), follower.ServiceCollector(), claims.Collector{Source: mgr.GetAPIReader(), MinAge: o.gcMinAge})})
	if err != nil {
		return err
	}
	if err := collector.SetupWithManager(mgr); err != nil {
		return fmt.Errorf("setting up the garbage collector: %w", err)
	}
	if err := (&claims.MirrorReaper{Client: mgr.GetClient()}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("setting up the mirror volume reaper: %w", err)
	}
	syncer := &follow.SyncController{Follower: follower, Registry: reg, Spec: openSpec}
	if err := syncer.SetupWithManager(ctx, mgr); err != nil {
		return fmt.Errorf("setting up the follow sync: %w", err)
	}
	if o.followServices {
		svc := &services.Controller{Follower: follower, Registry: reg, RoutablePodNetworks: o.routablePodNetworks}
		if err := svc.SetupWithManager(mgr); err != nil {
			return fmt.Errorf("setting up the Service follower: %w", err)
		}
	}
	return nil
}

// hidden is the feedback controller's HidePodIPs of --hide-pod-ips: nil
// when it names no target.
func hidden(targets []string) func(proxy.TargetKey) bool {
	if len(targets) == 0 {
		return nil
	}
	set := map[string]bool{}
	for _, t := range targets {
		set[strings.TrimSpace(t)] = true
	}
	return func(k proxy.TargetKey) bool { return set["*"] || set[k.String()] }
}
