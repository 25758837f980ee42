package vnode

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"slices"
	"sync"
	"time"

	"github.com/go-logr/logr"
	vklog "github.com/virtual-kubelet/virtual-kubelet/log"
	"github.com/virtual-kubelet/virtual-kubelet/node"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
	"github.com/fleetlet/fleetlet/pkg/proxy"
)

// Defaults of Config.
const (
	// DefaultLeaseDuration is the duration of a virtual node's Lease, a
	// kubelet's default: when fleetlet stops, its nodes turn Unknown after
	// it (and the node lifecycle controller's grace period).
	DefaultLeaseDuration = 40 * time.Second
	// DefaultStatusInterval is how often a virtual node's status is
	// written when nothing changed (changes are written at once).
	DefaultStatusInterval = time.Minute
	// DefaultResourceInterval is how long a change of a virtual node's
	// allocatable that no proxy needs may wait before it is written
	// (settle.go).
	DefaultResourceInterval = 5 * time.Second
	// DefaultNodeAddress is the InternalIP virtual nodes advertise.
	DefaultNodeAddress = "127.0.0.1"
	// DefaultKubeletVersion is the kubelet version virtual nodes report.
	DefaultKubeletVersion = "fleetlet"
)

// Bounds of the delay before a node controller that stopped with an error
// (its node could not be created or read) starts again.
const (
	restartBackoffInitial = time.Second
	restartBackoffMax     = time.Minute
)

// TargetState is what the virtual node of one target shows. The target
// registry sends it whenever the target's health or summary changes.
type TargetState struct {
	// Key names the Target or ClusterTarget.
	Key proxy.TargetKey
	// Ready: the target is reachable, authorizes fleetlet's credentials and
	// runs fleetlet.
	Ready bool
	// Reason and Message are those of the target's Ready condition; the
	// node's Ready condition shows them when Ready is false.
	Reason, Message string
	// Partitioned: the target does not answer. Only then is the node
	// NotReady, so that its proxies are evicted after their not-ready
	// toleration, as on a failed node. A target that is not Ready for any
	// other reason (credentials missing or refused, an untrusted
	// certificate, a refused kubeconfig, fleetlet missing there) is
	// fleetlet's side, like a fleetlet outage: the node stays Ready,
	// saying why no new pod goes there, and nothing running is evicted.
	Partitioned bool
	// Summary is the last ClusterSummary status read from the target; nil
	// until the first read, which makes allocatable zero (bar the proxies).
	Summary *v1alpha1.ClusterSummaryStatus
	// SourceName is this source's name in the target: its delegates there
	// carry multicluster.fleetlet.io/parent-cluster=SourceName. They count
	// as load in allocatable like everything else; the proxies bound or
	// pinned to the node give their room back (see Allocatable).
	SourceName string
	// ExcludedLabelsRegexp is the target's spec.excludedLabelsRegexp.
	ExcludedLabelsRegexp string
}

// Config configures a Controller.
type Config struct {
	// Client is a client of the source cluster. It needs to create, get,
	// patch (also nodes/status) and delete Nodes; get, create, update and
	// delete Leases in kube-node-lease; list and watch Pods.
	Client kubernetes.Interface
	// LeaseDuration is the duration of each node's Lease in
	// kube-node-lease, in whole seconds (default DefaultLeaseDuration).
	LeaseDuration time.Duration
	// RenewInterval is how often the Leases are renewed (default a quarter
	// of LeaseDuration); it must be shorter than LeaseDuration.
	RenewInterval time.Duration
	// StatusInterval is how often a node's status is written when nothing
	// changed (default DefaultStatusInterval).
	StatusInterval time.Duration
	// Kubelet serves each node's kubelet API; the node advertises the
	// port it gives in status.daemonEndpoints.kubeletEndpoint. Nil
	// serves none and advertises port 0.
	Kubelet KubeletServer
	// ResourceInterval is how long a change of a node's allocatable and
	// capacity may wait before it is written while the node as written
	// still has room for every proxy counting on it (default
	// DefaultResourceInterval; negative: written at once).
	ResourceInterval time.Duration
	// NodeAddress is the InternalIP every node advertises: the manager's
	// (default DefaultNodeAddress).
	NodeAddress string
	// KubeletVersion is status.nodeInfo.kubeletVersion (default
	// DefaultKubeletVersion).
	KubeletVersion string
	// Clock gives the conditions' transition times (default the real
	// clock).
	Clock clock.Clock
	// Logger is the controller's logger (default controller-runtime's,
	// named "vnode").
	Logger logr.Logger
}

