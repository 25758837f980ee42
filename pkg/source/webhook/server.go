package webhook

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sync/atomic"
	"time"

	"github.com/open-policy-agent/cert-controller/pkg/rotator"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/retry"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	crwebhook "sigs.k8s.io/controller-runtime/pkg/webhook"
)

// Defaults of ServerOptions.
const (
	DefaultPort              = 9443
	DefaultServiceName       = "fleetlet-webhook"
	DefaultCertSecretName    = "fleetlet-webhook-cert"
	DefaultSealKeySecretName = "fleetlet-seal-key"
	DefaultCertValidity      = 365 * 24 * time.Hour
	DefaultCertRenewBefore   = 90 * 24 * time.Hour
	DefaultCertCheckInterval = 12 * time.Hour
	// caValidity is how long a CA fleetlet issues lasts.
	caValidity = 10 * 365 * 24 * time.Hour
)

// Names of the files in the certificate folder (cert-controller's and
// cert-manager's).
const (
	certFile = "tls.crt"
	keyFile  = "tls.key"
	caFile   = "ca.crt"
)

// ServerOptions configure Setup.
type ServerOptions struct {
	// Namespace is fleetlet's namespace: the certificate Secret is there,
	// and its pods are never mutated.
	Namespace string
	// SealKeys give the keys that seal the source specs (SecretKeys).
	SealKeys KeySource
	// Host and Port are where the webhook server listens (Host empty: every
	// interface).
	Host string
	Port int
	// URL, when set, is the webhook's address as the API server calls it
	// (https://127.0.0.1:9443/mutate-pods in the local sandbox, where no
	// Service exists): the manager then creates or updates the
	// MutatingWebhookConfiguration itself, with this URL and its CA.
	// Otherwise the chart ships it with a Service reference.
	URL string
	// CertRotation makes the manager issue and rotate its serving
	// certificate. In a cluster that is cert-controller's rotator: the
	// Secret CertSecretName, for the Service ServiceName, and the CA bundle
	// injected into the MutatingWebhookConfiguration; with a URL it is an
	// in-memory CA whose certificate names the URL's host. Without it, the
	// certificate is read from CertDir (tls.crt, tls.key, and ca.crt for a
	// URL), written there by cert-manager or anyone else, and reloaded
	// when it changes.
	CertRotation bool
	// CertDir is the certificate folder. With rotation in a cluster the
	// manager writes the Secret's certificate there (default: a new
	// temporary folder).
	CertDir string
	// ServiceName and CertSecretName: see CertRotation.
	ServiceName    string
	CertSecretName string
	// CertValidity is how long a serving certificate lasts,
	// CertRenewBefore how long before its end a new one is issued, and
	// CertCheckInterval how often that is checked.
	CertValidity      time.Duration
	CertRenewBefore   time.Duration
	CertCheckInterval time.Duration
	// TimeoutSeconds is the API server's timeout for one call, in the
	// MutatingWebhookConfiguration the manager manages (URL set).
	TimeoutSeconds int32
	// ConfigurationName is the MutatingWebhookConfiguration's name
	// (default ConfigurationName).
	ConfigurationName string
}

// DefaultServerOptions returns the defaults: rotation on, a Service
// reference, port 9443.
func DefaultServerOptions() ServerOptions {
	return ServerOptions{
		Port:              DefaultPort,
		CertRotation:      true,
		ServiceName:       DefaultServiceName,
		CertSecretName:    DefaultCertSecretName,
		CertValidity:      DefaultCertValidity,
		CertRenewBefore:   DefaultCertRenewBefore,
		CertCheckInterval: DefaultCertCheckInterval,
		TimeoutSeconds:    DefaultTimeoutSeconds,
		ConfigurationName: ConfigurationName,
	}
}

// Validate checks the options.
func (o *ServerOptions) Validate() error {
	var errs []error
	if o.Namespace == "" {
		errs = append(errs, errors.New("the webhook needs fleetlet's namespace"))
	}
	if o.SealKeys == nil {
		errs = append(errs, errors.New("a seal key source is required"))
	}
	if o.Port <= 0 || o.Port > 65535 {
		errs = append(errs, fmt.Errorf("webhook port %d is not a port", o.Port))
	}
	if o.URL != "" {
		u, err := url.Parse(o.URL)
		if err != nil || u.Scheme != "https" || u.Hostname() == "" {
			errs = append(errs, fmt.Errorf("webhook URL %q is not an https URL with a host", o.URL))
		}
	}
	if o.CertRotation {
		if o.URL == "" && (o.ServiceName == "" || o.CertSecretName == "") {
			errs = append(errs, errors.New("certificate rotation for a Service needs its name and the certificate Secret's name"))
		}
		if o.CertValidity <= 0 || o.CertRenewBefore <= 0 || o.CertCheckInterval <= 0 {
			errs = append(errs, errors.New("certificate validity, renew-before and check interval must be positive"))
		}
		if o.CertRenewBefore >= o.CertValidity {
			errs = append(errs, fmt.Errorf("certificates renewed %s before their end cannot last only %s", o.CertRenewBefore, o.CertValidity))
		}
	} else if o.CertDir == "" {
		errs = append(errs, errors.New("without certificate rotation the webhook needs a certificate folder"))
	}
	if o.TimeoutSeconds < 1 || o.TimeoutSeconds > 30 {
		errs = append(errs, fmt.Errorf("webhook timeout %ds is outside 1–30 s", o.TimeoutSeconds))
	}
	return errors.Join(errs...)
}

