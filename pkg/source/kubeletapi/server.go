package kubeletapi

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"github.com/virtual-kubelet/virtual-kubelet/node/api"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
)

// PortRange is the ports the nodes' listeners may take, First to Last
// included; the zero range takes any free port.
type PortRange struct{ First, Last int }

// ParsePortRange reads "first-last", one port, or "0" (any free port).
func ParsePortRange(s string) (PortRange, error) {
	first, last, isRange := strings.Cut(s, "-")
	if !isRange {
		last = first
	}
	a, err1 := strconv.Atoi(first)
	b, err2 := strconv.Atoi(last)
	if err1 != nil || err2 != nil || a < 0 || b > 65535 || a > b || (a == 0 && (isRange || b != 0)) {
		return PortRange{}, fmt.Errorf("ports %q: want first-last (1-65535), one port, or 0 for any free port", s)
	}
	return PortRange{First: a, Last: b}, nil
}

// Certificates gives the serving certificate of a node's listener.
type Certificates interface {
	// Start begins keeping node's certificate until ctx ends (for one per
	// node: obtained and renewed while the node is served).
	Start(ctx context.Context, node string)
	// Certificate is node's certificate now.
	Certificate(node string) (*tls.Certificate, error)
}

// Config configures a Server.
type Config struct {
	// Source reads the source's pods (a cache indexed by
	// indexer.ActivePodNodeName).
	Source client.Reader
	// Targets gives the clients of the connected targets.
	Targets Targets
	// Auth authenticates and authorizes every request.
	Auth *Auth
	// Certificates gives each node's serving certificate.
	Certificates Certificates
	// Address is the IP address the listeners bind: the nodes'
	// InternalIP.
	Address string
	// Ports are the ports the listeners may take.
	Ports PortRange
	// Logger is the server's logger (default controller-runtime's,
	// named "kubelet-api").
	Logger logr.Logger
}

// Server serves the kubelet API of the virtual nodes, one listener each.
type Server struct {
	cfg Config
	log logr.Logger
}

// NewServer returns a Server. Nothing listens before Serve.
func NewServer(cfg Config) (*Server, error) {
	var errs []error
	if cfg.Source == nil || cfg.Targets == nil || cfg.Auth == nil || cfg.Certificates == nil {
		errs = append(errs, errors.New("the kubelet API needs a source reader, targets, authentication and certificates"))
	}
	if net.ParseIP(cfg.Address) == nil {
		errs = append(errs, fmt.Errorf("kubelet API address %q is not an IP address", cfg.Address))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	log := ctrllog.Log.WithName("kubelet-api")
	if cfg.Logger.GetSink() != nil {
		log = cfg.Logger
	}
	return &Server{cfg: cfg, log: log}, nil
}

// Serve serves node's kubelet API until ctx ends and returns the port it
// listens on, for the node to advertise.
func (s *Server) Serve(ctx context.Context, node string) (int32, error) {
	l, err := s.listen()
	if err != nil {
		return 0, fmt.Errorf("no port for the kubelet API of node %s: %w", node, err)
	}
	log := s.log.WithValues("node", node)
	s.cfg.Certificates.Start(ctx, node)
	h := &nodeHandlers{node: node, source: s.cfg.Source, targets: s.cfg.Targets, podMetrics: listPodMetrics, started: time.Now()}
	mux := http.NewServeMux()
	// Logs are served here rather than by virtual-kubelet's handler,
	// which drops tailLines=0 and wraps every error in a 500-style
	// message.
	mux.HandleFunc(logsPrefix, h.serveLogs)
	// Usage, from the delegates' PodMetrics in the target (usage.go).
	mux.HandleFunc("GET /metrics/resource", h.serveResourceMetrics)
	mux.HandleFunc("GET /stats/summary", h.serveSummary)
	mux.Handle("/", api.PodHandler(api.PodHandlerConfig{
		RunInContainer:        h.exec,
		AttachToContainer:     h.attach,
		PortForward:           h.portForward,
		GetPodsFromKubernetes: h.pods,
		GetPods:               h.pods,
	}, false))
	srv := &http.Server{
		Handler:           s.cfg.Auth.filter(node, mux),
		ReadHeaderTimeout: 30 * time.Second,
		BaseContext:       func(net.Listener) context.Context { return ctrllog.IntoContext(ctx, log) },
		TLSConfig: &tls.Config{
			MinVersion: tls.VersionTLS12,
			// The authenticator verifies client certificates.
			ClientAuth: tls.RequestClientCert,
			GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
				return s.cfg.Certificates.Certificate(node)
			},
		},
	}
	port := l.Addr().(*net.TCPAddr).Port
	log.Info("Serving the kubelet API", "address", l.Addr().String())
	go func() {
		if err := srv.ServeTLS(l, "", ""); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error(err, "The kubelet API stopped")
		}
	}()
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	return int32(port), nil
}

// listen takes the first free port of the range.
func (s *Server) listen() (net.Listener, error) {
	r := s.cfg.Ports
	var last error
	for p := r.First; p <= r.Last; p++ {
		l, err := net.Listen("tcp", net.JoinHostPort(s.cfg.Address, strconv.Itoa(p)))
		if err == nil {
			return l, nil
		}
		last = err
	}
	return nil, fmt.Errorf("every port of %d-%d is taken: %w", r.First, r.Last, last)
}
