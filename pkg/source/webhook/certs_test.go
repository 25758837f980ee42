package webhook

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// In URL mode the manager renews its serving certificate before its end,
// and its CA before the CA's, keeping the old CA trusted meanwhile.
func TestURLModeRenewal(t *testing.T) {
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	r := &urlConfigurator{
		o:      ServerOptions{CertValidity: time.Hour, CertRenewBefore: 10 * time.Minute},
		holder: &certHolder{},
		host:   "127.0.0.1",
	}
	require.NoError(t, r.newCA(now))
	require.NoError(t, r.issue(now))
	firstEnd := r.holder.notAfter()
	renew, newCA := r.due(now.Add(49 * time.Minute))
	assert.Falsef(t, renew || newCA, "49 min in: renew %v, new CA %v; want neither", renew, newCA)
	renew, newCA = r.due(now.Add(51 * time.Minute))
	require.Falsef(t, !renew || newCA, "51 min in: renew %v, new CA %v; want a new certificate only", renew, newCA)
	require.NoError(t, r.issue(now.Add(51*time.Minute)))
	assert.Falsef(t, !r.holder.notAfter().After(firstEnd), "the new certificate ends %s, not after the first (%s)", r.holder.notAfter(), firstEnd)

	// Near the CA's end: a new CA, and both in the bundle.
	old := r.ca.certPEM
	late := r.ca.cert.NotAfter.Add(-5 * time.Minute)
	renew, newCA = r.due(late)
	require.Falsef(t, !renew || !newCA, "near the CA's end: renew %v, new CA %v; want both", renew, newCA)
	require.NoError(t, r.newCA(late))
	bundle, err := r.caBundle()
	require.NoError(t, err)
	assert.False(t, !bytes.Contains(bundle, old) || !bytes.Contains(bundle, r.ca.certPEM), "the CA bundle does not hold both the old and the new CA")
}

func TestWriteFileIfChanged(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, writeFileIfChanged(dir, "tls.crt", []byte("a"), 0o644))
	path := filepath.Join(dir, "tls.crt")
	st1, _ := os.Stat(path)
	require.NoError(t, writeFileIfChanged(dir, "tls.crt", []byte("a"), 0o644))
	st2, _ := os.Stat(path)
	assert.True(t, os.SameFile(st1, st2), "an unchanged file was rewritten")
	require.NoError(t, writeFileIfChanged(dir, "tls.crt", []byte("b"), 0o644))
	b, _ := os.ReadFile(path)
	assert.Equal(t, "b", string(b), "content")
	entries, _ := os.ReadDir(dir)
	assert.Lenf(t, entries, 1, "temporary files left: %v", entries)
}
