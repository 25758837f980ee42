package chaperon

import (
	"errors"
	"fmt"
	"sync"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Impersonator gives clients that act as another user.
type Impersonator interface {
	// ClientFor returns a client whose every request impersonates
	// userName, and nothing else: no groups or extra are asked for, so
	// that the API server fills in those of a ServiceAccount itself and
	// constrained impersonation (impersonate:serviceaccount) applies.
	ClientFor(userName string) (client.Client, error)
}

// NewImpersonator returns an Impersonator that builds, from config, one
// client per user and keeps it. opts give the scheme and a REST mapper:
// give the manager's, since discovery as the impersonated user fails when
// the manager may impersonate it for creating pods only (constrained
// impersonation). opts.HTTPClient must be nil: the impersonating transport
// is built from config for each user (the TLS connections underneath are
// shared all the same).
func NewImpersonator(config *rest.Config, opts client.Options) (Impersonator, error) {
	if config == nil {
		return nil, errors.New("impersonator: no REST config")
	}
	if opts.HTTPClient != nil {
		return nil, errors.New("impersonator: an HTTP client would bypass impersonation; leave client.Options.HTTPClient nil")
	}
	return &impersonator{config: rest.CopyConfig(config), opts: opts, clients: map[string]client.Client{}}, nil
}

type impersonator struct {
	config *rest.Config
	opts   client.Options

	mu      sync.Mutex
	clients map[string]client.Client
}

func (i *impersonator) ClientFor(userName string) (client.Client, error) {
	if userName == "" {
		return nil, errors.New("impersonator: no user name")
	}
	i.mu.Lock()
	defer i.mu.Unlock()
	if c, ok := i.clients[userName]; ok {
		return c, nil
	}
	cfg := rest.CopyConfig(i.config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: userName}
	c, err := client.New(cfg, i.opts)
	if err != nil {
		return nil, fmt.Errorf("building a client impersonating %s: %w", userName, err)
	}
	i.clients[userName] = c
	return c, nil
}