func (c *Config) defaultAndValidate() error {
	if c.LeaseDuration == 0 {
		c.LeaseDuration = DefaultLeaseDuration
	}
	if c.RenewInterval == 0 {
		c.RenewInterval = c.LeaseDuration / 4
	}
	if c.StatusInterval == 0 {
		c.StatusInterval = DefaultStatusInterval
	}
	if c.ResourceInterval == 0 {
		c.ResourceInterval = DefaultResourceInterval
	}
	if c.NodeAddress == "" {
		c.NodeAddress = DefaultNodeAddress
	}
	if c.KubeletVersion == "" {
		c.KubeletVersion = DefaultKubeletVersion
	}
	if c.Clock == nil {
		c.Clock = clock.RealClock{}
	}
	var errs []error
	if c.Client == nil {
		errs = append(errs, errors.New("a client of the source cluster is required"))
	}
	if c.LeaseDuration < time.Second || c.LeaseDuration%time.Second != 0 || c.LeaseDuration > math.MaxInt32*time.Second {
		errs = append(errs, fmt.Errorf("node lease duration %s is not a positive whole number of seconds", c.LeaseDuration))
	}
	if c.RenewInterval <= 0 || c.RenewInterval >= c.LeaseDuration {
		errs = append(errs, fmt.Errorf("node lease renew interval %s must be positive and shorter than the lease duration %s", c.RenewInterval, c.LeaseDuration))
	}
	if c.StatusInterval < 0 {
		errs = append(errs, fmt.Errorf("node status interval %s is negative", c.StatusInterval))
	}
	if net.ParseIP(c.NodeAddress) == nil {
		errs = append(errs, fmt.Errorf("node address %q is not an IP address", c.NodeAddress))
	}
	return errors.Join(errs...)
}

// KubeletServer serves the kubelet API of virtual nodes.
type KubeletServer interface {
	// Serve serves node's kubelet API until ctx ends and returns the
	// port it listens on.
	Serve(ctx context.Context, node string) (int32, error)
}

// Controller keeps one virtual node per target in the source cluster, each
// run by its own virtual-kubelet node controller. See the package
// documentation.
type Controller struct {
	cfg     Config
	log     logr.Logger
	params  nodeParams
	tracker *proxyTracker
	daemons *daemonAcks

	mu     sync.Mutex
	nodes  map[proxy.TargetKey]*virtualNode
	owners map[string]proxy.TargetKey // node name → target
	// refused are the targets refused for a node name taken (logged once).
	refused map[proxy.TargetKey]bool
	runCtx  context.Context // set while Run runs
	ran     bool
	wg      sync.WaitGroup
}

// virtualNode is the state of one target's node. Fields are guarded by
// Controller.mu.
type virtualNode struct {
	key   proxy.TargetKey
	name  string
	log   logr.Logger
	state TargetState

	// Set while the node runs:
	cancel context.CancelFunc
	done   chan struct{}
	bound  *boundPods
	// feed and built are set once the node is built for the first time.
	feed  *nodeFeed
	built *corev1.Node
	// builtAt is when built was set; settling, that a held-back change
	// will be written (settle.go).
	builtAt  time.Time
	settling bool
	// labelsErr is the last label error logged, so that it is logged once.
	labelsErr string
	// port is the node's kubelet API port, set when the node starts.
	port int32
}

// NewController returns a Controller. Nothing runs before Run.
func NewController(cfg Config) (*Controller, error) {
	if err := cfg.defaultAndValidate(); err != nil {
		return nil, fmt.Errorf("invalid virtual node configuration: %w", err)
	}
	log := ctrllog.Log.WithName("vnode")
	if cfg.Logger.GetSink() != nil {
		log = cfg.Logger
	}
	c := &Controller{
		cfg: cfg,
		log: log,
		params: nodeParams{
			address:        cfg.NodeAddress,
			kubeletVersion: cfg.KubeletVersion,
		},
		nodes:   map[proxy.TargetKey]*virtualNode{},
		owners:  map[string]proxy.TargetKey{},
		refused: map[proxy.TargetKey]bool{},
	}
	c.daemons = newDaemonAcks(c)
	tracker, err := newProxyTracker(cfg.Client, cfg.Clock, c.proxiesChanged, c.daemons.add)
	if err != nil {
		return nil, err
	}
	c.tracker = tracker
	return c, nil
}