// Setup adds the proxy-pod webhook to mgr: its own webhook server (not
// leader-elected: every replica serves), the handler at Path, the
// certificates as ServerOptions.CertRotation says, the
// MutatingWebhookConfiguration when a URL is given, and two readyz checks:
// "webhook" (the server answers TLS) and "webhook-certs" (the certificate
// is issued and the API server trusts it). Do not also use
// mgr.GetWebhookServer(): it would serve on the same port.
func Setup(ctx context.Context, mgr ctrl.Manager, o ServerOptions) error {
	if err := o.Validate(); err != nil {
		return err
	}
	if o.ConfigurationName == "" {
		o.ConfigurationName = ConfigurationName
	}
	log := ctrl.Log.WithName("webhook")

	// The handler reads Node metadata from the manager's cache; the
	// informer is registered now, so it syncs with the cache.
	node := &metav1.PartialObjectMetadata{}
	node.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Node"))
	if _, err := mgr.GetCache().GetInformer(ctx, node); err != nil {
		return fmt.Errorf("watching node metadata: %w", err)
	}
	handler, err := NewHandler(o.SealKeys, mgr.GetCache(), mgr.GetAPIReader())
	if err != nil {
		return err
	}

	serverOpts := crwebhook.Options{
		Host:    o.Host,
		Port:    o.Port,
		CertDir: o.CertDir,
		TLSOpts: []func(*tls.Config){func(c *tls.Config) {
			// HTTP/2 off (CVE-2023-44487, rapid reset): the API server
			// speaks HTTP/1.1 to webhooks just as well.
			c.NextProtos = []string{"http/1.1"}
		}},
	}
	var holder *certHolder
	if o.CertRotation {
		holder = &certHolder{}
		serverOpts.TLSOpts = append(serverOpts.TLSOpts, func(c *tls.Config) { c.GetCertificate = holder.GetCertificate })
	}

	var certsReady func() error
	switch {
	case o.URL != "":
		r, err := newURLConfigurator(mgr, o, holder)
		if err != nil {
			return err
		}
		if err := mgr.Add(r); err != nil {
			return err
		}
		certsReady = r.readyCheck
	case o.CertRotation:
		ready, err := addRotator(ctx, mgr, o, holder)
		if err != nil {
			return err
		}
		certsReady = func() error {
			select {
			case <-ready:
				return nil
			default:
				return errors.New("the webhook certificate is not issued and injected yet")
			}
		}
	default:
		certsReady = func() error { return nil } // the server reads the folder at start
	}

	server := crwebhook.NewServer(serverOpts)
	server.Register(Path, &crwebhook.Admission{Handler: handler})
	if err := mgr.Add(server); err != nil {
		return fmt.Errorf("adding the webhook server: %w", err)
	}
	if err := mgr.AddReadyzCheck("webhook", server.StartedChecker()); err != nil {
		return err
	}
	if err := mgr.AddReadyzCheck("webhook-certs", func(*http.Request) error { return certsReady() }); err != nil {
		return err
	}
	log.Info("Serving the proxy-pod webhook", "address", net.JoinHostPort(o.Host, fmt.Sprint(o.Port)), "path", Path,
		"url", o.URL, "certRotation", o.CertRotation, "certDir", o.CertDir)
	return nil
}

