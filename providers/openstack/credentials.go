package openstack

import (
	"errors"
	"net/url"
	"strings"

	"github.com/gophercloud/gophercloud/v2/openstack/identity/v3/tokens"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/machinist-io/machinist/core/driver"
	"github.com/machinist-io/machinist/providers/kit"
)

// Secret keys, as Gardener's OpenStack provider reads them.
const (
	KeyAuthURL                     = "authURL"
	KeyCACert                      = "caCert"
	KeyInsecure                    = "insecure"
	KeyDomainName                  = "domainName"
	KeyDomainID                    = "domainID"
	KeyTenantName                  = "tenantName"
	KeyTenantID                    = "tenantID"
	KeyUserDomainName              = "userDomainName"
	KeyUserDomainID                = "userDomainID"
	KeyUsername                    = "username"
	KeyPassword                    = "password"
	KeyApplicationCredentialID     = "applicationCredentialID"
	KeyApplicationCredentialName   = "applicationCredentialName"
	KeyApplicationCredentialSecret = "applicationCredentialSecret"
	KeyClientCert                  = "clientCert"
	KeyClientKey                   = "clientKey"
	KeyRegion                      = "region"
	KeyUserData                    = kit.KeyUserData
)

// credentials are what the driver needs to authenticate. They are never logged or put in errors.
type credentials struct {
	authURL        string
	caCert         string
	insecure       bool
	domainName     string
	domainID       string
	tenantName     string
	tenantID       string
	userDomainName string
	userDomainID   string
	username       string
	password       string
	appCredID      string
	appCredName    string
	appCredSecret  string
	clientCert     string
	clientKey      string
	region         string
}

var secretPath = kit.SecretData

// credentialsFrom reads and validates the credentials of a request's secret. Errors name the
// keys, never the values.
func credentialsFrom(secret *corev1.Secret) (*credentials, error) {
	s, err := readSecret(secret)
	if err != nil {
		return nil, err
	}
	get := func(k string) string { return s.Value(k) }
	c := &credentials{
		authURL:        get(KeyAuthURL),
		caCert:         get(KeyCACert),
		domainName:     get(KeyDomainName),
		domainID:       get(KeyDomainID),
		tenantName:     get(KeyTenantName),
		tenantID:       get(KeyTenantID),
		userDomainName: get(KeyUserDomainName),
		userDomainID:   get(KeyUserDomainID),
		username:       get(KeyUsername),
		password:       s.Raw(KeyPassword),
		appCredID:      get(KeyApplicationCredentialID),
		appCredName:    get(KeyApplicationCredentialName),
		appCredSecret:  s.Raw(KeyApplicationCredentialSecret),
		clientCert:     get(KeyClientCert),
		clientKey:      get(KeyClientKey),
		region:         get(KeyRegion),
	}
	var errs field.ErrorList
	if c.authURL == "" {
		errs = append(errs, field.Required(secretPath.Key(KeyAuthURL), "the Keystone v3 URL, e.g. https://keystone.example.com:5000/v3"))
	} else if u, err := url.Parse(c.authURL); err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		errs = append(errs, field.Invalid(secretPath.Key(KeyAuthURL), "(not shown)", "must be an http(s) URL of Keystone"))
	}
	switch v := get(KeyInsecure); v {
	case "", "false":
	case "true":
		c.insecure = true
	default:
		errs = append(errs, field.NotSupported(secretPath.Key(KeyInsecure), v, []string{"true", "false"}))
	}
	if c.domainName == "" && c.domainID == "" {
		errs = append(errs, field.Required(secretPath.Key(KeyDomainName), "set domainName or domainID (the project's domain)"))
	}
	if c.tenantName == "" && c.tenantID == "" {
		errs = append(errs, field.Required(secretPath.Key(KeyTenantName), "set tenantName or tenantID (the project)"))
	}
	if c.appCredID != "" || c.appCredName != "" || c.appCredSecret != "" {
		if c.appCredSecret == "" {
			errs = append(errs, field.Required(secretPath.Key(KeyApplicationCredentialSecret), "application credentials need their secret"))
		}
		if c.appCredID == "" && (c.appCredName == "" || c.username == "") {
			errs = append(errs, field.Required(secretPath.Key(KeyApplicationCredentialID), "set applicationCredentialID, or applicationCredentialName with username"))
		}
	} else {
		if c.username == "" {
			errs = append(errs, field.Required(secretPath.Key(KeyUsername), "set username and password, or application credentials"))
		}
		if c.password == "" {
			errs = append(errs, field.Required(secretPath.Key(KeyPassword), "set username and password, or application credentials"))
		}
	}
	if (c.clientCert == "") != (c.clientKey == "") {
		errs = append(errs, field.Required(secretPath.Key(KeyClientKey), "clientCert and clientKey go together"))
	}
	if _, err := kit.Transport(c.tls()); errors.Is(err, kit.ErrNoPEMCertificate) {
		errs = append(errs, field.Invalid(secretPath.Key(KeyCACert), "(not shown)", "holds no PEM certificate: put the PEM CA bundle of Keystone there"))
	} else if err != nil {
		errs = append(errs, field.Invalid(secretPath.Key(KeyClientCert), "(not shown)", "clientCert and clientKey are not a PEM certificate and its key"))
	}
	if err := s.Invalid(errs); err != nil {
		return nil, err
	}
	return c, nil
}

