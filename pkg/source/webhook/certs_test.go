package webhook

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
	"time"
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
	if err := r.newCA(now); err != nil {
		t.Fatal(err)
	}
	if err := r.issue(now); err != nil {
		t.Fatal(err)
	}
	firstEnd := r.holder.notAfter()
	if renew, newCA := r.due(now.Add(49 * time.Minute)); renew || newCA {
		t.Errorf("49 min in: renew %v, new CA %v; want neither", renew, newCA)
	}
	renew, newCA := r.due(now.Add(51 * time.Minute))
	if !renew || newCA {
		t.Fatalf("51 min in: renew %v, new CA %v; want a new certificate only", renew, newCA)
	}
	if err := r.issue(now.Add(51 * time.Minute)); err != nil {
		t.Fatal(err)
	}
	if !r.holder.notAfter().After(firstEnd) {
		t.Errorf("the new certificate ends %s, not after the first (%s)", r.holder.notAfter(), firstEnd)
	}

	// Near the CA's end: a new CA, and both in the bundle.
	old := r.ca.certPEM
	late := r.ca.cert.NotAfter.Add(-5 * time.Minute)
	if renew, newCA := r.due(late); !renew || !newCA {
		t.Fatalf("near the CA's end: renew %v, new CA %v; want both", renew, newCA)
	}
	if err := r.newCA(late); err != nil {
		t.Fatal(err)
	}
	bundle, err := r.caBundle()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(bundle, old) || !bytes.Contains(bundle, r.ca.certPEM) {
		t.Error("the CA bundle does not hold both the old and the new CA")
	}
}

func TestWriteFileIfChanged(t *testing.T) {
	dir := t.TempDir()
	if err := writeFileIfChanged(dir, "tls.crt", []byte("a"), 0o644); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "tls.crt")
	st1, _ := os.Stat(path)
	if err := writeFileIfChanged(dir, "tls.crt", []byte("a"), 0o644); err != nil {
		t.Fatal(err)
	}
	st2, _ := os.Stat(path)
	if !os.SameFile(st1, st2) {
		t.Error("an unchanged file was rewritten")
	}
	if err := writeFileIfChanged(dir, "tls.crt", []byte("b"), 0o644); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(path); string(b) != "b" {
		t.Errorf("content %q", b)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("temporary files left: %v", entries)
	}
}