// addRotator sets up cert-controller's rotator for a webhook reached
// through a Service: it keeps a CA and a serving certificate in the Secret
// CertSecretName and injects the CA into the MutatingWebhookConfiguration.
// Every replica runs one (they agree through the Secret's
// resourceVersion); each copies the Secret's certificate into its server
// (and CertDir, where the rotator looks for it).
func addRotator(ctx context.Context, mgr ctrl.Manager, o ServerOptions, holder *certHolder) (<-chan struct{}, error) {
	if o.CertDir == "" {
		dir, err := os.MkdirTemp("", "fleetlet-webhook-certs-")
		if err != nil {
			return nil, err
		}
		o.CertDir = dir
	}
	key := types.NamespacedName{Namespace: o.Namespace, Name: o.CertSecretName}
	// The rotator needs the Secret to exist (the chart may ship it empty).
	if err := mgr.GetAPIReader().Get(ctx, key, &corev1.Secret{}); apierrors.IsNotFound(err) {
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name,
			Labels: map[string]string{"app.kubernetes.io/part-of": "fleetlet", "app.kubernetes.io/component": "webhook"}}}
		if err := mgr.GetClient().Create(ctx, s); err != nil && !apierrors.IsAlreadyExists(err) {
			return nil, fmt.Errorf("creating the webhook certificate Secret %s: %w", key, err)
		}
	} else if err != nil {
		return nil, fmt.Errorf("reading the webhook certificate Secret %s: %w", key, err)
	}
	svc := o.ServiceName + "." + o.Namespace + ".svc"
	ready := make(chan struct{})
	err := rotator.AddRotator(mgr, &rotator.CertRotator{
		SecretKey:              key,
		CertDir:                o.CertDir,
		CAName:                 "fleetlet-webhook-ca",
		CAOrganization:         "fleetlet",
		DNSName:                svc,
		ExtraDNSNames:          []string{svc + ".cluster.local", o.ServiceName + "." + o.Namespace, o.ServiceName},
		IsReady:                ready,
		Webhooks:               []rotator.WebhookInfo{{Name: o.ConfigurationName, Type: rotator.Mutating}},
		FieldOwner:             "fleetlet-manager",
		RequireLeaderElection:  false,
		EnableReadinessCheck:   true,
		ServerCertDuration:     o.CertValidity,
		LookaheadInterval:      o.CertRenewBefore,
		RotationCheckFrequency: o.CertCheckInterval,
		ControllerName:         "fleetlet-webhook-cert-rotator",
	})
	if err != nil {
		return nil, fmt.Errorf("setting up the certificate rotator: %w", err)
	}
	cs, err := kubernetes.NewForConfig(mgr.GetConfig())
	if err != nil {
		return nil, err
	}
	if err := mgr.Add(&secretSync{client: cs, key: key, dir: o.CertDir, holder: holder}); err != nil {
		return nil, err
	}
	return ready, nil
}

// secretSync copies the certificate in the rotator's Secret into the
// server and the certificate folder, whenever it changes: no restart, no
// wait for a mounted Secret volume to refresh.
type secretSync struct {
	client kubernetes.Interface
	key    types.NamespacedName
	dir    string
	holder *certHolder
}

// NeedLeaderElection: every replica serves.
func (s *secretSync) NeedLeaderElection() bool { return false }

func (s *secretSync) Start(ctx context.Context) error {
	log := ctrl.Log.WithName("webhook").WithValues("secret", s.key)
	factory := informers.NewSharedInformerFactoryWithOptions(s.client, 0,
		informers.WithNamespace(s.key.Namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", s.key.Name).String()
		}))
	informer := factory.Core().V1().Secrets().Informer()
	update := func(obj any) {
		secret, ok := obj.(*corev1.Secret)
		if !ok || len(secret.Data[certFile]) == 0 || len(secret.Data[keyFile]) == 0 {
			return
		}
		if err := s.holder.set(secret.Data[certFile], secret.Data[keyFile]); err != nil {
			log.Error(err, "Loading the webhook certificate")
			return
		}
		// Key first: a reader that sees the new certificate finds its key.
		if err := writeFileIfChanged(s.dir, keyFile, secret.Data[keyFile], 0o600); err != nil {
			log.Error(err, "Writing the webhook certificate", "dir", s.dir)
			return
		}
		if err := writeFileIfChanged(s.dir, certFile, secret.Data[certFile], 0o644); err != nil {
			log.Error(err, "Writing the webhook certificate", "dir", s.dir)
			return
		}
		log.V(1).Info("Loaded the webhook certificate", "notAfter", s.holder.notAfter())
	}
	if _, err := informer.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    update,
		UpdateFunc: func(_, obj any) { update(obj) },
	}); err != nil {
		return err
	}
	factory.Start(ctx.Done())
	<-ctx.Done()
	factory.Shutdown()
	return nil
}

// urlConfigurator keeps, for a webhook reached by URL, the serving
// certificate (issued by an in-memory CA, renewed before its end) and the
// MutatingWebhookConfiguration with that URL and CA.
type urlConfigurator struct {
	mgr    ctrl.Manager
	o      ServerOptions
	holder *certHolder // nil: certificates come from CertDir
	host   string
	ready  atomic.Bool

	// ca issues the serving certificates; previousCA (PEM) is the one it
	// replaced, still trusted by the configuration.
	ca         *localCA
	previousCA []byte
}