// Upsert makes the virtual node of s.Key show s: it starts a node
// controller for a target it did not know (at once while Run runs, else
// when Run starts) or pushes the new labels and status to the running one.
// It returns at once and writes nothing when nothing the node shows
// changed, so it can be called on every probe of the target.
//
// A target whose node name (NodeName) already stands for another target is
// refused with a logged error. An ExcludedLabelsRegexp that does not compile
// is logged, and the node then carries none of the target's labels: the
// registry reports it on the Target (see CompileExcludedLabels).
func (c *Controller) Upsert(_ context.Context, s TargetState) {
	name := proxy.NodeName(s.Key)
	s.Summary = s.Summary.DeepCopy()

	c.mu.Lock()
	defer c.mu.Unlock()
	if owner, ok := c.owners[name]; ok && owner != s.Key {
		if !c.refused[s.Key] {
			c.log.Error(nil, "Refusing a target: its virtual node name stands for another target already",
				"target", s.Key.String(), "node", name, "otherTarget", owner.String())
			c.refused[s.Key] = true
		}
		return
	}
	delete(c.refused, s.Key)
	vn := c.nodes[s.Key]
	if vn == nil {
		vn = &virtualNode{key: s.Key, name: name, log: c.log.WithValues("target", s.Key.String(), "node", name)}
		c.nodes[s.Key] = vn
		c.owners[name] = s.Key
	}
	vn.state = s
	switch {
	case c.runCtx != nil && vn.cancel == nil:
		c.startLocked(vn)
	case vn.feed != nil:
		c.refreshLocked(vn)
	}
}

// Remove stops the node controller of a target and deletes its Node and
// the node's Lease in kube-node-lease (what the proxies bound there become
// is then the pod garbage collector's business: they are deleted, and
// their controllers recreate them elsewhere). It is for a target that was
// deleted, never for one that is merely unreachable. It is idempotent: for
// a target it does not know it deletes the node and Lease of that name,
// unless the node stands for another target.
func (c *Controller) Remove(ctx context.Context, key proxy.TargetKey) error {
	name := proxy.NodeName(key)
	c.mu.Lock()
	delete(c.refused, key)
	if owner, ok := c.owners[name]; ok && owner != key {
		c.mu.Unlock()
		return nil
	}
	vn := c.nodes[key]
	delete(c.nodes, key)
	delete(c.owners, name)
	c.mu.Unlock()

	log := c.log.WithValues("target", key.String(), "node", name)
	c.stopNode(vn)

	node, err := c.cfg.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		return fmt.Errorf("reading virtual node %s: %w", name, err)
	case node.Annotations[v1alpha1.AnnotationTarget] != "" && node.Annotations[v1alpha1.AnnotationTarget] != key.String():
		// Made for another target of the same name, which this process
		// has not run yet: it is not this target's to delete.
		log.Info("Leaving a virtual node that stands for another target", "otherTarget", node.Annotations[v1alpha1.AnnotationTarget])
		return nil
	default:
		log.Info("Deleting the virtual node of a deleted target")
		err := c.cfg.Client.CoreV1().Nodes().Delete(ctx, name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &node.UID}})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			return fmt.Errorf("deleting virtual node %s: %w", name, err)
		}
	}
	err = c.cfg.Client.CoordinationV1().Leases(corev1.NamespaceNodeLease).Delete(ctx, name, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting the lease of virtual node %s: %w", name, err)
	}
	return nil
}

// Release stops running the node of a target whose name stands for another
// target, without deleting anything: the other's node controller takes the
// node over. It does nothing for a target it does not run.
func (c *Controller) Release(key proxy.TargetKey) {
	c.mu.Lock()
	vn := c.nodes[key]
	if vn == nil {
		c.mu.Unlock()
		return
	}
	delete(c.nodes, key)
	if c.owners[vn.name] == key {
		delete(c.owners, vn.name)
	}
	c.mu.Unlock()
	vn.log.Info("Releasing the virtual node: its name stands for another target")
	c.stopNode(vn)
}

