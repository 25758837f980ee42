package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/fleetlet/fleetlet/pkg/source/webhook"
)

func parseWebhookFlags(t *testing.T, args ...string) (webhookOptions, error) {
	t.Helper()
	fs := pflag.NewFlagSet("manager", pflag.ContinueOnError)
	o := defaultWebhookOptions()
	addWebhookFlags(fs, &o)
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	return o, o.validate()
}

func TestWebhookFlagsDefaults(t *testing.T) {
	o, err := parseWebhookFlags(t)
	if err != nil {
		t.Fatalf("defaults do not validate: %v", err)
	}
	so := o.serverOptions("fleetlet-system", webhook.StaticKeys{Seal: make([]byte, webhook.MinKeyLength)})
	if so.URL != "" || !so.CertRotation || so.Port != webhook.DefaultPort || so.ServiceName != webhook.DefaultServiceName ||
		so.CertSecretName != webhook.DefaultCertSecretName || so.TimeoutSeconds != webhook.DefaultTimeoutSeconds {
		t.Errorf("defaults: %+v; want a Service reference with rotated certificates on %d", so, webhook.DefaultPort)
	}
	if o.sealKeySecretName != webhook.DefaultSealKeySecretName {
		t.Errorf("seal key Secret %q", o.sealKeySecretName)
	}
}

// The sandbox's configuration: the manager writes the configuration with
// a loopback URL.
func TestWebhookFlagsURLMode(t *testing.T) {
	o, err := parseWebhookFlags(t, "--webhook-url-mode", "--webhook-host", "127.0.0.1", "--webhook-port", "19443", "--webhook-timeout", "5s")
	if err != nil {
		t.Fatal(err)
	}
	so := o.serverOptions("fleetlet-system", webhook.StaticKeys{Seal: make([]byte, webhook.MinKeyLength)})
	if so.URL != "https://127.0.0.1:19443/mutate-pods" || so.Host != "127.0.0.1" || so.Port != 19443 || so.TimeoutSeconds != 5 {
		t.Errorf("URL %q, host %q, port %d, timeout %d", so.URL, so.Host, so.Port, so.TimeoutSeconds)
	}
	o, err = parseWebhookFlags(t, "--webhook-url-mode", "--webhook-host", "::1", "--webhook-port", "19443")
	if err != nil {
		t.Fatal(err)
	}
	if got := o.url(); got != "https://[::1]:19443/mutate-pods" {
		t.Errorf("IPv6 URL %q", got)
	}
}

func TestWebhookFlagsValidate(t *testing.T) {
	cases := map[string]struct {
		args []string
		want string
	}{
		"URL mode without a host":       {[]string{"--webhook-url-mode"}, "--webhook-host"},
		"URL mode on every interface":   {[]string{"--webhook-url-mode", "--webhook-host", "0.0.0.0"}, "--webhook-host"},
		"cert-manager without a folder": {[]string{"--webhook-cert-rotation=false"}, "certificate folder"},
		"renewal after the end":         {[]string{"--webhook-cert-validity", "24h", "--webhook-cert-renew-before", "48h"}, "renewed"},
		"a fraction of a second":        {[]string{"--webhook-timeout", "1500ms"}, "--webhook-timeout"},
		"a timeout too long":            {[]string{"--webhook-timeout", "1m"}, "timeout"},
		"not a port":                    {[]string{"--webhook-port", "0"}, "port"},
		"no seal key Secret":            {[]string{"--seal-key-secret", ""}, "--seal-key-secret"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := parseWebhookFlags(t, tc.args...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want one mentioning %q", err, tc.want)
			}
		})
	}
	// Disabled, nothing else matters.
	if _, err := parseWebhookFlags(t, "--webhook-enabled=false", "--webhook-url-mode"); err != nil {
		t.Errorf("disabled: %v", err)
	}
	// cert-manager: certificates from a folder.
	if _, err := parseWebhookFlags(t, "--webhook-cert-rotation=false", "--webhook-cert-dir", "/certs"); err != nil {
		t.Errorf("cert-manager: %v", err)
	}
}

func TestWebhookFlagsHaveHelp(t *testing.T) {
	fs := pflag.NewFlagSet("manager", pflag.ContinueOnError)
	o := defaultWebhookOptions()
	addWebhookFlags(fs, &o)
	n := 0
	fs.VisitAll(func(f *pflag.Flag) {
		n++
		if len(f.Usage) < 20 {
			t.Errorf("--%s: usage %q says too little", f.Name, f.Usage)
		}
	})
	if n < 10 {
		t.Errorf("%d flags", n)
	}
	if f := fs.Lookup("webhook-cert-renew-before"); f == nil || f.DefValue != (90*24*time.Hour).String() {
		t.Errorf("--webhook-cert-renew-before default %v", f)
	}
}

func TestSetupWebhookDisabled(t *testing.T) {
	o := defaultWebhookOptions()
	o.enabled = false
	if err := setupWebhook(context.Background(), nil, o, "fleetlet-system", nil); err != nil {
		t.Errorf("disabled: %v", err)
	}
}
