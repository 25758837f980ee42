package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/spf13/pflag"
	"k8s.io/apiserver/pkg/server/dynamiccertificates"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/fleetlet/fleetlet/pkg/proxy"
	"github.com/fleetlet/fleetlet/pkg/source/fleet"
	"github.com/fleetlet/fleetlet/pkg/source/kubeletapi"
)

// kubeletAPIOptions are the flags of the virtual nodes' kubelet API.
type kubeletAPIOptions struct {
	ports        string
	clientCAFile string
	serving      string
	certFile     string
	keyFile      string
}

// Sources of the kubelet APIs' serving certificates (--kubelet-serving-certificate).
const (
	servingCSR        = "csr"
	servingFiles      = "files"
	servingSelfSigned = "self-signed"
)

func defaultKubeletAPIOptions() kubeletAPIOptions {
	return kubeletAPIOptions{ports: "10250-10349", serving: servingCSR}
}

func addKubeletAPIFlags(fs *pflag.FlagSet, o *kubeletAPIOptions) {
	fs.StringVar(&o.ports, "kubelet-ports", o.ports, "ports the virtual nodes' kubelet APIs may listen on, one each (first-last, or 0 for any free port), on --node-address")
	fs.StringVar(&o.clientCAFile, "kubelet-client-ca-file", o.clientCAFile, "CA bundle that verifies client certificates of kubelet API callers (the API server's kubelet client certificate); empty: bearer tokens only")
	fs.StringVar(&o.serving, "kubelet-serving-certificate", o.serving, "where the kubelet APIs' serving certificates come from: "+servingCSR+
		" (one per node from the kubernetes.io/kubelet-serving signer, approved by the manager for its own nodes only), "+servingFiles+
		" (--kubelet-tls-cert-file and --kubelet-tls-private-key-file, reread when they change) or "+servingSelfSigned)
	fs.StringVar(&o.certFile, "kubelet-tls-cert-file", o.certFile, "serving certificate of the kubelet APIs, with --kubelet-serving-certificate="+servingFiles)
	fs.StringVar(&o.keyFile, "kubelet-tls-private-key-file", o.keyFile, "private key of --kubelet-tls-cert-file")
}

func (o *kubeletAPIOptions) validate() error {
	var errs []error
	if _, err := kubeletapi.ParsePortRange(o.ports); err != nil {
		errs = append(errs, fmt.Errorf("--kubelet-ports: %w", err))
	}
	switch o.serving {
	case servingFiles:
		if o.certFile == "" || o.keyFile == "" {
			errs = append(errs, errors.New("--kubelet-serving-certificate="+servingFiles+" needs --kubelet-tls-cert-file and --kubelet-tls-private-key-file"))
		}
	case servingCSR, servingSelfSigned:
		if o.certFile != "" || o.keyFile != "" {
			errs = append(errs, errors.New("--kubelet-tls-cert-file and --kubelet-tls-private-key-file go with --kubelet-serving-certificate="+servingFiles))
		}
	default:
		errs = append(errs, fmt.Errorf("--kubelet-serving-certificate=%q: want %s, %s or %s", o.serving, servingCSR, servingFiles, servingSelfSigned))
	}
	return errors.Join(errs...)
}

// newKubeletAPI builds the kubelet API server of the virtual nodes, which
// reaches delegates through the targets of reg (set before any request).
func newKubeletAPI(ctx context.Context, mgr ctrl.Manager, cs kubernetes.Interface, o kubeletAPIOptions, address string, reg *registryTargets) (*kubeletapi.Server, error) {
	ports, err := kubeletapi.ParsePortRange(o.ports)
	if err != nil {
		return nil, err
	}
	var clientCA dynamiccertificates.CAContentProvider
	if o.clientCAFile != "" {
		ca, err := dynamiccertificates.NewDynamicCAContentFromFile("kubelet-client-ca", o.clientCAFile)
		if err != nil {
			return nil, fmt.Errorf("--kubelet-client-ca-file: %w", err)
		}
		go ca.Run(ctx, 1)
		clientCA = ca
	}
	auth, err := kubeletapi.NewAuth(cs, clientCA)
	if err != nil {
		return nil, err
	}
	var certs kubeletapi.Certificates
	switch o.serving {
	case servingFiles:
		certs, err = kubeletapi.FromFiles(ctx, o.certFile, o.keyFile)
	case servingSelfSigned:
		certs, err = kubeletapi.SelfSigned(address)
	default:
		certs, err = kubeletapi.NewCSRCertificates(ctx, cs, address)
	}
	if err != nil {
		return nil, fmt.Errorf("the kubelet API's serving certificate: %w", err)
	}
	return kubeletapi.NewServer(kubeletapi.Config{
		Source:       mgr.GetClient(),
		Targets:      reg,
		Auth:         auth,
		Certificates: certs,
		Address:      address,
		Ports:        ports,
	})
}

// registryTargets gives the kubelet API the targets' clients from the
// target registry.
type registryTargets struct{ reg *fleet.Registry }

func (t *registryTargets) TargetConfig(namespace, name string) (*rest.Config, bool) {
	if t.reg == nil {
		return nil, false
	}
	cl, ok := t.reg.Get(proxy.TargetKey{Namespace: namespace, Name: name})
	if !ok {
		return nil, false
	}
	return cl.Config(), true
}