// stopNode stops the node controller of vn, if it runs, and waits for it.
func (c *Controller) stopNode(vn *virtualNode) {
	if vn == nil || vn.cancel == nil {
		return
	}
	vn.cancel()
	// The node controller ends promptly once cancelled (its API calls
	// are); until it has, it could recreate a node deleted after.
	<-vn.done
	c.tracker.forget(vn.name, vn.bound)
}

// Run runs the virtual nodes until ctx ends, then stops every node
// controller and returns. It deletes nothing when it stops: a fleetlet
// outage must never look like a target's failure, so the nodes stay, their
// Leases lapse, the node lifecycle controller marks them Unknown, and the
// proxies, which tolerate the unreachable taint without limit, stay too.
// Run runs once; it is meant to run on the elected leader only.
func (c *Controller) Run(ctx context.Context) error {
	c.mu.Lock()
	if c.ran {
		c.mu.Unlock()
		return errors.New("the virtual node controller already ran")
	}
	c.ran = true
	c.runCtx = ctx
	c.log.Info("Starting virtual nodes", "nodes", len(c.nodes))
	c.wg.Go(func() { c.tracker.pinned.RunWithContext(ctx) })
	c.wg.Go(func() { c.daemons.run(ctx) })
	for _, vn := range c.nodes {
		c.startLocked(vn)
	}
	c.mu.Unlock()

	<-ctx.Done()
	c.mu.Lock()
	c.runCtx = nil
	c.mu.Unlock()
	c.log.Info("Stopping virtual nodes; they stay, and their leases lapse")
	c.wg.Wait()
	return nil
}

// runsNode reports whether name is a virtual node this controller runs.
func (c *Controller) runsNode(name string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.owners[name]
	return ok
}

// startLocked starts the goroutine that runs the node of vn.
func (c *Controller) startLocked(vn *virtualNode) {
	bound, err := c.tracker.newBound(vn.name)
	if err != nil {
		// Only a programming error (a handler added to a started
		// informer) fails here.
		vn.log.Error(err, "Cannot watch the pods of the virtual node")
		return
	}
	ctx, cancel := context.WithCancel(c.runCtx)
	vn.cancel, vn.done, vn.bound = cancel, make(chan struct{}), bound
	done := vn.done
	c.wg.Go(func() {
		defer close(done)
		defer cancel()
		c.runNode(ctx, vn, bound)
	})
}

// runNode runs one virtual node until ctx ends: once the pod informers have
// synced (so that allocatable counts every proxy from the first write), it
// runs a virtual-kubelet node controller, and a new one with backoff
// whenever one fails (it could not create or read the node).
func (c *Controller) runNode(ctx context.Context, vn *virtualNode, bound *boundPods) {
	log := vn.log
	ctx = vklog.WithLogger(ctx, vkLogger{l: log})
	ctx, cancel := context.WithCancel(ctx)
	var informer sync.WaitGroup
	defer informer.Wait()
	defer cancel()
	informer.Go(func() { bound.informer.RunWithContext(ctx) })
	// The handlers' sync, not the stores': the sums count a pod once its
	// event is handled.
	if !cache.WaitForCacheSync(ctx.Done(), c.tracker.pinnedSynced, bound.synced) {
		return
	}

	var port int32
	if c.cfg.Kubelet != nil {
		p, err := c.cfg.Kubelet.Serve(ctx, vn.name)
		if err != nil {
			log.Error(err, "The virtual node serves no kubelet API: kubectl logs and exec on its pods fail")
		}
		port = p
	}

	// Keep the transition times of the conditions a previous run wrote.
	var prev []corev1.NodeCondition
	if existing, err := c.cfg.Client.CoreV1().Nodes().Get(ctx, vn.name, metav1.GetOptions{}); err == nil {
		prev = existing.Status.Conditions
	}
	c.mu.Lock()
	vn.port = port
	vn.feed = newNodeFeed(nil)
	c.buildLocked(vn, prev, true)
	c.mu.Unlock()

	nodes := &labelKeeper{NodeInterface: c.cfg.Client.CoreV1().Nodes(), log: log, desired: func() map[string]string {
		c.mu.Lock()
		defer c.mu.Unlock()
		return vn.built.Labels
	}, target: vn.key.String(), clock: c.cfg.Clock}
	leases := c.cfg.Client.CoordinationV1().Leases(corev1.NamespaceNodeLease)
	backoff := restartBackoffInitial
	for {
		initial, gen := vn.feed.get()
		p := &provider{feed: vn.feed, sent: gen}
		nc, err := node.NewNodeController(p, initial.DeepCopy(), nodes,
			node.WithNodeEnableLeaseV1WithRenewInterval(leases, int32(c.cfg.LeaseDuration/time.Second), c.cfg.RenewInterval),
			node.WithNodeStatusUpdateInterval(c.cfg.StatusInterval),
			node.WithNodeStatusUpdateErrorHandler(c.recreateDeletedNode(vn)),
		)
		if err != nil {
			log.Error(err, "Cannot create the virtual-kubelet node controller")
			return
		}
		p.ready = nc.Ready()
		log.V(1).Info("Running the virtual node")
		attempt, stopAttempt := context.WithCancel(ctx)
		err = nc.Run(attempt)
		stopAttempt()
		if ctx.Err() != nil {
			return
		}
		select {
		case <-nc.Ready():
			backoff = restartBackoffInitial
		default:
		}
		log.Error(err, "The virtual node controller stopped; restarting it", "after", backoff)
		t := c.cfg.Clock.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C():
		}
		backoff = min(2*backoff, restartBackoffMax)
	}
}

