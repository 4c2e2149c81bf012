package oracle

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/machinist-io/machinist/providers/gcp"
	"github.com/machinist-io/machinist/providers/kit"
	"github.com/machinist-io/machinist/providers/kit/oraclekit"
)

// machinistTarget is machinist's GCP driver in this process; it reaches the fake through the
// secret's computeEndpoint and caCert.
type machinistTarget struct{ d *gcp.Driver }

// NewMachinist returns machinist's driver as a target, with short polls (the fake's operations
// take milliseconds) and its logs discarded.
func NewMachinist() oraclekit.Target {
	return machinistTarget{d: gcp.New(gcp.Options{
		Options: kit.Options{PollInterval: 5 * time.Millisecond, Log: slog.New(slog.DiscardHandler)},
		Retry:   wait.Backoff{Duration: 20 * time.Millisecond, Factor: 2, Steps: 3, Cap: time.Second},
	})}
}

func (t machinistTarget) Call(ctx context.Context, c oraclekit.Call) (oraclekit.Result, error) {
	return oraclekit.CallDriver(ctx, t.d, c)
}

func (machinistTarget) Close() error { return nil }

// NewGardener starts Gardener's driver process (the operator's executable,
// docs/compatibility/gcp.md "The oracle's driver process") against w. Its Compute client reaches
// the fake through a front (HTTPS_PROXY) and trusts the front's and the fake's CAs only
// (SSL_CERT_FILE); the key's token_uri is the fake's own loopback URL, which is never proxied.
func NewGardener(path string, w *World) (oraclekit.Target, error) {
	fr, err := newFront(w.Cloud)
	if err != nil {
		return nil, err
	}
	p, err := oraclekit.StartProcess(path, func(home string) ([]string, error) {
		bundle := filepath.Join(home, "ca.pem")
		if err := os.WriteFile(bundle, append(append([]byte(nil), fr.CACert...), w.Server.CACert...), 0o600); err != nil {
			return nil, err
		}
		// SSL_CERT_DIR: no system CAs, only the front's and the fake's.
		return []string{"HTTPS_PROXY=" + fr.URL, "NO_PROXY=", "SSL_CERT_FILE=" + bundle, "SSL_CERT_DIR=" + home}, nil
	}, nil, fr.Close)
	if err != nil {
		return nil, errors.Join(err, fr.Close())
	}
	return p, nil
}

var _ oraclekit.Target = machinistTarget{}
