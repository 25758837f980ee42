package kubeletapi

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"sync"

	"k8s.io/apiserver/pkg/server/dynamiccertificates"
	certutil "k8s.io/client-go/util/cert"
)

// sharedCertificate serves every node with the certificate of one
// provider, parsed again whenever its content changes (files rotated).
type sharedCertificate struct {
	provider dynamiccertificates.CertKeyContentProvider

	mu        sync.Mutex
	cert, key []byte
	parsed    *tls.Certificate
}

// Start does nothing: one certificate serves every node.
func (*sharedCertificate) Start(context.Context, string) {}

func (s *sharedCertificate) Certificate(string) (*tls.Certificate, error) {
	cert, key := s.provider.CurrentCertKeyContent()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.parsed != nil && bytes.Equal(cert, s.cert) && bytes.Equal(key, s.key) {
		return s.parsed, nil
	}
	c, err := tls.X509KeyPair(cert, key)
	if err != nil {
		return nil, fmt.Errorf("the kubelet API's serving certificate %s: %w", s.provider.Name(), err)
	}
	s.cert, s.key, s.parsed = cert, key, &c
	return &c, nil
}

// SelfSigned returns one self-signed certificate for address, for every
// node: for an API server that does not verify kubelet certificates.
func SelfSigned(address string) (Certificates, error) {
	ip := net.ParseIP(address)
	if ip == nil {
		return nil, fmt.Errorf("address %q is not an IP address", address)
	}
	cert, key, err := certutil.GenerateSelfSignedCertKey("fleetlet-kubelet", []net.IP{ip}, nil)
	if err != nil {
		return nil, err
	}
	p, err := dynamiccertificates.NewStaticCertKeyContent("self-signed", cert, key)
	if err != nil {
		return nil, err
	}
	return &sharedCertificate{provider: p}, nil
}

// FromFiles serves every node with the certificate and key in these files
// (a Secret mounted, cert-manager's or the operator's), read again when
// they change, until ctx ends.
func FromFiles(ctx context.Context, certFile, keyFile string) (Certificates, error) {
	p, err := dynamiccertificates.NewDynamicServingContentFromFiles("kubelet-serving", certFile, keyFile)
	if err != nil {
		return nil, err
	}
	go p.Run(ctx, 1)
	return &sharedCertificate{provider: p}, nil
}
