package gcp

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"time"

	"golang.org/x/oauth2"
	"golang.org/x/oauth2/google"
	"golang.org/x/oauth2/google/externalaccount"
	compute "google.golang.org/api/compute/v1"
	"google.golang.org/api/option"

	"github.com/machinist-io/machinist/core/driver"
	"github.com/machinist-io/machinist/providers/kit"
)

// clientSet is the Compute API client of one credential set. Its token source caches the
// access token, so calls with the same secret reuse it.
type clientSet struct {
	project string
	// The calls the driver makes, bound to the client's compute.Service. The service is held
	// only by these closures, never in a field or an interface: *Driver is used as a
	// driver.Driver, so every type its fields reach counts as used in an interface, and with
	// text/template's reflective method calls in the binary (urfave/cli's help) the linker then
	// keeps every exported method of such types. Through a compute.Service field that is every
	// call of every Compute API service, about 10 MB of machinist-gcp (make check-slim).
	getInstance    func(ctx context.Context, zone, name string) (*compute.Instance, error)
	insertInstance func(ctx context.Context, zone, requestID string, in *compute.Instance) (*compute.Operation, error)
	deleteInstance func(ctx context.Context, zone, name string) (*compute.Operation, error)
	listInstances  func(ctx context.Context, zone string, page func(*compute.InstanceList) error) error
	waitOperation  func(ctx context.Context, zone, name string) (*compute.Operation, error)
}

// newCalls binds the driver's calls to svc.
func newCalls(svc *compute.Service, project string) *clientSet {
	return &clientSet{
		project: project,
		getInstance: func(ctx context.Context, zone, name string) (*compute.Instance, error) {
			return svc.Instances.Get(project, zone, name).Context(ctx).Do()
		},
		insertInstance: func(ctx context.Context, zone, requestID string, in *compute.Instance) (*compute.Operation, error) {
			return svc.Instances.Insert(project, zone, in).RequestId(requestID).Context(ctx).Do()
		},
		deleteInstance: func(ctx context.Context, zone, name string) (*compute.Operation, error) {
			return svc.Instances.Delete(project, zone, name).Context(ctx).Do()
		},
		listInstances: func(ctx context.Context, zone string, page func(*compute.InstanceList) error) error {
			return svc.Instances.List(project, zone).Context(ctx).Pages(ctx, page)
		},
		waitOperation: func(ctx context.Context, zone, name string) (*compute.Operation, error) {
			return svc.ZoneOperations.Wait(project, zone, name).Context(ctx).Do()
		},
	}
}

// clients returns the client set of a credential set, building it on first use.
func (d *Driver) clients(creds credentials) (*clientSet, error) {
	return d.cache.Get(creds.hash(), func() (*clientSet, error) {
		set, err := d.newClientSet(creds)
		if err != nil {
			return nil, driver.Wrap(driver.InvalidArgument, err, fmt.Sprintf("gcp: set up the Compute Engine client from the secret's data.%s: %v: fix the credentials", creds.key, err))
		}
		return set, nil
	})
}

// newClientSet builds the transport chain of a credential set: per-call metrics, throttling
// retries with backoff, the OAuth 2.0 token, and TLS (with the secret's CA when it has one).
func (d *Driver) newClientSet(creds credentials) (*clientSet, error) {
	base, err := d.opts.Transport(kit.TLS{CACert: creds.caCert})
	if err != nil {
		return nil, err
	}
	reach := &kit.Reach{}
	// Token requests run on a context of their own (the token source outlives every call);
	// tokenTransport stops waiting for them when the call's context ends.
	tokenCtx := context.WithValue(context.Background(), oauth2.HTTPClient, &http.Client{
		Transport: reach.Watch(base),
		Timeout:   d.opts.TokenTimeout,
	})
	var ts oauth2.TokenSource
	switch creds.kind {
	case typeServiceAccount:
		cfg, err := google.JWTConfigFromJSON(creds.json, compute.CloudPlatformScope)
		if err != nil {
			return nil, fmt.Errorf("the service account key cannot be used: %s", keyProblem(err))
		}
		ts = cfg.TokenSource(tokenCtx)
	case typeExternalAccount:
		e := creds.ext
		ts, err = externalaccount.NewTokenSource(tokenCtx, externalaccount.Config{
			Audience:                       e.Audience,
			SubjectTokenType:               e.SubjectTokenType,
			TokenURL:                       e.TokenURL,
			Scopes:                         []string{compute.CloudPlatformScope},
			SubjectTokenSupplier:           tokenFile(e.CredentialSource.File),
			UniverseDomain:                 e.UniverseDomain,
			ServiceAccountImpersonationURL: e.ServiceAccountImpersonationURL,
		})
		if err != nil {
			return nil, fmt.Errorf("the workload identity credentials cannot be used: %w", err)
		}
	}
	chain := kit.APIMetrics(ProviderName).Transport(&retryTransport{
		next:    tokenTransport{source: ts, next: base, reach: reach},
		backoff: d.opts.Retry,
		clock:   d.opts.Clock,
	}, func(r *http.Request) string { return serviceOf(r.Method, r.URL.Path) })
	opts := []option.ClientOption{option.WithHTTPClient(&http.Client{Transport: chain}), option.WithUserAgent("machinist")}
	if creds.endpoint != "" {
		opts = append(opts, option.WithEndpoint(creds.endpoint))
	}
	svc, err := compute.NewService(context.Background(), opts...)
	if err != nil {
		return nil, err
	}
	return newCalls(svc, creds.project), nil
}

// tokenFile supplies the workload identity token from its file, read anew for each exchange
// (the kubelet rotates it), as Gardener's provider does (pkg/gcp/plugin.go, tokenRetriever).
type tokenFile string

func (f tokenFile) SubjectToken(context.Context, externalaccount.SupplierOptions) (string, error) {
	b, err := os.ReadFile(string(f))
	if err != nil {
		return "", fmt.Errorf("read the workload identity token: %w", err)
	}
	return string(bytes.TrimSpace(b)), nil
}

// keyProblem says what is wrong with a key without quoting it.
func keyProblem(err error) string {
	msg := err.Error()
	if len(msg) > 200 {
		msg = msg[:200]
	}
	return msg
}

var _ externalaccount.SubjectTokenSupplier = tokenFile("")

// defaultTokenTimeout bounds one token request.
const defaultTokenTimeout = 30 * time.Second
