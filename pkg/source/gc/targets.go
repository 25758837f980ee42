package gc

import (
	"sigs.k8s.io/controller-runtime/pkg/client"

	proxypod "github.com/fleetlet/fleetlet/pkg/proxy"
	"github.com/fleetlet/fleetlet/pkg/source/fleet"
)

// Target is one target cluster as the collector sees it.
type Target interface {
	// Key names the Target or ClusterTarget; a namespaced Target
	// (Key().Namespace set) handles its own namespace only.
	Key() proxypod.TargetKey
	// Client talks to the target with the Target's credentials.
	Client() client.Client
	// Ready is true when the target answered its last probe.
	Ready() bool
	// Self is true for the source cluster as its own target: its
	// namespaces are the source's.
	Self() bool
}

// Targets lists the live targets.
type Targets interface {
	List() []Target
}

// RegistryTargets adapts the target registry.
func RegistryTargets(reg *fleet.Registry) Targets { return registryTargets{reg} }

type registryTargets struct{ reg *fleet.Registry }

func (r registryTargets) List() []Target {
	clusters := r.reg.List()
	out := make([]Target, 0, len(clusters))
	for _, c := range clusters {
		out = append(out, registryTarget{c})
	}
	return out
}

type registryTarget struct{ *fleet.Cluster }

func (t registryTarget) Ready() bool { return t.Health().Ready }
