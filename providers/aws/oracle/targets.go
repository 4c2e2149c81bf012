package oracle

import (
	"context"
	"io"
	"log/slog"
	"time"

	"github.com/machinist-io/machinist/providers/aws"
	"github.com/machinist-io/machinist/providers/kit"
	"github.com/machinist-io/machinist/providers/kit/oraclekit"
)

// Machinist is machinist's AWS driver as a Target. Its secret also names the fake's URL
// (ec2Endpoint), where Gardener's driver takes AWS_ENDPOINT_URL_EC2 from its environment.
type Machinist struct {
	drv      *aws.Driver
	endpoint string
}

// NewMachinist returns machinist's driver talking to the fake at endpoint, retrying as
// Gardener's SDK client does (3 attempts) but waiting at most maxRetryWait between them.
func NewMachinist(endpoint string, maxRetryWait time.Duration) *Machinist {
	return &Machinist{endpoint: endpoint, drv: aws.New(aws.Options{
		Options:     kit.Options{PollInterval: 10 * time.Millisecond, Log: slog.New(slog.DiscardHandler)},
		MaxAttempts: 3, MaxRetryWait: maxRetryWait, VisibleTimeout: time.Minute,
	})}
}

// Call makes the call on machinist's driver, its secret naming the fake.
func (m *Machinist) Call(ctx context.Context, c oraclekit.Call) (oraclekit.Result, error) {
	if c.Secret != nil {
		c.Secret = c.Secret.DeepCopy()
		c.Secret.Data[aws.KeyEC2Endpoint] = []byte(m.endpoint)
	}
	return oraclekit.CallDriver(ctx, m.drv, c)
}

// Close does nothing: the driver holds no process.
func (m *Machinist) Close() error { return nil }

// StartGardener starts Gardener's AWS driver, a process the operator supplies that serves
// Gardener's driver over the oracle's protocol (docs/compatibility/aws.md, "The oracle's driver
// process"), with endpoint as its EC2 endpoint and an environment that holds nothing else of
// AWS's (no credentials, no shared files, no instance metadata service): the secret is its only
// source of credentials.
func StartGardener(path, endpoint string, stderr io.Writer) (*oraclekit.Process, error) {
	return oraclekit.StartProcess(path, func(home string) ([]string, error) {
		return []string{
			"AWS_ENDPOINT_URL_EC2=" + endpoint, "AWS_EC2_METADATA_DISABLED=true",
			"AWS_CONFIG_FILE=" + home + "/config", "AWS_SHARED_CREDENTIALS_FILE=" + home + "/credentials",
		}, nil
	}, stderr, nil)
}

var _ oraclekit.Target = (*Machinist)(nil)
