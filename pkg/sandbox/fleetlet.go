package sandbox

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"time"

	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fleetlet/fleetlet/config"
	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
	"github.com/fleetlet/fleetlet/pkg/connect"
	"github.com/fleetlet/fleetlet/pkg/proxy"
)

// fleetlet in the sandbox.
const (
	binFleetlet = "fleetlet"
	// binSandbox is this program: fake nodes' forwarded ports run it.
	binSandbox = "fleetlet-sandbox"
	// ComponentManager is the process name of a cluster's fleetlet manager.
	ComponentManager = "fleetlet-manager"
	// FleetletNamespace is where fleetlet runs in every sandbox cluster.
	FleetletNamespace = "fleetlet-system"
	// SourceCluster is the cluster users create proxy pods in; every cluster,
	// itself included, is its target.
	SourceCluster = "cluster-1"
)

// fleetletComponent runs `fleetlet manager` as a local process with a token
// of the chart's manager ServiceAccount (issueCredentials). It serves the
// proxy-pod webhook.
var fleetletComponent = component{
	name:   ComponentManager,
	binary: binFleetlet,
	args: func(o Options, c *ClusterState) []string {
		args := append(managerArgs(c, c.Ports.FleetletMetrics, c.Ports.FleetletHealth),
			// No Service in front of a local process: the manager writes
			// the MutatingWebhookConfiguration with a loopback URL.
			"--webhook-url-mode",
			"--webhook-host=127.0.0.1",
			"--webhook-port="+strconv.Itoa(c.Ports.FleetletWebhook),
		)
		return append(args, o.ManagerArgs...)
	},
	ready: func(ctx context.Context, c *ClusterState) error {
		return managerReady(ctx, c.Ports.FleetletHealth)
	},
	memoryLimit: chartManagerMemoryLimit,
}

// ComponentManagerStandby is a second replica of a cluster's manager,
// started only on demand (StartComponent): it waits for the leader
// election Lease, and leads when the first replica stops renewing it. It
// serves no webhook (in URL mode each replica would write the webhook
// configuration with its own URL and CA).
const ComponentManagerStandby = "fleetlet-manager-standby"

var standbyComponent = component{
	name:   ComponentManagerStandby,
	binary: binFleetlet,
	args: func(o Options, c *ClusterState) []string {
		args := append(managerArgs(c, c.Ports.StandbyMetrics, c.Ports.StandbyHealth),
			"--webhook-enabled=false")
		return append(args, o.ManagerArgs...)
	},
	ready: func(ctx context.Context, c *ClusterState) error {
		return managerReady(ctx, c.Ports.StandbyHealth)
	},
	memoryLimit: chartManagerMemoryLimit,
}

// managerArgs are the arguments every manager replica of a cluster runs
// with, on its own ports; both replicas share the manager's kubeconfig.
func managerArgs(c *ClusterState, metrics, health int) []string {
	return []string{
		"manager",
		"--kubeconfig=" + c.componentKubeconfig(ComponentManager),
		"--cluster-name=" + c.Name,
		"--namespace=" + FleetletNamespace,
		"--metrics-bind-address=127.0.0.1:" + strconv.Itoa(metrics),
		"--health-probe-bind-address=127.0.0.1:" + strconv.Itoa(health),
		// Each virtual node's kubelet API takes a free port; the
		// apiserver calls it with a client certificate of the cluster's
		// CA.
		"--kubelet-ports=0",
		"--kubelet-client-ca-file=" + c.pki("ca.crt"),
		"--node-address=127.0.0.1",
		// Outages show within seconds in the sandbox.
		"--target-probe-interval=3s",
		"--target-probe-timeout=2s",
		"--source-heartbeat-duration=15s",
		// A target keeps a deleted delegate of an unreachable source
		// alive after 10 s (1 minute by default).
		"--delegate-recreate-delay=10s",
	}
}

func managerReady(ctx context.Context, healthPort int) error {
	return httpGetOK(ctx, http.DefaultClient, fmt.Sprintf("http://127.0.0.1:%d/readyz", healthPort), "ok")
}

// ComponentScheduler is the process name of a cluster's candidate scheduler.
const ComponentScheduler = "fleetlet-scheduler"

// schedulerComponent runs `fleetlet scheduler`, the candidate scheduler,
// serving on loopback with the sandbox's certificate, with a token of the
// chart's scheduler ServiceAccount, for delegated authentication and
// authorization of its secure port too.
var schedulerComponent = component{
	name:   ComponentScheduler,
	binary: binFleetlet,
	args: func(o Options, c *ClusterState) []string {
		return append([]string{
			"scheduler",
			"--kubeconfig=" + c.componentKubeconfig(ComponentScheduler),
			"--authentication-kubeconfig=" + c.componentKubeconfig(ComponentScheduler),
			"--authorization-kubeconfig=" + c.componentKubeconfig(ComponentScheduler),
			"--namespace=" + FleetletNamespace,
			"--bind-address=127.0.0.1",
			"--secure-port=" + strconv.Itoa(c.Ports.FleetletScheduler),
			"--tls-cert-file=" + c.pki("scheduler-serving.crt"),
			"--tls-private-key-file=" + c.pki("scheduler-serving.key"),
			// The same client limits as the cluster's kube-scheduler
			// (schedulerConfig): both paths of a benchmark alike.
			"--kube-api-qps=200",
			"--kube-api-burst=400",
		}, o.SchedulerArgs...)
	},
	ready: func(ctx context.Context, c *ClusterState) error {
		return httpsHealthy(ctx, c, c.Ports.FleetletScheduler)
	},
	memoryLimit: chartSchedulerMemoryLimit,
}

