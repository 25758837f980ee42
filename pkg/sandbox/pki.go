package sandbox

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// certValidity is how long every sandbox certificate is valid. A sandbox is a
// development tool; ten years means a long-lived sandbox never breaks on expiry.
const certValidity = 10 * 365 * 24 * time.Hour

// keyPair is a certificate with its private key, PEM encoded.
type keyPair struct {
	CertPEM []byte
	KeyPEM  []byte
}

// authority signs the certificates of one sandbox cluster.
type authority struct {
	cert *x509.Certificate
	key  crypto.Signer
	keyPair
}

// newAuthority creates a self-signed certificate authority.
func newAuthority(commonName string) (*authority, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generating CA key: %w", err)
	}
	serial, err := newSerial()
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: commonName},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(certValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, fmt.Errorf("signing CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	keyPEM, err := encodeKey(key)
	if err != nil {
		return nil, err
	}
	return &authority{
		cert:    cert,
		key:     key,
		keyPair: keyPair{CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), KeyPEM: keyPEM},
	}, nil
}

// certRequest describes a certificate to issue.
type certRequest struct {
	CommonName   string
	Organization []string
	DNSNames     []string
	IPs          []net.IP
	Server       bool
	Client       bool
}

// issue signs a new key pair for req.
func (a *authority) issue(req certRequest) (keyPair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return keyPair{}, fmt.Errorf("generating key for %q: %w", req.CommonName, err)
	}
	serial, err := newSerial()
	if err != nil {
		return keyPair{}, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: req.CommonName, Organization: req.Organization},
		DNSNames:     req.DNSNames,
		IPAddresses:  req.IPs,
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(certValidity),
		KeyUsage:     x509.KeyUsageDigitalSignature,
	}
	if req.Server {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageServerAuth)
	}
	if req.Client {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageClientAuth)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, a.cert, key.Public(), a.key)
	if err != nil {
		return keyPair{}, fmt.Errorf("signing certificate for %q: %w", req.CommonName, err)
	}
	keyPEM, err := encodeKey(key)
	if err != nil {
		return keyPair{}, err
	}
	return keyPair{CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), KeyPEM: keyPEM}, nil
}

// write stores the pair as <dir>/<name>.crt and <dir>/<name>.key.
func (p keyPair) write(dir, name string) error {
	if err := os.WriteFile(filepath.Join(dir, name+".crt"), p.CertPEM, 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, name+".key"), p.KeyPEM, 0o600)
}

// frontProxyClient is the apiserver's identity towards aggregated servers.
const frontProxyClient = "front-proxy-client"

// writeFrontProxyPKI writes the aggregation layer's own CA
// (front-proxy-ca), kept apart from the cluster CA as in kubeadm so that no
// ordinary client certificate can assert a user in request headers, and the
// client pair the apiserver proxies with.
func writeFrontProxyPKI(c *ClusterState) error {
	ca, err := newAuthority(c.Name + "-front-proxy-ca")
	if err != nil {
		return err
	}
	if err := ca.write(filepath.Join(c.DataDir, pkiDir), "front-proxy-ca"); err != nil {
		return err
	}
	kp, err := ca.issue(certRequest{CommonName: frontProxyClient, Client: true})
	if err != nil {
		return err
	}
	return kp.write(filepath.Join(c.DataDir, pkiDir), frontProxyClient)
}

// newServiceAccountKey returns the PEM private and public keys the apiserver
// signs service-account tokens with.
func newServiceAccountKey() (private, public []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("generating service-account key: %w", err)
	}
	private, err = encodeKey(key)
	if err != nil {
		return nil, nil, err
	}
	der, err := x509.MarshalPKIXPublicKey(key.Public())
	if err != nil {
		return nil, nil, err
	}
	return private, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}), nil
}

func encodeKey(key *ecdsa.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("encoding key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), nil
}

func newSerial() (*big.Int, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, fmt.Errorf("generating serial number: %w", err)
	}
	return serial, nil
}
