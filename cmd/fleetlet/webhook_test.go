package main

import (
	"context"
	"testing"
	"time"

	"github.com/spf13/pflag"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fleetlet/fleetlet/pkg/source/webhook"
)

func parseWebhookFlags(t *testing.T, args ...string) (webhookOptions, error) {
	t.Helper()
	fs := pflag.NewFlagSet("manager", pflag.ContinueOnError)
	o := defaultWebhookOptions()
	addWebhookFlags(fs, &o)
	require.NoError(t, fs.Parse(args))
	return o, o.validate()
}

func TestWebhookFlagsDefaults(t *testing.T) {
	o, err := parseWebhookFlags(t)
	require.NoError(t, err, "defaults do not validate")
	so := o.serverOptions("fleetlet-system", webhook.StaticKeys{Seal: make([]byte, webhook.MinKeyLength)})
	assert.Falsef(t, so.URL != "" || !so.CertRotation || so.Port != webhook.DefaultPort || so.ServiceName != webhook.DefaultServiceName ||
		so.CertSecretName != webhook.DefaultCertSecretName || so.TimeoutSeconds != webhook.DefaultTimeoutSeconds,
		"defaults: %+v; want a Service reference with rotated certificates on %d", so, webhook.DefaultPort)
	assert.Equal(t, webhook.DefaultSealKeySecretName, o.sealKeySecretName, "seal key Secret")
}

// The sandbox's configuration: the manager writes the configuration with
// a loopback URL.
func TestWebhookFlagsURLMode(t *testing.T) {
	o, err := parseWebhookFlags(t, "--webhook-url-mode", "--webhook-host", "127.0.0.1", "--webhook-port", "19443", "--webhook-timeout", "5s")
	require.NoError(t, err)
	so := o.serverOptions("fleetlet-system", webhook.StaticKeys{Seal: make([]byte, webhook.MinKeyLength)})
	assert.Falsef(t, so.URL != "https://127.0.0.1:19443/mutate-pods" || so.Host != "127.0.0.1" || so.Port != 19443 || so.TimeoutSeconds != 5, "URL %q, host %q, port %d, timeout %d", so.URL, so.Host, so.Port, so.TimeoutSeconds)
	o, err = parseWebhookFlags(t, "--webhook-url-mode", "--webhook-host", "::1", "--webhook-port", "19443")
	require.NoError(t, err)
	assert.Equal(t, "https://[::1]:19443/mutate-pods", o.url(), "IPv6 URL")
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
			assert.ErrorContainsf(t, err, tc.want, "err = %v, want one mentioning %q", err, tc.want)
		})
	}
	// Disabled, nothing else matters.
	_, err := parseWebhookFlags(t, "--webhook-enabled=false", "--webhook-url-mode")
	assert.NoError(t, err, "disabled")
	// cert-manager: certificates from a folder.
	_, err = parseWebhookFlags(t, "--webhook-cert-rotation=false", "--webhook-cert-dir", "/certs")
	assert.NoError(t, err, "cert-manager")
}

func TestWebhookFlagsHaveHelp(t *testing.T) {
	fs := pflag.NewFlagSet("manager", pflag.ContinueOnError)
	o := defaultWebhookOptions()
	addWebhookFlags(fs, &o)
	n := 0
	fs.VisitAll(func(f *pflag.Flag) {
		n++
		assert.GreaterOrEqualf(t, len(f.Usage), 20, "--%s: usage %q says too little", f.Name, f.Usage)
	})
	assert.GreaterOrEqual(t, n, 10, "flags")
	f := fs.Lookup("webhook-cert-renew-before")
	assert.Falsef(t, f == nil || f.DefValue != (90*24*time.Hour).String(), "--webhook-cert-renew-before default %v", f)
}

func TestSetupWebhookDisabled(t *testing.T) {
	o := defaultWebhookOptions()
	o.enabled = false
	assert.NoError(t, setupWebhook(context.Background(), nil, o, "fleetlet-system", nil), "disabled")
}