// recreateDeletedNode is the node controller's status error handler: a
// virtual node deleted by someone while its target is still there is
// created again, as a kubelet registers its node again.
func (c *Controller) recreateDeletedNode(vn *virtualNode) node.ErrorHandler {
	return func(ctx context.Context, err error) error {
		if !apierrors.IsNotFound(err) {
			return err
		}
		c.mu.Lock()
		n := vn.built.DeepCopy()
		c.mu.Unlock()
		vn.log.Info("Creating the virtual node again: it was deleted while its target is still there")
		if _, err := c.cfg.Client.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
		return nil
	}
}

// proxiesChanged re-pushes the node whose proxies changed.
func (c *Controller) proxiesChanged(nodeName string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	key, ok := c.owners[nodeName]
	if !ok {
		return
	}
	if vn := c.nodes[key]; vn != nil && vn.feed != nil {
		c.refreshLocked(vn)
	}
}

// refreshLocked rebuilds the node and hands it to the node controller when
// it shows something new.
func (c *Controller) refreshLocked(vn *virtualNode) {
	c.buildLocked(vn, nil, false)
}

// buildLocked builds vn's node from its state and proxies, and sets it in
// the feed when it differs from the last one; unless now is set, a change
// of its resources alone may wait (holdsBack). prev are conditions to keep
// transition times from when nothing was built yet.
func (c *Controller) buildLocked(vn *virtualNode, prev []corev1.NodeCondition, now bool) {
	if vn.built != nil {
		prev = vn.built.Status.Conditions
	}
	proxies := c.tracker.requests(vn.name)
	params := c.params
	params.kubeletPort = vn.port
	n, err := buildNode(vn.name, vn.state, proxies, params, prev, c.cfg.Clock.Now())
	switch {
	case err != nil && err.Error() != vn.labelsErr:
		vn.log.Error(err, "The virtual node carries none of its target's labels")
		vn.labelsErr = err.Error()
	case err == nil:
		vn.labelsErr = ""
	}
	if vn.built != nil && sameNode(vn.built, n) {
		return
	}
	if !now && vn.built != nil && c.holdsBack(vn, n, proxies) {
		c.settleLater(vn)
		return
	}
	vn.built, vn.builtAt = n, c.cfg.Clock.Now()
	vn.feed.set(n)
}

// sameNode tells whether two built nodes show the same labels and status,
// heartbeat times aside. It copies neither: every proxy event of a node
// asks, and each copy of a node was a copy of its resource lists.
func sameNode(a, b *corev1.Node) bool {
	if !apiequality.Semantic.DeepEqual(a.Labels, b.Labels) {
		return false
	}
	sameCondition := func(x, y corev1.NodeCondition) bool {
		x.LastHeartbeatTime, y.LastHeartbeatTime = metav1.Time{}, metav1.Time{}
		return apiequality.Semantic.DeepEqual(x, y)
	}
	if !slices.EqualFunc(a.Status.Conditions, b.Status.Conditions, sameCondition) {
		return false
	}
	sa, sb := a.Status, b.Status // the structs only: nothing below is written
	sa.Conditions, sb.Conditions = nil, nil
	return apiequality.Semantic.DeepEqual(sa, sb)
}
