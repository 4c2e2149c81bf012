package mtls

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/machinist-io/machinist/internal/pki"
)

// BenchmarkReloadCheck measures what stat-on-handshake adds to each handshake when nothing
// changed: three stats and a comparison.
func BenchmarkReloadCheck(b *testing.B) {
	ca, err := pki.NewCA("self", time.Hour)
	if err != nil {
		b.Fatal(err)
	}
	keyPEM, err := ca.KeyPEM()
	if err != nil {
		b.Fatal(err)
	}
	dir := b.TempDir()
	f := Files{Cert: filepath.Join(dir, "c"), Key: filepath.Join(dir, "k"), CA: filepath.Join(dir, "c")}
	if err := os.WriteFile(f.Cert, ca.CertPEM, 0o600); err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(f.Key, keyPEM, 0o600); err != nil {
		b.Fatal(err)
	}
	src, err := newSource(f)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := src.current(); err != nil {
			b.Fatal(err)
		}
	}
}
