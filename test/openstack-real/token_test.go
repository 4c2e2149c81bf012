package openstackreal

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/machinist-io/machinist/core/driver"
)

// issued is a Keystone token as the proxy saw it issued.
type issued struct {
	id      string
	at      time.Time
	expires time.Time
}

// keystoneProxy stands between the driver and Keystone and records every token Keystone issues,
// so the test sees when the driver authenticates without reaching into the driver.
type keystoneProxy struct {
	*httptest.Server
	mu     sync.Mutex
	tokens []issued
}

func newKeystoneProxy(t *testing.T) *keystoneProxy {
	t.Helper()
	target, err := url.Parse(authURL(t))
	if err != nil {
		t.Fatal(err)
	}
	target.Path = ""
	p := &keystoneProxy{}
	rp := httputil.NewSingleHostReverseProxy(target)
	rp.ModifyResponse = func(resp *http.Response) error {
		if resp.Request.Method != http.MethodPost || resp.Request.URL.Path != "/v3/auth/tokens" || resp.StatusCode != http.StatusCreated {
			return nil
		}
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			return err
		}
		resp.Body = io.NopCloser(bytes.NewReader(body))
		var tok struct {
			Token struct {
				ExpiresAt time.Time `json:"expires_at"`
			} `json:"token"`
		}
		_ = json.Unmarshal(body, &tok)
		p.mu.Lock()
		p.tokens = append(p.tokens, issued{id: resp.Header.Get("X-Subject-Token"), at: time.Now(), expires: tok.Token.ExpiresAt})
		p.mu.Unlock()
		return nil
	}
	p.Server = httptest.NewServer(rp)
	t.Cleanup(p.Close)
	return p
}

func (p *keystoneProxy) issued() []issued {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]issued(nil), p.tokens...)
}

// adminToken returns a project-scoped admin token straight from Keystone.
func adminToken(t *testing.T, ctx context.Context) string {
	t.Helper()
	body := `{"auth":{"identity":{"methods":["password"],"password":{"user":{"name":"admin","domain":{"name":"Default"},"password":` +
		strconv.Quote(osr(t, "ADMIN_PASSWORD")) + `}}},"scope":{"project":{"name":"admin","domain":{"name":"Default"}}}}}`
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, authURL(t)+"/auth/tokens", bytes.NewBufferString(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("admin token: HTTP %d", resp.StatusCode)
	}
	return resp.Header.Get("X-Subject-Token")
}

// tokenCall validates (GET) or revokes (DELETE) subject with an admin token and returns the status.
func tokenCall(t *testing.T, ctx context.Context, method, admin, subject string) int {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, method, authURL(t)+"/auth/tokens", nil)
	req.Header.Set("X-Auth-Token", admin)
	req.Header.Set("X-Subject-Token", subject)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestTokenExpiryAndRenewal runs the driver against Keystone with short-lived tokens (the
// [token] expiration openstack.sh sets): the driver renews its token before Keystone expires it,
// without a failed call; the old token really expires; and a token revoked under the driver (a
// 401 from Nova once the token caches let go of it) is replaced without a failed call.
func TestTokenExpiryAndRenewal(t *testing.T) {
	need(t)
	t.Parallel()
	lifetime, err := strconv.Atoi(osr(t, "TOKEN_EXPIRATION"))
	if err != nil {
		t.Fatal(err)
	}
	proxy := newKeystoneProxy(t)
	secret := passwordSecret(t, osr(t, "PROJECT"))
	secret.Data["authURL"] = []byte(proxy.URL + "/v3")
	class := classOf(t, "real-token", simpleSpec(t))
	d, _ := newDriver(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(3*lifetime)*time.Second+5*time.Minute)
	defer cancel()
	list := func() error {
		_, err := d.ListMachines(ctx, &driver.ListMachinesRequest{MachineClass: class, Secret: secret})
		return err
	}
	if err := list(); err != nil {
		t.Fatalf("ListMachines: %v", err)
	}
	first := proxy.issued()
	if len(first) != 1 {
		t.Fatalf("Keystone issued %d tokens for the first call, want 1", len(first))
	}
	if life := first[0].expires.Sub(first[0].at); life > time.Duration(lifetime+5)*time.Second {
		t.Fatalf("Keystone issued a token for %s, want the short expiration %ds of keystone.conf", life, lifetime)
	}

	// Renewal: keep calling until the driver has a second token; every call must succeed.
	eventually(t, time.Duration(lifetime+60)*time.Second, "the driver renews its token", func(context.Context) (bool, string) {
		if err := list(); err != nil {
			t.Fatalf("ListMachines while the token ages: %v", err)
		}
		n := len(proxy.issued())
		return n >= 2, strconv.Itoa(n) + " tokens issued"
	})
	second := proxy.issued()[1]
	if !second.at.Before(first[0].expires) {
		t.Errorf("the driver renewed at %s, after its token expired at %s", second.at, first[0].expires)
	}
	t.Logf("token issued %s, expiring %s, renewed %s before", first[0].at.Format(time.TimeOnly), first[0].expires.Format(time.TimeOnly), first[0].expires.Sub(second.at).Round(time.Second))

	// The first token does expire in Keystone: validation answers 404 once it has.
	admin := adminToken(t, ctx)
	eventually(t, time.Until(first[0].expires)+time.Minute, "Keystone expires the first token", func(ctx context.Context) (bool, string) {
		code := tokenCall(t, ctx, http.MethodGet, admin, first[0].id)
		return code == http.StatusNotFound, "validation answers HTTP " + strconv.Itoa(code)
	})

	// Revocation: once the services' token cache (30 s in openstack.sh) lets go of the revoked
	// token, Nova answers 401 and the driver authenticates again; no call fails meanwhile.
	if code := tokenCall(t, ctx, http.MethodDelete, admin, second.id); code != http.StatusNoContent {
		t.Fatalf("revoke the driver's token: HTTP %d", code)
	}
	before := len(proxy.issued())
	eventually(t, 3*time.Minute, "the driver replaces its revoked token", func(context.Context) (bool, string) {
		if err := list(); err != nil {
			t.Fatalf("ListMachines after its token was revoked: %v", err)
		}
		n := len(proxy.issued()) - before
		return n >= 1, strconv.Itoa(n) + " tokens issued since the revocation"
	})
}
