package kubeletapi

import (
	"context"
	"fmt"
	"time"

	"github.com/virtual-kubelet/virtual-kubelet/errdefs"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fleetlet/fleetlet/pkg/indexer"
	"github.com/fleetlet/fleetlet/pkg/proxy"
)

// Targets gives the client configuration of a connected target: the
// Source's identity there. namespace is empty for a ClusterTarget.
type Targets interface {
	TargetConfig(namespace, name string) (*rest.Config, bool)
}

// delegate is where a proxy's delegate runs: its pod in the target.
type delegate struct {
	target    string
	config    *rest.Config
	namespace string
	name      string
}

func (d delegate) String() string {
	return fmt.Sprintf("delegate %s/%s in target %s", d.namespace, d.name, d.target)
}

func (d delegate) clientset() (kubernetes.Interface, error) {
	return kubernetes.NewForConfig(d.config)
}

// nodeHandlers serve the kubelet API of one virtual node.
type nodeHandlers struct {
	node    string
	source  client.Reader
	targets Targets
	// podMetrics reads the delegates' usage; counters keep the node's
	// cumulative CPU counts (usage.go).
	podMetrics podMetricsLister
	counters   counters
	// started is when this node's kubelet API began: the node's start in
	// /stats/summary.
	started time.Time
}

// delegateOf finds the delegate of proxy namespace/name, which must be
// bound to this node: through its election record, never by a label scan.
func (h *nodeHandlers) delegateOf(ctx context.Context, namespace, name string) (delegate, error) {
	var p corev1.Pod
	err := h.source.Get(ctx, types.NamespacedName{Namespace: namespace, Name: name}, &p)
	if apierrors.IsNotFound(err) {
		return delegate{}, errdefs.NotFoundf("pod %s/%s not found", namespace, name)
	}
	if err != nil {
		return delegate{}, fmt.Errorf("reading pod %s/%s: %w", namespace, name, err)
	}
	if p.Spec.NodeName != h.node {
		return delegate{}, errdefs.NotFoundf("pod %s/%s is not on node %s", namespace, name, h.node)
	}
	rec, ok := proxy.Elected(&p)
	if !ok {
		return delegate{}, errdefs.NotFoundf("pod %s/%s has no delegate: no election stands for it", namespace, name)
	}
	cfg, ok := h.targets.TargetConfig(rec.TargetNamespace, rec.TargetName)
	if !ok {
		return delegate{}, &unreachableError{fmt.Sprintf("pod %s/%s runs in target %s, which is not connected", namespace, name, rec.Target())}
	}
	return delegate{target: rec.Target().String(), config: cfg, namespace: namespace, name: rec.Chaperon}, nil
}

// pods lists the pods bound to this node, for /pods.
func (h *nodeHandlers) pods(ctx context.Context) ([]*corev1.Pod, error) {
	var list corev1.PodList
	if err := h.source.List(ctx, &list, client.MatchingFields{indexer.ActivePodNodeName.Field: h.node}); err != nil {
		return nil, err
	}
	pods := make([]*corev1.Pod, 0, len(list.Items))
	for i := range list.Items {
		pods = append(pods, &list.Items[i])
	}
	return pods, nil
}

// unreachableError: the delegate's target cannot be reached now (503).
type unreachableError struct{ msg string }

func (e *unreachableError) Error() string { return e.msg }

// targetError makes an error of the target's API one a kubelet would
// answer with: a missing pod or container is NotFound, a bad option
// InvalidInput, anything else keeps its message and names the delegate.
func targetError(d delegate, err error) error {
	switch {
	case err == nil:
		return nil
	case apierrors.IsNotFound(err):
		return errdefs.AsNotFound(fmt.Errorf("%s: %w", d, err))
	case apierrors.IsBadRequest(err), apierrors.IsInvalid(err):
		return errdefs.AsInvalidInput(fmt.Errorf("%s: %w", d, err))
	}
	return fmt.Errorf("%s: %w", d, err)
}
