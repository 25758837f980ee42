package kubeletapi

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync"
	"time"

	"github.com/go-logr/logr"
	authenticationv1 "k8s.io/api/authentication/v1"
	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
)

// Labels of the CertificateSigningRequests fleetlet makes.
const (
	labelManagedBy = "app.kubernetes.io/managed-by"
	labelNode      = "kubeletapi.multicluster.fleetlet.io/node"
)

// Timing of the CSR flow.
const (
	// csrIssueTimeout is how long a CSR may wait for its certificate
	// before a new one is made.
	csrIssueTimeout = 2 * time.Minute
	// renewAt is the share of a certificate's lifetime after which a new
	// one is requested.
	renewAt = 0.8
)

// ReasonApproved is the reason of the Approved condition fleetlet sets on
// its own CSRs.
const ReasonApproved = "FleetletVirtualNode"

// servingUsages are a kubelet serving certificate's usages for an ECDSA
// key: what the kubelet-serving signer accepts.
var servingUsages = []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageServerAuth}

// CSRCertificates gives each virtual node a serving certificate from the
// cluster's kubernetes.io/kubelet-serving signer, as a kubelet gets its own:
// a CertificateSigningRequest for system:node:<node> naming the node's
// address, which the manager approves itself (only its own requests for
// its own nodes, see approvable) and renews before it expires. An API
// server with --kubelet-certificate-authority set to that signer's CA then
// verifies the virtual nodes as it verifies kubelets.
type CSRCertificates struct {
	client   kubernetes.Interface
	address  net.IP
	identity string
	log      logr.Logger

	mu    sync.Mutex
	certs map[string]*tls.Certificate
}

// NewCSRCertificates returns the CSR flow of a source cluster for nodes
// advertising address. It asks the API server who the manager is: its
// CSRs are the only ones it approves.
func NewCSRCertificates(ctx context.Context, cs kubernetes.Interface, address string) (*CSRCertificates, error) {
	ip := net.ParseIP(address)
	if ip == nil {
		return nil, fmt.Errorf("address %q is not an IP address", address)
	}
	review, err := cs.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("asking the API server who the manager is: %w", err)
	}
	return &CSRCertificates{
		client:   cs,
		address:  ip,
		identity: review.Status.UserInfo.Username,
		log:      ctrllog.Log.WithName("kubelet-api").WithName("csr"),
		certs:    map[string]*tls.Certificate{},
	}, nil
}

// Certificate is node's current serving certificate.
func (c *CSRCertificates) Certificate(node string) (*tls.Certificate, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if cert := c.certs[node]; cert != nil {
		return cert, nil
	}
	return nil, fmt.Errorf("node %s has no serving certificate yet", node)
}

// Start obtains node's certificate, and a new one each time the last
// reaches renewAt of its lifetime, until ctx ends.
func (c *CSRCertificates) Start(ctx context.Context, node string) {
	log := c.log.WithValues("node", node)
	go func() {
		defer func() {
			c.mu.Lock()
			delete(c.certs, node)
			c.mu.Unlock()
		}()
		retry := newRetryBackoff()
		for {
			cert, err := c.obtain(ctx, node)
			if ctx.Err() != nil {
				return
			}
			delay := retry.Step()
			if err != nil {
				log.Error(err, "No serving certificate for the virtual node's kubelet API", "retryIn", delay)
			} else {
				retry = newRetryBackoff()
				c.mu.Lock()
				c.certs[node] = cert
				c.mu.Unlock()
				life := cert.Leaf.NotAfter.Sub(cert.Leaf.NotBefore)
				delay = time.Until(cert.Leaf.NotBefore.Add(time.Duration(float64(life) * renewAt)))
				log.Info("The virtual node's kubelet API has a serving certificate", "notAfter", cert.Leaf.NotAfter, "renewIn", delay.Round(time.Second))
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(delay):
			}
		}
	}()
}

func newRetryBackoff() *wait.Backoff {
	return &wait.Backoff{Duration: time.Second, Factor: 2, Cap: time.Minute, Steps: 1 << 30}
}

