package fakegcp

import (
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"time"
)

// Token endpoints of a served fake, relative to its URL.
const (
	// TokenPath is Google's OAuth 2.0 token endpoint: the token_uri of the fake's service
	// account keys (the JWT bearer grant).
	TokenPath = "token"
	// STSPath is the Security Token Service's token exchange (workload identity).
	STSPath = "sts/v1/token"
	// IAMCredentialsPath is the prefix of service account impersonation:
	// IAMCredentialsPath + "projects/-/serviceAccounts/EMAIL:generateAccessToken".
	IAMCredentialsPath = "iamcredentials/v1/"
)

// tokenLifetime is how long the fake's access tokens are valid.
const tokenLifetime = time.Hour

// serveToken answers the JWT bearer grant of a service account key: the assertion must be signed
// by the account's key and name this endpoint as its audience.
func (c *authAPI) serveToken(w http.ResponseWriter, r *http.Request) int {
	if err := r.ParseForm(); err != nil || r.Method != http.MethodPost {
		return oauthError(w, http.StatusBadRequest, "invalid_request", "POST a form")
	}
	if gt := r.PostForm.Get("grant_type"); gt != "urn:ietf:params:oauth:grant-type:jwt-bearer" {
		return oauthError(w, http.StatusBadRequest, "unsupported_grant_type", "Invalid grant_type: "+gt)
	}
	parts := strings.Split(r.PostForm.Get("assertion"), ".")
	if len(parts) != 3 {
		return oauthError(w, http.StatusBadRequest, "invalid_grant", "Invalid JWT: Token must be a short-lived token (60 minutes) and in a reasonable timeframe.")
	}
	var claims struct {
		Iss   string `json:"iss"`
		Aud   string `json:"aud"`
		Scope string `json:"scope"`
		Exp   int64  `json:"exp"`
		Iat   int64  `json:"iat"`
	}
	raw, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil || json.Unmarshal(raw, &claims) != nil {
		return oauthError(w, http.StatusBadRequest, "invalid_grant", "Invalid JWT: malformed claims.")
	}
	now := c.clock.Now().Unix()
	if claims.Exp < now || claims.Iat > now+300 || claims.Exp-claims.Iat > 3600 {
		return oauthError(w, http.StatusBadRequest, "invalid_grant", "Invalid JWT: Token must be a short-lived token (60 minutes) and in a reasonable timeframe. Check your iat and exp values in the JWT claim.")
	}
	if want := "https://" + r.Host + "/" + TokenPath; claims.Aud != want {
		return oauthError(w, http.StatusBadRequest, "invalid_grant", "Invalid JWT: the audience must be "+want)
	}
	c.mu.Lock()
	pub, ok := c.accounts[claims.Iss]
	c.mu.Unlock()
	if !ok {
		return oauthError(w, http.StatusBadRequest, "invalid_grant", "Invalid grant: account not found")
	}
	sig, err := base64.RawURLEncoding.DecodeString(parts[2])
	digest := sha256.Sum256([]byte(parts[0] + "." + parts[1]))
	if err != nil || rsa.VerifyPKCS1v15(pub, crypto.SHA256, digest[:], sig) != nil {
		return oauthError(w, http.StatusBadRequest, "invalid_grant", "Invalid JWT Signature.")
	}
	return writeJSON(w, http.StatusOK, map[string]any{
		"access_token": c.issueToken(claims.Iss), "token_type": "Bearer", "expires_in": int(tokenLifetime.Seconds()),
	})
}

// serveSTS answers workload identity's token exchange: a subject token registered with
// AddWorkloadIdentity becomes an access token of its principal.
func (c *authAPI) serveSTS(w http.ResponseWriter, r *http.Request) int {
	if err := r.ParseForm(); err != nil || r.Method != http.MethodPost {
		return oauthError(w, http.StatusBadRequest, "invalid_request", "POST a form")
	}
	f := r.PostForm
	if f.Get("grant_type") != "urn:ietf:params:oauth:grant-type:token-exchange" {
		return oauthError(w, http.StatusBadRequest, "unsupported_grant_type", "Invalid value for grant_type.")
	}
	if f.Get("subject_token_type") != "urn:ietf:params:oauth:token-type:jwt" || f.Get("audience") == "" {
		return oauthError(w, http.StatusBadRequest, "invalid_request", "Invalid subject_token_type or missing audience.")
	}
	c.mu.Lock()
	principal, ok := c.subjects[f.Get("subject_token")]
	c.mu.Unlock()
	if !ok {
		return oauthError(w, http.StatusBadRequest, "invalid_grant", "The audience in ID Token does not match the expected audience, or the token is invalid.")
	}
	return writeJSON(w, http.StatusOK, map[string]any{
		"access_token": c.issueToken(principal), "issued_token_type": "urn:ietf:params:oauth:token-type:access_token",
		"token_type": "Bearer", "expires_in": int(tokenLifetime.Seconds()),
	})
}

// serveGenerateAccessToken answers service account impersonation: a caller with an access token
// gets one of an existing service account.
func (c *authAPI) serveGenerateAccessToken(w http.ResponseWriter, r *http.Request, path string) int {
	rest, ok := strings.CutPrefix(path, IAMCredentialsPath+"projects/-/serviceAccounts/")
	email, ok2 := strings.CutSuffix(rest, ":generateAccessToken")
	if !ok || !ok2 || r.Method != http.MethodPost {
		return writeError(w, errNotFound(path))
	}
	_, _ = io.Copy(io.Discard, r.Body)
	if _, e := c.principalOf(r); e != nil {
		return writeError(w, e)
	}
	c.mu.Lock()
	_, exists := c.accounts[email]
	c.mu.Unlock()
	if !exists {
		return writeError(w, apiErr(http.StatusNotFound, "notFound", "Not found; Gaia id not found for email %s", email))
	}
	return writeJSON(w, http.StatusOK, map[string]string{
		"accessToken": c.issueToken(email), "expireTime": c.clock.Now().Add(tokenLifetime).UTC().Format(time.RFC3339),
	})
}

func (c *state) issueToken(principal string) string {
	var b [24]byte
	_, _ = rand.Read(b[:])
	tok := "ya29.fake-" + hex.EncodeToString(b[:])
	c.mu.Lock()
	c.tokens[tok] = principal
	c.mu.Unlock()
	return tok
}

// principalOf checks a request's bearer token.
func (c *state) principalOf(r *http.Request) (string, *APIError) {
	tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	c.mu.Lock()
	defer c.mu.Unlock()
	principal, known := c.tokens[tok]
	if !ok || !known {
		return "", apiErr(http.StatusUnauthorized, "authError", "Request had invalid authentication credentials. Expected OAuth 2 access token, login cookie or other valid authentication credential.")
	}
	if _, sa := c.accounts[principal]; !sa && strings.Contains(principal, ".iam.gserviceaccount.com") {
		return "", apiErr(http.StatusUnauthorized, "authError", "Request had invalid authentication credentials: the service account was deleted.")
	}
	return principal, nil
}

func oauthError(w http.ResponseWriter, status int, code, description string) int {
	return writeJSON(w, status, map[string]string{"error": code, "error_description": description})
}
