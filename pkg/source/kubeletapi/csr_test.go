package kubeletapi

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/fleetlet/fleetlet/pkg/testenv"
)

// csrFor builds a CSR as username would send it.
func csrFor(t *testing.T, username, cn string, org []string, ips []net.IP, dns []string, usages []certificatesv1.KeyUsage) *certificatesv1.CertificateSigningRequest {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
		Subject: pkix.Name{CommonName: cn, Organization: org}, IPAddresses: ips, DNSNames: dns}, key)
	require.NoError(t, err)
	return &certificatesv1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "csr-"},
		Spec: certificatesv1.CertificateSigningRequestSpec{
			Request:    pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}),
			SignerName: certificatesv1.KubeletServingSignerName,
			Usages:     usages,
			Username:   username,
		},
	}
}

func TestApprovable(t *testing.T) {
	addr := net.ParseIP("10.0.0.7")
	ips := []net.IP{addr}
	me, node, nodes := "system:serviceaccount:fleetlet-system:fleetlet-manager", "fleetlet-cluster-2", []string{"system:nodes"}
	ok := func(t *testing.T) *certificatesv1.CertificateSigningRequest {
		return csrFor(t, me, "system:node:"+node, nodes, ips, nil, servingUsages)
	}
	cases := map[string]func(t *testing.T) *certificatesv1.CertificateSigningRequest{
		"requested by someone else": func(t *testing.T) *certificatesv1.CertificateSigningRequest {
			return csrFor(t, "mallory", "system:node:"+node, nodes, ips, nil, servingUsages)
		},
		"another node": func(t *testing.T) *certificatesv1.CertificateSigningRequest {
			return csrFor(t, me, "system:node:real-node", nodes, ips, nil, servingUsages)
		},
		"another group": func(t *testing.T) *certificatesv1.CertificateSigningRequest {
			return csrFor(t, me, "system:node:"+node, []string{"system:masters"}, ips, nil, servingUsages)
		},
		"another address": func(t *testing.T) *certificatesv1.CertificateSigningRequest {
			return csrFor(t, me, "system:node:"+node, nodes, []net.IP{net.ParseIP("10.0.0.8")}, nil, servingUsages)
		},
		"a DNS name too": func(t *testing.T) *certificatesv1.CertificateSigningRequest {
			return csrFor(t, me, "system:node:"+node, nodes, ips, []string{"kubernetes.default"}, servingUsages)
		},
		"client usages": func(t *testing.T) *certificatesv1.CertificateSigningRequest {
			return csrFor(t, me, "system:node:"+node, nodes, ips, nil, []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageClientAuth})
		},
		"another signer": func(t *testing.T) *certificatesv1.CertificateSigningRequest {
			c := ok(t)
			c.Spec.SignerName = certificatesv1.KubeAPIServerClientSignerName
			return c
		},
		"not a request": func(t *testing.T) *certificatesv1.CertificateSigningRequest {
			c := ok(t)
			c.Spec.Request = []byte("garbage")
			return c
		},
	}
	assert.NoError(t, approvable(ok(t), me, node, addr), "the manager's own CSR for its node")
	for name, build := range cases {
		assert.Error(t, approvable(build(t), me, node, addr), "%s: approvable", name)
	}
}

// signer plays the kubelet-serving signer: it issues every approved CSR
// of that signer with a CA of its own, until ctx ends.
func signer(t *testing.T, ctx context.Context, cs kubernetes.Interface) *x509.CertPool {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test kubelet-serving CA"}, IsCA: true,
		BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign, NotBefore: time.Now().Add(-time.Minute), NotAfter: time.Now().Add(time.Hour)}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	require.NoError(t, err)
	ca, _ := x509.ParseCertificate(caDER)
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	go func() {
		for ctx.Err() == nil {
			list, err := cs.CertificatesV1().CertificateSigningRequests().List(ctx, metav1.ListOptions{})
			if err == nil {
				for i := range list.Items {
					sign(ctx, cs, &list.Items[i], ca, caKey)
				}
			}
			time.Sleep(100 * time.Millisecond)
		}
	}()
	return pool
}

