package fakeopenstack

import (
	"net/http"
	"time"
)

type token struct {
	id      string
	issued  time.Time
	expires time.Time
	methods []string
}

const keystoneTime = "2006-01-02T15:04:05.000000Z"

type authRequest struct {
	Auth struct {
		Identity struct {
			Methods  []string `json:"methods"`
			Password *struct {
				User authUser `json:"user"`
			} `json:"password"`
			ApplicationCredential *struct {
				ID     string    `json:"id"`
				Name   string    `json:"name"`
				Secret string    `json:"secret"`
				User   *authUser `json:"user"`
			} `json:"application_credential"`
		} `json:"identity"`
		Scope *struct {
			Project *struct {
				ID     string   `json:"id"`
				Name   string   `json:"name"`
				Domain *nameRef `json:"domain"`
			} `json:"project"`
		} `json:"scope"`
	} `json:"auth"`
}

type authUser struct {
	ID       string   `json:"id"`
	Name     string   `json:"name"`
	Password string   `json:"password"`
	Domain   *nameRef `json:"domain"`
}

type nameRef struct {
	ID   string `json:"id"`
	Name string `json:"name"`
}

func (n *nameRef) isDefaultDomain() bool {
	return n != nil && (n.ID == DomainID || n.Name == DomainName)
}

func (u *authUser) isUser() bool {
	if u == nil {
		return false
	}
	if u.ID != "" {
		return u.ID == UserID
	}
	return u.Name == UserName && u.Domain.isDefaultDomain()
}

func (c *keystone) serveIdentity(w http.ResponseWriter, r *http.Request, rest string) {
	switch {
	case rest == "/" && r.Method == http.MethodGet:
		writeJSON(w, http.StatusMultipleChoices, map[string]any{"versions": map[string]any{"values": []any{
			map[string]any{"id": "v3.14", "status": "stable", "updated": "2020-04-07T00:00:00Z",
				"links": []any{map[string]any{"rel": "self", "href": c.url + "/identity/v3/"}}},
		}}})
	case rest == "/v3/auth/tokens" && r.Method == http.MethodPost:
		c.issueToken(w, r)
	case rest == "/v3/auth/tokens" && r.Method == http.MethodGet:
		c.mu.Lock()
		caller := c.tokens[r.Header.Get("X-Auth-Token")]
		subject := c.tokens[r.Header.Get("X-Subject-Token")]
		now := c.now()
		c.mu.Unlock()
		if caller == nil || !now.Before(caller.expires) {
			writeError(w, "identity", http.StatusUnauthorized, "", "The request you have made requires authentication.")
			return
		}
		if subject == nil || !now.Before(subject.expires) {
			writeError(w, "identity", http.StatusNotFound, "Not Found", "Could not find token.")
			return
		}
		w.Header().Set("X-Subject-Token", subject.id)
		writeJSON(w, http.StatusOK, c.tokenBody(subject))
	default:
		writeError(w, "identity", http.StatusNotFound, "Not Found", "The resource could not be found.")
	}
}