// obtain requests, approves and waits for one certificate for node.
func (c *CSRCertificates) obtain(ctx context.Context, node string) (*tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
		Subject:     pkix.Name{CommonName: "system:node:" + node, Organization: []string{"system:nodes"}},
		IPAddresses: []net.IP{c.address},
	}, key)
	if err != nil {
		return nil, err
	}
	csr := &certificatesv1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{
			GenerateName: node + "-serving-",
			Labels:       map[string]string{labelManagedBy: "fleetlet", labelNode: node},
		},
		Spec: certificatesv1.CertificateSigningRequestSpec{
			Request:    pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}),
			SignerName: certificatesv1.KubeletServingSignerName,
			Usages:     servingUsages,
		},
	}
	created, err := c.client.CertificatesV1().CertificateSigningRequests().Create(ctx, csr, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("requesting a serving certificate: %w", err)
	}
	// Judged as the API server recorded it: who asked, and for what.
	if err := approvable(created, c.identity, node, c.address); err != nil {
		return nil, fmt.Errorf("CSR %s: %w", created.Name, err)
	}
	created.Status.Conditions = append(created.Status.Conditions, certificatesv1.CertificateSigningRequestCondition{
		Type: certificatesv1.CertificateApproved, Status: corev1.ConditionTrue, Reason: ReasonApproved,
		Message: fmt.Sprintf("fleetlet approves the serving certificate of its virtual node %s at %s", node, c.address),
	})
	if _, err := c.client.CertificatesV1().CertificateSigningRequests().UpdateApproval(ctx, created.Name, created, metav1.UpdateOptions{}); err != nil {
		return nil, fmt.Errorf("approving CSR %s: %w", created.Name, err)
	}
	certPEM, err := c.waitIssued(ctx, created.Name)
	if err != nil {
		return nil, err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, err
	}
	cert, err := tls.X509KeyPair(certPEM, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}))
	if err != nil {
		return nil, fmt.Errorf("CSR %s: %w", created.Name, err)
	}
	if cert.Leaf == nil {
		if cert.Leaf, err = x509.ParseCertificate(cert.Certificate[0]); err != nil {
			return nil, err
		}
	}
	return &cert, nil
}

// waitIssued waits for the signer to issue the certificate of CSR name,
// or to refuse it.
func (c *CSRCertificates) waitIssued(ctx context.Context, name string) ([]byte, error) {
	var cert []byte
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, csrIssueTimeout, true, func(ctx context.Context) (bool, error) {
		csr, err := c.client.CertificatesV1().CertificateSigningRequests().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil // transient: try again
		}
		for _, cond := range csr.Status.Conditions {
			if (cond.Type == certificatesv1.CertificateDenied || cond.Type == certificatesv1.CertificateFailed) && cond.Status == corev1.ConditionTrue {
				return false, fmt.Errorf("CSR %s: %s %s: %s", name, cond.Type, cond.Reason, cond.Message)
			}
		}
		cert = csr.Status.Certificate
		return len(cert) > 0, nil
	})
	if err != nil && len(cert) == 0 {
		return nil, fmt.Errorf("waiting for the certificate of CSR %s (is a kubelet-serving signer running, kube-controller-manager --cluster-signing-*?): %w", name, err)
	}
	return cert, nil
}

// approvable tells whether fleetlet approves a CSR: one the manager itself
// requested (identity), for the kubelet-serving signer, naming exactly
// system:node:<node> in group system:nodes, node's address and nothing
// else, with a serving certificate's usages. Anything else, a CSR someone
// else made for a virtual node included, is left alone.
func approvable(csr *certificatesv1.CertificateSigningRequest, identity, node string, address net.IP) error {
	if csr.Spec.Username != identity {
		return fmt.Errorf("requested by %q, not by the manager (%q)", csr.Spec.Username, identity)
	}
	if csr.Spec.SignerName != certificatesv1.KubeletServingSignerName {
		return fmt.Errorf("signer %q, not %s", csr.Spec.SignerName, certificatesv1.KubeletServingSignerName)
	}
	if !slices.Equal(csr.Spec.Usages, servingUsages) {
		return fmt.Errorf("usages %v, want %v", csr.Spec.Usages, servingUsages)
	}
	block, _ := pem.Decode(csr.Spec.Request)
	if block == nil || block.Type != "CERTIFICATE REQUEST" {
		return errors.New("the request is not a PEM certificate request")
	}
	req, err := x509.ParseCertificateRequest(block.Bytes)
	if err != nil {
		return err
	}
	if err := req.CheckSignature(); err != nil {
		return err
	}
	if req.Subject.CommonName != "system:node:"+node || !slices.Equal(req.Subject.Organization, []string{"system:nodes"}) {
		return fmt.Errorf("subject %q, want system:node:%s in system:nodes", req.Subject.String(), node)
	}
	if len(req.IPAddresses) != 1 || !req.IPAddresses[0].Equal(address) || len(req.DNSNames)+len(req.EmailAddresses)+len(req.URIs) > 0 {
		return fmt.Errorf("names %v %v, want exactly the node address %s", req.IPAddresses, req.DNSNames, address)
	}
	return nil
}
