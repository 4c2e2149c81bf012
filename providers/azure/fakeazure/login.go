package fakeazure

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/http"
	"strings"
)

// serveLogin answers the Microsoft Entra ID endpoints MSAL uses for the client-credentials flow:
// the tenant's OpenID metadata and its token endpoint. It returns the response and the
// operation name to count it under.
func (c *loginAPI) serveLogin(req *http.Request) (*http.Response, string) {
	parts := strings.Split(strings.Trim(req.URL.Path, "/"), "/")
	if len(parts) == 0 {
		return aadError(req, http.StatusNotFound, "invalid_request", "AADSTS90002: Tenant '' not found.", 90002), ""
	}
	tenant := parts[0]
	rest := strings.Join(parts[1:], "/")
	switch {
	case req.Method == http.MethodGet && rest == "v2.0/.well-known/openid-configuration":
		if e := takeFault(c.faults, OpOpenIDMetadata, false); e != nil {
			return aadError(req, e.Status, e.Code, e.Message, 0), OpOpenIDMetadata
		}
		if !strings.EqualFold(tenant, c.tenantID) {
			return aadError(req, http.StatusBadRequest, "invalid_tenant", fmt.Sprintf("AADSTS90002: Tenant '%s' not found. Check to make sure you have the correct tenant ID and are signing into the correct cloud.", tenant), 90002), OpOpenIDMetadata
		}
		base := req.URL.Scheme + "://" + req.URL.Host + "/" + tenant
		return jsonResponse(req, http.StatusOK, map[string]any{
			"token_endpoint":                        base + "/oauth2/v2.0/token",
			"authorization_endpoint":                base + "/oauth2/v2.0/authorize",
			"issuer":                                base + "/v2.0",
			"token_endpoint_auth_methods_supported": []string{"client_secret_post", "private_key_jwt", "client_secret_basic"},
			"response_types_supported":              []string{"code", "id_token", "code id_token", "id_token token"},
		}), OpOpenIDMetadata
	case req.Method == http.MethodPost && rest == "oauth2/v2.0/token":
		return c.issueToken(req, tenant), OpToken
	}
	return aadError(req, http.StatusNotFound, "invalid_request", "AADSTS900561: The endpoint only accepts POST requests.", 900561), ""
}

func (c *loginAPI) issueToken(req *http.Request, tenant string) *http.Response {
	if e := takeFault(c.faults, OpToken, false); e != nil {
		return aadError(req, e.Status, e.Code, e.Message, 0)
	}
	if err := req.ParseForm(); err != nil {
		return aadError(req, http.StatusBadRequest, "invalid_request", "AADSTS900144: The request body must contain the following parameter: 'grant_type'.", 900144)
	}
	form := req.PostForm
	if !strings.EqualFold(tenant, c.tenantID) {
		return aadError(req, http.StatusBadRequest, "invalid_tenant", fmt.Sprintf("AADSTS90002: Tenant '%s' not found.", tenant), 90002)
	}
	if form.Get("grant_type") != "client_credentials" {
		return aadError(req, http.StatusBadRequest, "unsupported_grant_type", "AADSTS70003: The app requested an unsupported grant type.", 70003)
	}
	clientID := form.Get("client_id")
	c.mu.Lock()
	defer c.mu.Unlock()
	p, ok := c.principals[clientID]
	if !ok {
		return aadError(req, http.StatusBadRequest, "unauthorized_client", fmt.Sprintf("AADSTS700016: Application with identifier '%s' was not found in the directory '%s'.", clientID, tenant), 700016)
	}
	switch {
	case form.Get("client_secret") != "":
		if p.secret == "" || form.Get("client_secret") != p.secret {
			return aadError(req, http.StatusUnauthorized, "invalid_client", fmt.Sprintf("AADSTS7000215: Invalid client secret provided. Ensure the secret being sent in the request is the client secret value, not the client secret ID, for a secret added to app '%s'.", clientID), 7000215)
		}
	case form.Get("client_assertion") != "":
		if form.Get("client_assertion_type") != "urn:ietf:params:oauth:client-assertion-type:jwt-bearer" {
			return aadError(req, http.StatusBadRequest, "invalid_request", "AADSTS50027: Invalid client assertion type.", 50027)
		}
		if p.assertion == "" || form.Get("client_assertion") != p.assertion {
			return aadError(req, http.StatusBadRequest, "invalid_client", "AADSTS700213: No matching federated identity record found for presented assertion subject.", 700213)
		}
	default:
		return aadError(req, http.StatusUnauthorized, "invalid_client", "AADSTS7000218: The request body must contain the following parameter: 'client_assertion' or 'client_secret'.", 7000218)
	}
	// MSAL adds the OpenID scopes to the resource's .default scope.
	scope := form.Get("scope")
	audience := false
	for _, sc := range strings.Fields(scope) {
		for _, aud := range append([]string{"https://" + ARMHost}, c.audiences...) {
			if strings.TrimRight(strings.TrimSuffix(sc, "/.default"), "/") == strings.TrimRight(aud, "/") && strings.HasSuffix(sc, "/.default") {
				audience = true
			}
		}
	}
	if !audience {
		return aadError(req, http.StatusBadRequest, "invalid_scope", fmt.Sprintf("AADSTS70011: The provided value for the input parameter 'scope' is not valid. The scope %s is not valid.", scope), 70011)
	}
	buf := make([]byte, 16)
	_, _ = rand.Read(buf)
	token := "fake." + hex.EncodeToString(buf)
	c.tokens[token] = clientID
	return jsonResponse(req, http.StatusOK, map[string]any{
		"token_type":     "Bearer",
		"expires_in":     3599,
		"ext_expires_in": 3599,
		"access_token":   token,
	})
}

func aadError(req *http.Request, status int, code, description string, aadCode int) *http.Response {
	body := map[string]any{
		"error":             code,
		"error_description": description,
		"trace_id":          "00000000-0000-0000-0000-00000000a0d0",
		"correlation_id":    "00000000-0000-0000-0000-00000000c0de",
	}
	if aadCode != 0 {
		body["error_codes"] = []int{aadCode}
	}
	return jsonResponse(req, status, body)
}