func newURLConfigurator(mgr ctrl.Manager, o ServerOptions, holder *certHolder) (*urlConfigurator, error) {
	u, err := url.Parse(o.URL)
	if err != nil {
		return nil, err
	}
	r := &urlConfigurator{mgr: mgr, o: o, holder: holder, host: u.Hostname()}
	if holder != nil {
		// Issued now, so the server has a certificate from its start.
		now := time.Now()
		if err := r.newCA(now); err != nil {
			return nil, err
		}
		if err := r.issue(now); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// NeedLeaderElection: every replica serves.
func (r *urlConfigurator) NeedLeaderElection() bool { return false }

func (r *urlConfigurator) readyCheck() error {
	if !r.ready.Load() {
		return errors.New("the MutatingWebhookConfiguration does not trust this server yet")
	}
	return nil
}

// newCA makes a new CA; the previous one stays in the CA bundle.
func (r *urlConfigurator) newCA(now time.Time) error {
	ca, err := newLocalCA(now, caValidity)
	if err != nil {
		return err
	}
	if r.ca != nil {
		r.previousCA = r.ca.certPEM
	}
	r.ca = ca
	return nil
}

// issue issues a new serving certificate.
func (r *urlConfigurator) issue(now time.Time) error {
	certPEM, keyPEM, err := r.ca.issue([]string{r.host}, now, r.o.CertValidity)
	if err != nil {
		return err
	}
	return r.holder.set(certPEM, keyPEM)
}

func (r *urlConfigurator) caBundle() ([]byte, error) {
	if r.holder != nil {
		return append(slices.Clone(r.ca.certPEM), r.previousCA...), nil
	}
	ca, err := os.ReadFile(filepath.Join(r.o.CertDir, caFile))
	if err != nil {
		return nil, fmt.Errorf("reading the CA bundle for the webhook configuration: %w", err)
	}
	return ca, nil
}

func (r *urlConfigurator) Start(ctx context.Context) error {
	log := ctrl.Log.WithName("webhook")
	backoff := wait.Backoff{Duration: 500 * time.Millisecond, Factor: 2, Steps: 1 << 30, Cap: 30 * time.Second}
	configure := func() {
		_ = wait.ExponentialBackoffWithContext(ctx, backoff, func(ctx context.Context) (bool, error) {
			if err := r.configure(ctx); err != nil {
				log.Error(err, "Writing the MutatingWebhookConfiguration; retrying", "name", r.o.ConfigurationName)
				return false, nil
			}
			return true, nil
		})
	}
	configure()
	if ctx.Err() != nil {
		return nil
	}
	r.ready.Store(true)
	if r.holder == nil {
		<-ctx.Done()
		return nil
	}
	ticker := time.NewTicker(r.o.CertCheckInterval)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C:
		}
		now := time.Now()
		renew, newCA := r.due(now)
		if newCA {
			// The configuration trusts the new CA (and still the old)
			// before the server presents a certificate it signed.
			log.Info("Renewing the webhook CA")
			if err := r.newCA(now); err != nil {
				log.Error(err, "Renewing the webhook CA")
				continue
			}
			configure()
		}
		if renew {
			log.Info("Renewing the webhook certificate", "notAfter", r.holder.notAfter())
			if err := r.issue(now); err != nil {
				log.Error(err, "Renewing the webhook certificate")
			}
		}
	}
}

// due says whether the serving certificate, and the CA, end within
// CertRenewBefore of now.
func (r *urlConfigurator) due(now time.Time) (renew, newCA bool) {
	end := now.Add(r.o.CertRenewBefore)
	newCA = end.After(r.ca.cert.NotAfter)
	return newCA || end.After(r.holder.notAfter()), newCA
}

// configure creates or updates the MutatingWebhookConfiguration.
func (r *urlConfigurator) configure(ctx context.Context) error {
	ca, err := r.caBundle()
	if err != nil {
		return err
	}
	url := r.o.URL
	want := MutatingWebhookConfiguration(ConfigurationOptions{
		Name:              r.o.ConfigurationName,
		FleetletNamespace: r.o.Namespace,
		ClientConfig:      admissionregistrationv1.WebhookClientConfig{URL: &url, CABundle: ca},
		TimeoutSeconds:    r.o.TimeoutSeconds,
	})
	c := r.mgr.GetClient()
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		got := &admissionregistrationv1.MutatingWebhookConfiguration{}
		err := r.mgr.GetAPIReader().Get(ctx, client.ObjectKey{Name: r.o.ConfigurationName}, got)
		if apierrors.IsNotFound(err) {
			return c.Create(ctx, want)
		}
		if err != nil {
			return err
		}
		got.Webhooks = want.Webhooks
		if got.Labels == nil {
			got.Labels = map[string]string{}
		}
		for k, v := range want.Labels {
			got.Labels[k] = v
		}
		return c.Update(ctx, got)
	})
}

var (
	_ manager.LeaderElectionRunnable = &secretSync{}
	_ manager.LeaderElectionRunnable = &urlConfigurator{}
)