func sign(ctx context.Context, cs kubernetes.Interface, csr *certificatesv1.CertificateSigningRequest, ca *x509.Certificate, caKey *ecdsa.PrivateKey) {
	approved := false
	for _, c := range csr.Status.Conditions {
		approved = approved || (c.Type == certificatesv1.CertificateApproved && c.Status == corev1.ConditionTrue)
	}
	if !approved || len(csr.Status.Certificate) > 0 {
		return
	}
	block, _ := pem.Decode(csr.Spec.Request)
	req, err := x509.ParseCertificateRequest(block.Bytes)
	if err != nil {
		return
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: req.Subject, IPAddresses: req.IPAddresses,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, KeyUsage: x509.KeyUsageDigitalSignature,
		NotBefore: time.Now().Add(-time.Minute), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, req.PublicKey, caKey)
	if err != nil {
		return
	}
	csr.Status.Certificate = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	_, _ = cs.CertificatesV1().CertificateSigningRequests().UpdateStatus(ctx, csr, metav1.UpdateOptions{})
}

// TestCSRFlow: the manager requests and approves a kubelet-serving
// certificate for its own node only; a CSR someone else made for that node
// is left alone.
func TestCSRFlow(t *testing.T) {
	testenv.Need(t, env)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cs, err := kubernetes.NewForConfig(env.Config)
	require.NoError(t, err)
	pool := signer(t, ctx, cs)

	mallorys := rest.CopyConfig(env.Config)
	mallorys.Impersonate = rest.ImpersonationConfig{UserName: "mallory", Groups: []string{"system:masters"}}
	mallory, err := kubernetes.NewForConfig(mallorys)
	require.NoError(t, err)
	const node = "fleetlet-csr-target"
	forged, err := mallory.CertificatesV1().CertificateSigningRequests().Create(ctx,
		csrFor(t, "", "system:node:"+node, []string{"system:nodes"}, []net.IP{net.ParseIP("127.0.0.1")}, nil, servingUsages), metav1.CreateOptions{})
	require.NoError(t, err)

	certs, err := NewCSRCertificates(ctx, cs, "127.0.0.1")
	require.NoError(t, err)
	_, err = certs.Certificate(node)
	assert.Error(t, err, "a certificate before Start")
	nodeCtx, stopNode := context.WithCancel(ctx)
	certs.Start(nodeCtx, node)
	testenv.Eventually(t, 30*time.Second, "the node's serving certificate", func() error {
		_, err := certs.Certificate(node)
		return err
	})
	cert, _ := certs.Certificate(node)
	_, err = cert.Leaf.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
	assert.NoError(t, err, "the certificate does not verify against the signer's CA")
	err = cert.Leaf.VerifyHostname("127.0.0.1")
	assert.Falsef(t, err != nil || cert.Leaf.Subject.CommonName != "system:node:"+node, "certificate for %q: %v", cert.Leaf.Subject.CommonName, err)

	list, err := cs.CertificatesV1().CertificateSigningRequests().List(ctx, metav1.ListOptions{LabelSelector: labelNode + "=" + node})
	require.Falsef(t, err != nil || len(list.Items) != 1, "the manager's CSRs for %s: %v, %v", node, len(list.Items), err)
	c := list.Items[0].Status.Conditions
	assert.Falsef(t, len(c) == 0 || c[0].Type != certificatesv1.CertificateApproved || c[0].Reason != ReasonApproved, "the manager's CSR: conditions %+v", c)
	got, err := cs.CertificatesV1().CertificateSigningRequests().Get(ctx, forged.Name, metav1.GetOptions{})
	require.NoError(t, err)
	assert.Falsef(t, len(got.Status.Conditions) != 0 || len(got.Status.Certificate) != 0, "mallory's CSR for the virtual node was touched: %+v", got.Status)

	stopNode()
	testenv.Eventually(t, 10*time.Second, "the certificate to be dropped with the node", func() error {
		if _, err := certs.Certificate(node); err == nil {
			return errors.New("the certificate is still served")
		}
		return nil
	})
}