func (c *keystone) issueToken(w http.ResponseWriter, r *http.Request) {
	var req authRequest
	if !decodeBody(w, r, "identity", &req) {
		return
	}
	id := req.Auth.Identity
	ok := false
	var methods []string
	switch {
	case len(id.Methods) == 1 && id.Methods[0] == "password" && id.Password != nil:
		u := id.Password.User
		ok = u.isUser() && u.Password == Password
		methods = []string{"password"}
		// A password token must be scoped to the project, by ID or by name within its domain.
		if ok {
			s := req.Auth.Scope
			switch {
			case s == nil || s.Project == nil:
				writeError(w, "identity", http.StatusBadRequest, "Bad Request", "a project scope is required by this fake cloud")
				return
			case s.Project.ID != "":
				ok = s.Project.ID == ProjectID
			default:
				ok = s.Project.Name == ProjectName && s.Project.Domain.isDefaultDomain()
			}
		}
	case len(id.Methods) == 1 && id.Methods[0] == "application_credential" && id.ApplicationCredential != nil:
		ac := id.ApplicationCredential
		switch {
		case ac.ID != "" && ac.ID != AppCredentialID:
			// As Keystone does (ApplicationCredentialNotFound): 404, quoting the ID.
			writeError(w, "identity", http.StatusNotFound, "Not Found", "Could not find Application Credential: "+ac.ID+".")
			return
		case ac.ID != "":
			ok = true
		default:
			ok = ac.Name == AppCredentialName && ac.User.isUser()
		}
		ok = ok && ac.Secret == AppCredentialSecret
		methods = []string{"application_credential"}
		if req.Auth.Scope != nil {
			writeError(w, "identity", http.StatusUnauthorized, "", "Application credentials cannot request a scope.")
			return
		}
	}
	if !ok {
		writeError(w, "identity", http.StatusUnauthorized, "", "The request you have made requires authentication.")
		return
	}
	c.mu.Lock()
	now := c.now()
	t := &token{id: newToken(), issued: now, expires: now.Add(c.tokenTTL), methods: methods}
	c.tokens[t.id] = t
	c.mu.Unlock()
	w.Header().Set("X-Subject-Token", t.id)
	writeJSON(w, http.StatusCreated, c.tokenBody(t))
}

func (c *keystone) tokenBody(t *token) map[string]any {
	endpoint := func(url string) []any {
		return []any{
			map[string]any{"id": newID(), "interface": "public", "region": c.region, "region_id": c.region, "url": url},
			map[string]any{"id": newID(), "interface": "internal", "region": c.region, "region_id": c.region, "url": url},
		}
	}
	catalog := []any{
		map[string]any{"id": newID(), "type": "identity", "name": "keystone", "endpoints": endpoint(c.url + "/identity")},
		map[string]any{"id": newID(), "type": "compute", "name": "nova", "endpoints": endpoint(c.url + "/compute/v2.1")},
		map[string]any{"id": newID(), "type": "network", "name": "neutron", "endpoints": endpoint(c.url + "/network")},
		map[string]any{"id": newID(), "type": "volumev3", "name": "cinderv3", "endpoints": endpoint(c.url + "/volume/v3/" + ProjectID)},
		map[string]any{"id": newID(), "type": "image", "name": "glance", "endpoints": endpoint(c.url + "/image")},
	}
	return map[string]any{"token": map[string]any{
		"methods":    t.methods,
		"issued_at":  t.issued.UTC().Format(keystoneTime),
		"expires_at": t.expires.UTC().Format(keystoneTime),
		"audit_ids":  []string{t.id[5:27]},
		"user": map[string]any{"id": UserID, "name": UserName, "domain": map[string]any{"id": DomainID, "name": DomainName},
			"password_expires_at": nil},
		"project": map[string]any{"id": ProjectID, "name": ProjectName, "domain": map[string]any{"id": DomainID, "name": DomainName}},
		"roles":   []any{map[string]any{"id": newID(), "name": "member"}},
		"catalog": catalog,
	}}
}

// PasswordSecret returns Secret data with the password credentials of the cloud, in the keys
// Gardener's OpenStack provider reads.
func (c *Cloud) PasswordSecret() map[string][]byte {
	return map[string][]byte{
		"authURL":    []byte(c.AuthURL()),
		"domainName": []byte(DomainName),
		"tenantName": []byte(ProjectName),
		"username":   []byte(UserName),
		"password":   []byte(Password),
		"insecure":   []byte("false"),
	}
}

// AppCredentialSecret returns Secret data with the application credential of the cloud.
func (c *Cloud) AppCredentialSecret() map[string][]byte {
	return map[string][]byte{
		"authURL":                     []byte(c.AuthURL()),
		"domainName":                  []byte(DomainName),
		"tenantName":                  []byte(ProjectName),
		"applicationCredentialID":     []byte(AppCredentialID),
		"applicationCredentialSecret": []byte(AppCredentialSecret),
	}
}