// installFleetlet installs fleetlet's chart in a cluster (helm upgrade
// --install, local-process mode) and waits until its CRDs are established.
func (s *Sandbox) installFleetlet(ctx context.Context, c *ClusterState) error {
	if err := s.installChart(ctx, c); err != nil {
		return err
	}
	cfg, err := s.RESTConfig(c.Name)
	if err != nil {
		return err
	}
	ext, err := apiextensionsclient.NewForConfig(cfg)
	if err != nil {
		return err
	}
	crds, err := config.CRDs()
	if err != nil {
		return err
	}
	for _, crd := range crds {
		if err := s.waitFor(ctx, c, "CRD "+crd.Name+" to be established", nil, func(ctx context.Context) error {
			return crdEstablished(ctx, ext, crd.Name)
		}); err != nil {
			return err
		}
	}
	return nil
}

// fleetletTimeout bounds how long connecting the clusters may take.
const fleetletTimeout = 2 * time.Minute

// connectClusters makes every cluster a target of SourceCluster, itself
// included (self), as a user would with `kubectl fleetlet connect`, and waits
// until every virtual node is Ready.
func (s *Sandbox) connectClusters(ctx context.Context) error {
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, fleetletTimeout)
	defer cancel()
	names := s.ClusterNames()
	fmt.Fprintf(s.opts.Out, "Connecting %s to its targets %v and waiting for their virtual nodes to be Ready\n", SourceCluster, names)
	for _, name := range names {
		if err := s.connectOne(ctx, name); err != nil {
			return err
		}
	}
	fmt.Fprintf(s.opts.Out, "%s connected to %v in %s\n", SourceCluster, names, time.Since(start).Round(100*time.Millisecond))
	return nil
}

// Connect makes a cluster a target of SourceCluster again, as `kubectl
// fleetlet connect` does, and waits until its virtual node is Ready.
func (s *Sandbox) Connect(ctx context.Context, name string) error {
	ctx, cancel := context.WithTimeout(ctx, fleetletTimeout)
	defer cancel()
	return s.connectOne(ctx, name)
}

// Disconnect undoes Connect as `kubectl fleetlet disconnect` does: the
// ClusterTarget goes once fleetlet has drained it.
func (s *Sandbox) Disconnect(ctx context.Context, name string, timeout time.Duration) error {
	opts, err := s.connectOptions(name)
	if err != nil {
		return err
	}
	opts.Timeout = timeout
	if _, err := connect.Disconnect(ctx, opts); err != nil {
		return fmt.Errorf("disconnecting %s from %s: %w", name, SourceCluster, err)
	}
	return nil
}

// connectOptions are the options `kubectl fleetlet connect` gets for one
// cluster of the sandbox.
func (s *Sandbox) connectOptions(name string) (connect.Options, error) {
	src, err := s.RESTConfig(SourceCluster)
	if err != nil {
		return connect.Options{}, err
	}
	opts := connect.Options{
		Source:            src,
		SourceName:        SourceCluster,
		TargetName:        name,
		FleetletNamespace: FleetletNamespace,
		SourceContext:     SourceCluster,
		TargetContext:     name,
		Timeout:           time.Minute,
	}
	if name == SourceCluster {
		opts.Self = true
	} else if opts.Target, err = s.RESTConfig(name); err != nil {
		return connect.Options{}, err
	}
	return opts, nil
}

// connectOne connects one cluster and waits until its virtual node is
// Ready.
func (s *Sandbox) connectOne(ctx context.Context, name string) error {
	opts, err := s.connectOptions(name)
	if err != nil {
		return err
	}
	if _, err := connect.Connect(ctx, opts); err != nil {
		return fmt.Errorf("connecting %s to %s: %w", SourceCluster, name, err)
	}
	cs, err := s.Client(SourceCluster)
	if err != nil {
		return err
	}
	source, err := s.state.Cluster(SourceCluster)
	if err != nil {
		return err
	}
	node := proxy.NodeName(proxy.TargetKey{Name: name})
	if err := s.waitFor(ctx, source, "virtual node "+node+" to be Ready", nil, func(ctx context.Context) error {
		n, err := cs.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if !NodeIsReady(n) {
			return fmt.Errorf("node %s is not Ready: %v", node, n.Status.Conditions)
		}
		return nil
	}); err != nil {
		return err
	}
	return s.waitSchedulerRunning(ctx, source, name)
}

// waitSchedulerRunning waits until the ClusterTarget name does not say its
// candidate scheduler is down: one started a moment ago may not hold its
// Lease yet, and until the target's manager sees it does, the target takes
// no candidate.
func (s *Sandbox) waitSchedulerRunning(ctx context.Context, source *ClusterState, name string) error {
	cfg, err := s.RESTConfig(SourceCluster)
	if err != nil {
		return err
	}
	c, err := client.New(cfg, client.Options{Scheme: connect.Scheme()})
	if err != nil {
		return err
	}
	return s.waitFor(ctx, source, "ClusterTarget "+name+" to see its candidate scheduler run", nil, func(ctx context.Context) error {
		var ct v1alpha1.ClusterTarget
		if err := c.Get(ctx, client.ObjectKey{Name: name}, &ct); err != nil {
			return err
		}
		if cond := meta.FindStatusCondition(ct.Status.Conditions, v1alpha1.ConditionCandidateScheduler); cond != nil && cond.Status == metav1.ConditionFalse {
			return fmt.Errorf("%s %s: %s", cond.Type, cond.Reason, cond.Message)
		}
		return nil
	})
}
