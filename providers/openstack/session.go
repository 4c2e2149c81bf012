package openstack

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/gophercloud/gophercloud/v2"
	gopenstack "github.com/gophercloud/gophercloud/v2/openstack"
	"github.com/gophercloud/gophercloud/v2/openstack/identity/v3/tokens"
	"k8s.io/utils/clock"

	"github.com/machinist-io/machinist/core/driver"
	"github.com/machinist-io/machinist/internal/version"
	"github.com/machinist-io/machinist/internal/waitctx"
	"github.com/machinist-io/machinist/providers/kit"
)

// session is one authenticated client per credential set and region: the Keystone token and the
// service clients are shared by every operation that uses those credentials.
type session struct {
	provider *gophercloud.ProviderClient
	compute  *gophercloud.ServiceClient
	network  *gophercloud.ServiceClient
	volume   *gophercloud.ServiceClient
	image    *gophercloud.ServiceClient

	// mu makes one caller renew the token while the others wait for it; it guards the fields
	// below.
	mu       sync.Mutex
	tokenID  string
	obtained time.Time
	expires  time.Time
}

// pool caches sessions by a hash of their credentials and region (never the credentials
// themselves) and keeps at most MaxClientSets of them, dropping the least recently used.
type pool struct {
	opts     Options
	log      *slog.Logger
	sessions *kit.Clients[*session]
}

func newPool(opts Options, log *slog.Logger) *pool {
	return &pool{opts: opts, log: log, sessions: kit.NewClients[*session](opts.MaxClientSets)}
}

// get returns the session of the credentials in region, authenticating once, and renews its
// token before it expires.
func (p *pool) get(ctx context.Context, c *credentials, region string) (*session, error) {
	key := c.key() + "/" + region
	// One caller per credential set authenticates; the others wait and share the result.
	s, err := p.sessions.Get(key, func() (*session, error) {
		s, err := p.open(ctx, c, region)
		if err == nil {
			p.log.Debug("openstack: authenticated", "session", key[:12], "region", region)
		}
		return s, err
	})
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := p.keepFresh(ctx, s); err != nil {
		return nil, err
	}
	return s, nil
}

// size returns the number of cached sessions.
func (p *pool) size() int { return p.sessions.Len() }

// open authenticates against Keystone v3 and builds the service clients of region.
func (p *pool) open(ctx context.Context, c *credentials, region string) (*session, error) {
	transport, err := p.opts.Transport(c.tls())
	if err != nil {
		return nil, driver.Errorf(driver.InvalidArgument, "openstack: secret: the TLS settings do not work: %v: fix caCert, clientCert and clientKey", err)
	}
	pc, err := gopenstack.NewClient(c.authURL)
	if err != nil {
		return nil, driver.Errorf(driver.InvalidArgument, "openstack: the credentials secret is invalid: %s: %v", secretPath.Key(KeyAuthURL), err)
	}
	counter := &apiCounter{base: transport}
	pc.HTTPClient = http.Client{Transport: counter, Timeout: p.opts.HTTPTimeout}
	pc.UserAgent.Prepend("machinist/" + version.String())
	pc.MaxBackoffRetries = uint(p.opts.Retries)
	pc.RetryBackoffFunc = p.backoff
	pc.RetryFunc = p.retry
	if err := gopenstack.AuthenticateV3(ctx, pc, c.authOptions(), gophercloud.EndpointOpts{}); err != nil {
		return nil, c.authError(err)
	}
	s := &session{provider: pc}
	eo := gophercloud.EndpointOpts{Region: region, Availability: gophercloud.AvailabilityPublic}
	for _, svc := range []struct {
		name string
		dst  **gophercloud.ServiceClient
		new  func(*gophercloud.ProviderClient, gophercloud.EndpointOpts) (*gophercloud.ServiceClient, error)
	}{
		{"compute", &s.compute, gopenstack.NewComputeV2},
		{"network", &s.network, gopenstack.NewNetworkV2},
		{"volumev3", &s.volume, gopenstack.NewBlockStorageV3},
		{"image", &s.image, gopenstack.NewImageV2},
	} {
		sc, err := svc.new(pc, eo)
		if err != nil {
			var nf *gophercloud.ErrEndpointNotFound
			if errors.As(err, &nf) {
				return nil, driver.Errorf(driver.InvalidArgument,
					"openstack: the Keystone catalog has no public %s endpoint in region %q: set providerSpec.spec.region to a region of the cloud", svc.name, region)
			}
			return nil, apiError("find the "+svc.name+" endpoint", err)
		}
		*svc.dst = sc
	}
	counter.setEndpoints(map[string]string{
		s.compute.Endpoint: serviceNova, s.network.Endpoint: serviceNeutron,
		s.volume.Endpoint: serviceCinder, s.image.Endpoint: serviceGlance,
	})
	s.observeToken()
	return s, nil
}