// key identifies a credential set without revealing it (kit.CredentialKey).
func (c *credentials) key() string {
	return kit.CredentialKey(c.authURL, c.caCert, boolString(c.insecure), c.domainName, c.domainID, c.tenantName, c.tenantID,
		c.userDomainName, c.userDomainID, c.username, c.password, c.appCredID, c.appCredName, c.appCredSecret,
		c.clientCert, c.clientKey)
}

func boolString(b bool) string {
	if b {
		return "true"
	}
	return "false"
}

// authOptions returns the Keystone v3 request: application credentials (implicitly scoped), or
// a password scoped to the project. Reauthentication is allowed, so a 401 renews the token.
func (c *credentials) authOptions() *tokens.AuthOptions {
	userDomainName, userDomainID := c.userDomainName, c.userDomainID
	if userDomainName == "" && userDomainID == "" {
		userDomainName, userDomainID = c.domainName, c.domainID
	}
	if c.appCredSecret != "" {
		o := &tokens.AuthOptions{
			IdentityEndpoint:            c.authURL,
			ApplicationCredentialID:     c.appCredID,
			ApplicationCredentialSecret: c.appCredSecret,
			AllowReauth:                 true,
		}
		if c.appCredID == "" {
			o.ApplicationCredentialName = c.appCredName
			o.Username = c.username
			o.DomainName, o.DomainID = userDomainName, userDomainID
		}
		return o
	}
	o := &tokens.AuthOptions{
		IdentityEndpoint: c.authURL,
		Username:         c.username,
		Password:         c.password,
		DomainName:       userDomainName,
		DomainID:         userDomainID,
		AllowReauth:      true,
	}
	if userDomainID != "" {
		o.DomainName = ""
	}
	if c.tenantID != "" {
		o.Scope = tokens.Scope{ProjectID: c.tenantID}
	} else {
		o.Scope = tokens.Scope{ProjectName: c.tenantName, DomainName: c.domainName, DomainID: c.domainID}
		if c.domainID != "" {
			o.Scope.DomainName = ""
		}
	}
	return o
}

// tls are the TLS settings of the credentials: the CA bundle, insecure mode and a client
// certificate.
func (c *credentials) tls() kit.TLS {
	return kit.TLS{CACert: c.caCert, Insecure: c.insecure, ClientCert: c.clientCert, ClientKey: c.clientKey}
}

// readSecret is the request's secret.
func readSecret(secret *corev1.Secret) (kit.Secret, error) {
	return kit.ReadSecret(ProviderName, secret, "authURL, domainName, tenantName, username and password (or application credentials)")
}

// authError is a failed authentication as the driver reports it. Keystone answers an unknown
// application credential ID with 404 and quotes the ID ("Could not find Application
// Credential: <id>."): read as NotFound, a DeleteMachine would tell the controllers that the VM is
// gone, so any 404 of the authentication is Unauthenticated; and every credential value Keystone
// may quote is replaced by the key of the secret that holds it.
func (c *credentials) authError(err error) error {
	st := apiError("authenticate with Keystone", err)
	code, msg := driver.CodeOf(st), driver.MessageOf(st)
	if code == driver.NotFound {
		code, msg = driver.Unauthenticated, msg+": check the credentials secret"
	}
	for _, f := range []struct{ key, value string }{
		{KeyApplicationCredentialSecret, c.appCredSecret}, {KeyApplicationCredentialID, c.appCredID},
		{KeyApplicationCredentialName, c.appCredName}, {KeyPassword, c.password}, {KeyUsername, c.username},
	} {
		// Short values would replace parts of ordinary words.
		if len(f.value) >= 4 {
			msg = strings.ReplaceAll(msg, f.value, "<"+f.key+">")
		}
	}
	return driver.Error(code, msg)
}
