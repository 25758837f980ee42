package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/spf13/pflag"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/fleetlet/fleetlet/pkg/source/webhook"
)

// webhookOptions are the flags of the proxy-pod webhook.
type webhookOptions struct {
	enabled bool

	host    string
	port    int
	urlMode bool
	timeout time.Duration

	certRotation      bool
	certDir           string
	serviceName       string
	certSecretName    string
	certValidity      time.Duration
	certRenewBefore   time.Duration
	certCheckInterval time.Duration

	sealKeySecretName string
}

func defaultWebhookOptions() webhookOptions {
	d := webhook.DefaultServerOptions()
	return webhookOptions{
		enabled:           true,
		port:              d.Port,
		timeout:           time.Duration(d.TimeoutSeconds) * time.Second,
		certRotation:      d.CertRotation,
		serviceName:       d.ServiceName,
		certSecretName:    d.CertSecretName,
		certValidity:      d.CertValidity,
		certRenewBefore:   d.CertRenewBefore,
		certCheckInterval: d.CertCheckInterval,
		sealKeySecretName: webhook.DefaultSealKeySecretName,
	}
}

// addWebhookFlags adds the webhook's flags to fs, with o's values as
// defaults (start from defaultWebhookOptions()).
func addWebhookFlags(fs *pflag.FlagSet, o *webhookOptions) {
	fs.BoolVar(&o.enabled, "webhook-enabled", o.enabled, "serve the proxy-pod webhook (pods CREATE in enabled namespaces)")
	fs.StringVar(&o.host, "webhook-host", o.host, "address the webhook server listens on (default: every interface); with --webhook-url-mode, also the address the API server calls")
	fs.IntVar(&o.port, "webhook-port", o.port, "port of the webhook server")
	fs.BoolVar(&o.urlMode, "webhook-url-mode", o.urlMode, "manage the MutatingWebhookConfiguration "+webhook.ConfigurationName+
		" here, with clientConfig.url https://<webhook-host>:<webhook-port>"+webhook.Path+" and this server's CA (a local cluster with no Service; otherwise the chart ships it with a Service reference)")
	fs.DurationVar(&o.timeout, "webhook-timeout", o.timeout, "the API server's timeout for one webhook call, in the configuration --webhook-url-mode writes (1s–30s)")
	fs.BoolVar(&o.certRotation, "webhook-cert-rotation", o.certRotation, "issue and rotate the webhook's certificate here (false: read tls.crt, tls.key and, with --webhook-url-mode, ca.crt from --webhook-cert-dir, e.g. from cert-manager)")
	fs.StringVar(&o.certDir, "webhook-cert-dir", o.certDir, "folder of the webhook's certificate (default with rotation: a new temporary folder)")
	fs.StringVar(&o.serviceName, "webhook-service-name", o.serviceName, "Service the API server calls the webhook through, in --namespace: the rotated certificate's name")
	fs.StringVar(&o.certSecretName, "webhook-cert-secret", o.certSecretName, "Secret in --namespace where rotated certificates are kept")
	fs.DurationVar(&o.certValidity, "webhook-cert-validity", o.certValidity, "how long a rotated serving certificate lasts")
	fs.DurationVar(&o.certRenewBefore, "webhook-cert-renew-before", o.certRenewBefore, "how long before its end a serving certificate is renewed")
	fs.DurationVar(&o.certCheckInterval, "webhook-cert-check-interval", o.certCheckInterval, "how often certificates are checked for renewal")
	fs.StringVar(&o.sealKeySecretName, "seal-key-secret", o.sealKeySecretName, "Secret in --namespace holding the key that seals multicluster.fleetlet.io/source-spec (created if missing; every replica shares it)")
}

// validate checks the flags that need no cluster.
func (o *webhookOptions) validate() error {
	if !o.enabled {
		return nil
	}
	var errs []error
	if o.sealKeySecretName == "" {
		errs = append(errs, errors.New("--seal-key-secret must not be empty"))
	}
	if o.urlMode {
		if ip := net.ParseIP(o.host); o.host == "" || (ip != nil && ip.IsUnspecified()) {
			errs = append(errs, fmt.Errorf("--webhook-url-mode needs --webhook-host to be an address the API server can call, not %q", o.host))
		}
	}
	if o.timeout%time.Second != 0 {
		errs = append(errs, fmt.Errorf("--webhook-timeout %s is not a whole number of seconds", o.timeout))
	}
	so := o.serverOptions("validate", webhook.StaticKeys{Seal: make([]byte, webhook.MinKeyLength)})
	if err := so.Validate(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// url is the webhook's URL in --webhook-url-mode.
func (o *webhookOptions) url() string {
	return "https://" + net.JoinHostPort(o.host, strconv.Itoa(o.port)) + webhook.Path
}

func (o *webhookOptions) serverOptions(namespace string, sealKeys webhook.KeySource) webhook.ServerOptions {
	so := webhook.ServerOptions{
		Namespace:         namespace,
		SealKeys:          sealKeys,
		Host:              o.host,
		Port:              o.port,
		CertRotation:      o.certRotation,
		CertDir:           o.certDir,
		ServiceName:       o.serviceName,
		CertSecretName:    o.certSecretName,
		CertValidity:      o.certValidity,
		CertRenewBefore:   o.certRenewBefore,
		CertCheckInterval: o.certCheckInterval,
		TimeoutSeconds:    int32(o.timeout / time.Second),
	}
	if o.urlMode {
		so.URL = o.url()
	}
	return so
}

// sealKeys returns the seal key set that seals and opens
// multicluster.fleetlet.io/source-spec, read from its Secret in
// fleetletNamespace now and every few seconds on every replica. A missing
// Secret is not fatal and is never replaced here: until it is back the
// webhook refuses proxy pods and no proxy is elected (fail closed), so
// replicas never disagree on a key one of them made.
func sealKeys(ctx context.Context, mgr ctrl.Manager, o webhookOptions, fleetletNamespace string) (*webhook.SecretKeys, error) {
	keys := webhook.NewSecretKeys(mgr.GetAPIReader(), fleetletNamespace, o.sealKeySecretName, nil)
	if err := keys.Load(ctx); err != nil && !errors.Is(err, webhook.ErrNoSealKey) {
		ctrl.Log.WithName("setup").Error(err, "Reading the seal keys; retrying in the background")
	}
	if err := mgr.Add(keys); err != nil {
		return nil, err
	}
	return keys, nil
}

// setupWebhook serves the proxy-pod webhook on every replica (not
// leader-elected), with its certificates and readyz checks ("webhook",
// "webhook-certs"); with --webhook-url-mode it also writes the
// MutatingWebhookConfiguration. sealKeys come from sealKeys. Call it
// before mgr.Start, and do not use mgr.GetWebhookServer() as well.
func setupWebhook(ctx context.Context, mgr ctrl.Manager, o webhookOptions, fleetletNamespace string, sealKeys webhook.KeySource) error {
	if !o.enabled {
		ctrl.Log.WithName("setup").Info("The proxy-pod webhook is disabled (--webhook-enabled=false)")
		return nil
	}
	if err := webhook.Setup(ctx, mgr, o.serverOptions(fleetletNamespace, sealKeys)); err != nil {
		return fmt.Errorf("setting up the proxy-pod webhook: %w", err)
	}
	return nil
}