// observeToken records the current token and its expiry. Callers hold s.mu.
func (s *session) observeToken() {
	tok := s.provider.Token()
	if tok == s.tokenID {
		return
	}
	s.tokenID = tok
	s.obtained = time.Now()
	s.expires = time.Time{}
	if r, ok := s.provider.GetAuthResult().(tokens.CreateResult); ok {
		if t, err := r.ExtractToken(); err == nil {
			s.expires = t.ExpiresAt
		}
	}
}

// keepFresh renews the token when it is about to expire: within RenewBefore, or within a quarter
// of its lifetime for short-lived tokens. A 401 in between is renewed by gophercloud itself.
func (p *pool) keepFresh(ctx context.Context, s *session) error {
	s.observeToken()
	if s.expires.IsZero() {
		return nil
	}
	margin := p.opts.TokenRenewBefore
	if life := s.expires.Sub(s.obtained); life/4 < margin {
		margin = life / 4
	}
	if time.Now().Add(margin).Before(s.expires) {
		return nil
	}
	if err := s.provider.Reauthenticate(ctx, s.tokenID); err != nil {
		return apiError("renew the Keystone token", err)
	}
	s.observeToken()
	p.log.Debug("openstack: renewed the Keystone token before it expired", "expires", s.expires)
	return nil
}

// backoff waits as a 429 answer asks (Retry-After), capped by MaxRetryWait and bounded by ctx.
func (p *pool) backoff(ctx context.Context, resp *gophercloud.ErrUnexpectedResponseCode, _ error, retries uint) error {
	wait := time.Duration(retries) * time.Second
	if resp != nil {
		if v := resp.ResponseHeader.Get("Retry-After"); v != "" {
			if secs, err := strconv.Atoi(v); err == nil && secs >= 0 {
				wait = time.Duration(secs) * time.Second
			} else if at, err := http.ParseTime(v); err == nil {
				wait = time.Until(at)
			}
		}
	}
	return waitctx.Sleep(ctx, clock.RealClock{}, min(wait, p.opts.MaxRetryWait))
}

// retry retries idempotent requests that failed with a gateway error or a broken connection, a
// few times with a short backoff. Anything else is returned as it is.
func (p *pool) retry(ctx context.Context, method, _ string, _ *gophercloud.RequestOpts, err error, failCount uint) error {
	if ctx.Err() != nil || int(failCount) > p.opts.Retries {
		return err
	}
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodDelete, http.MethodPut:
	default:
		return err
	}
	var resp gophercloud.ErrUnexpectedResponseCode
	var ne net.Error
	switch {
	case errors.As(err, &resp):
		if resp.Actual != http.StatusBadGateway && resp.Actual != http.StatusServiceUnavailable &&
			resp.Actual != http.StatusGatewayTimeout && resp.Actual != http.StatusInternalServerError {
			return err
		}
	case errors.As(err, &ne):
	default:
		return err
	}
	if serr := waitctx.Sleep(ctx, clock.RealClock{}, min(time.Duration(failCount)*p.opts.PollInterval/4+10*time.Millisecond, p.opts.MaxRetryWait)); serr != nil {
		return err
	}
	return nil
}
