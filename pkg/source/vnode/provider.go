package vnode

import (
	"context"
	"fmt"
	"sort"
	"sync"

	"github.com/go-logr/logr"
	vklog "github.com/virtual-kubelet/virtual-kubelet/log"
	corev1 "k8s.io/api/core/v1"
)

// nodeFeed holds the latest node one virtual node should show, for the
// virtual-kubelet node controller to pick up. Setting it never blocks: a
// burst of changes becomes one status update.
type nodeFeed struct {
	mu     sync.Mutex
	latest *corev1.Node
	gen    uint64
	kick   chan struct{}
}

func newNodeFeed(n *corev1.Node) *nodeFeed {
	return &nodeFeed{latest: n, gen: 1, kick: make(chan struct{}, 1)}
}

// set replaces the latest node and wakes the feeder.
func (f *nodeFeed) set(n *corev1.Node) {
	f.mu.Lock()
	f.latest, f.gen = n, f.gen+1
	f.mu.Unlock()
	select {
	case f.kick <- struct{}{}:
	default:
	}
}

func (f *nodeFeed) get() (*corev1.Node, uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.latest, f.gen
}

// provider is the node.NodeProvider of one run of a virtual-kubelet node
// controller (a new one is made each time the controller is restarted).
type provider struct {
	feed *nodeFeed
	// sent is the generation of the feed the controller has: the one it
	// was created with, then the last one delivered.
	sent uint64
	// ready is closed when the node controller's control loop runs.
	ready <-chan struct{}
}

// Ping reports fleetlet's own health, not the target's: virtual-kubelet
// stops updating the node status and renewing the lease while Ping fails,
// and a lapsing lease must mean "fleetlet is down", never "the target is
// unreachable" (that is Ready=False, in the status). So it always succeeds
// while the controller runs; when fleetlet stops, so do the renewals.
func (p *provider) Ping(context.Context) error { return nil }

// NotifyNodeStatus delivers every new node of the feed to cb until ctx
// ends. It starts delivering once the node controller's control loop runs:
// cb sends on a channel only that loop reads, so a delivery attempted while
// the controller is still registering the node (or failed to) would block
// for good.
//
// One case is left: if the controller stops while it writes one node and
// holds the next, a third delivery blocks, and its goroutine with it. That
// takes three changes within one status write as the node stops (Remove,
// or the manager's shutdown), and costs one goroutine and one Node.
func (p *provider) NotifyNodeStatus(ctx context.Context, cb func(*corev1.Node)) {
	go func() {
		select {
		case <-ctx.Done():
			return
		case <-p.ready:
		}
		for {
			n, gen := p.feed.get()
			if gen != p.sent {
				cb(n.DeepCopy())
				p.sent = gen
			}
			select {
			case <-ctx.Done():
				return
			case <-p.feed.kick:
			}
		}
	}()
}

// vkLogger makes a logr.Logger virtual-kubelet's logger: its debug messages
// at V(5), info at V(3), warnings at V(1), errors as errors.
type vkLogger struct {
	l   logr.Logger
	err error
}

var _ vklog.Logger = vkLogger{}

func (v vkLogger) Debug(args ...any)            { v.l.V(5).Info(fmt.Sprint(args...)) }
func (v vkLogger) Debugf(f string, args ...any) { v.l.V(5).Info(fmt.Sprintf(f, args...)) }
func (v vkLogger) Info(args ...any)             { v.l.V(3).Info(fmt.Sprint(args...)) }
func (v vkLogger) Infof(f string, args ...any)  { v.l.V(3).Info(fmt.Sprintf(f, args...)) }
func (v vkLogger) Warn(args ...any)             { v.warn(fmt.Sprint(args...)) }
func (v vkLogger) Warnf(f string, args ...any)  { v.warn(fmt.Sprintf(f, args...)) }
func (v vkLogger) Error(args ...any)            { v.l.Error(v.err, fmt.Sprint(args...)) }
func (v vkLogger) Errorf(f string, args ...any) { v.l.Error(v.err, fmt.Sprintf(f, args...)) }

// Fatal logs an error; the manager is not a process virtual-kubelet may
// end.
func (v vkLogger) Fatal(args ...any)            { v.Error(args...) }
func (v vkLogger) Fatalf(f string, args ...any) { v.Errorf(f, args...) }

func (v vkLogger) warn(msg string) {
	if v.err != nil {
		v.l.V(1).Info(msg, "err", v.err)
		return
	}
	v.l.V(1).Info(msg)
}

func (v vkLogger) WithField(k string, val any) vklog.Logger {
	return vkLogger{l: v.l.WithValues(k, val), err: v.err}
}

func (v vkLogger) WithFields(fields vklog.Fields) vklog.Logger {
	keys := make([]string, 0, len(fields))
	for k := range fields {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	kv := make([]any, 0, 2*len(keys))
	for _, k := range keys {
		kv = append(kv, k, fields[k])
	}
	return vkLogger{l: v.l.WithValues(kv...), err: v.err}
}

func (v vkLogger) WithError(err error) vklog.Logger { return vkLogger{l: v.l, err: err} }
