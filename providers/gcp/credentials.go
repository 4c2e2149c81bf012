package gcp

import (
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"regexp"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/machinist-io/machinist/core/driver"
	"github.com/machinist-io/machinist/providers/kit"
)

// Secret keys, as Gardener's provider reads them (pkg/api/v1alpha1/provider_spec.go and
// pkg/gcp/plugin.go at f192d12): the first of serviceAccountJSON, serviceaccount.json and
// credentialsConfig that is present holds the credentials.
const (
	KeyServiceAccountJSON            = "serviceAccountJSON"
	KeyServiceAccountJSONAlternative = "serviceaccount.json"
	KeyCredentialsConfig             = "credentialsConfig"
	// KeyProjectID names the project when the credentials do not (workload identity, a service
	// account key without project_id).
	KeyProjectID = "projectID"
	KeyUserData  = kit.KeyUserData

	// Keys of a Compute Engine other than Google's (machinist only; `machinist fakecloud gcp`,
	// a private endpoint): the Compute API's base URL and the PEM CAs that sign it.
	KeyComputeEndpoint = "computeEndpoint"
	KeyCACert          = "caCert"
)

// Credential types of the JSON, as Google's client libraries name them.
const (
	typeServiceAccount  = "service_account"
	typeExternalAccount = "external_account"
)

// What Gardener's provider allows in workload identity credentials (pkg/gcp/plugin.go at
// f192d12, validateExtAccountFields): the token goes only to Google's STS and IAM Credentials
// endpoints and is read only from the file Gardener projects it to.
const (
	googleSTSURL                     = "https://sts.googleapis.com/v1/token"
	subjectTokenTypeJWT              = "urn:ietf:params:oauth:token-type:jwt"
	DefaultWorkloadIdentityTokenFile = "/var/run/secrets/gardener.cloud/workload-identity/token"
)

var googleImpersonationURL = regexp.MustCompile(`^https://iamcredentials\.googleapis\.com/v1/projects/-/serviceAccounts/.+:generateAccessToken$`)

// serviceAccountFields are the fields Gardener's provider allows in a service account key
// (pkg/gcp/plugin.go, serviceAccountAllowedFields).
var serviceAccountFields = []string{
	"auth_provider_x509_cert_url", "auth_uri", "client_email", "client_id", "client_x509_cert_url",
	"private_key", "private_key_id", "project_id", "token_uri", "type", "universe_domain",
}

// credentials are what the secret says about how to reach Compute Engine.
type credentials struct {
	key      string // the secret key the JSON came from
	kind     string // typeServiceAccount or typeExternalAccount
	json     []byte
	project  string
	endpoint string // the Compute API's base URL; "" is Google's
	caCert   string
	ext      *externalAccount
}

// externalAccount is the part of workload identity credentials the driver uses.
type externalAccount struct {
	Audience                       string `json:"audience"`
	SubjectTokenType               string `json:"subject_token_type"`
	TokenURL                       string `json:"token_url"`
	ServiceAccountImpersonationURL string `json:"service_account_impersonation_url"`
	UniverseDomain                 string `json:"universe_domain"`
	CredentialSource               struct {
		File string `json:"file"`
	} `json:"credential_source"`
}

// hash identifies a credential set without keeping the secret in a map key.
func (c credentials) hash() string {
	return kit.CredentialKey(c.key, string(c.json), c.project, c.endpoint, c.caCert)
}

// credentialsFrom reads and checks the secret. Errors name the keys and fields, never values.
// tokenFile is the only file workload identity may read its token from.
func credentialsFrom(secret *corev1.Secret, tokenFile string) (credentials, error) {
	s, err := kit.ReadSecret(ProviderName, secret, "serviceAccountJSON")
	if err != nil {
		return credentials{}, err
	}
	c := credentials{endpoint: s.Value(KeyComputeEndpoint), caCert: s.Value(KeyCACert)}
	for _, k := range []string{KeyServiceAccountJSON, KeyServiceAccountJSONAlternative, KeyCredentialsConfig} {
		if s.Has(k) {
			c.key = k
			break
		}
	}
	data := kit.SecretData
	invalid := s.Invalid
	if c.key == "" {
		return credentials{}, invalid(field.ErrorList{field.Required(data.Key(KeyServiceAccountJSON),
			"set serviceAccountJSON (or serviceaccount.json) to a service account key, or credentialsConfig to workload identity credentials")})
	}
	c.json = []byte(s.Value(c.key))
	var errs field.ErrorList
	var fields map[string]any
	if err := json.Unmarshal(c.json, &fields); err != nil {
		// The JSON error names a position or a character, never the value.
		return credentials{}, invalid(field.ErrorList{field.Invalid(data.Key(c.key), "(not shown)", "must be the JSON of a service account key or of workload identity credentials: "+jsonProblem(err))})
	}
	c.kind, _ = fields["type"].(string)
	// The key's project_id, else the secret's projectID, as Gardener's provider reads them
	// (pkg/gcp/machine_controller_util.go, ExtractProject).
	project, _ := fields["project_id"].(string)
	c.project = strings.TrimSpace(project)
	projectField := data.Key(c.key).Child("project_id")
	if c.project == "" {
		c.project = s.Value(KeyProjectID)
		projectField = data.Key(KeyProjectID)
	}
	if c.project != "" && !projectPattern.MatchString(c.project) {
		errs = append(errs, field.Invalid(projectField, c.project, "must be a Google Cloud project ID, e.g. my-project"))
	}
	if c.endpoint != "" {
		errs = append(errs, validateEndpoint(c.endpoint, data.Key(KeyComputeEndpoint))...)
		if !strings.HasSuffix(c.endpoint, "/") {
			c.endpoint += "/"
		}
	}
	if c.caCert != "" {
		if pool := x509.NewCertPool(); !pool.AppendCertsFromPEM([]byte(c.caCert)) {
			errs = append(errs, field.Invalid(data.Key(KeyCACert), "(not shown)", "must hold the PEM certificates of the CAs that sign the endpoints"))
		}
	}
	switch c.kind {
	case typeServiceAccount:
		var forbidden []string
		for _, f := range slices.Sorted(maps.Keys(fields)) {
			if !slices.Contains(serviceAccountFields, f) {
				forbidden = append(forbidden, f)
			}
		}
		if len(forbidden) > 0 {
			errs = append(errs, field.Forbidden(data.Key(c.key), fmt.Sprintf("fields %s are not allowed in a service account key (allowed: %s), as in Gardener", strings.Join(forbidden, ", "), strings.Join(serviceAccountFields, ", "))))
		}
		if s, _ := fields["client_email"].(string); strings.TrimSpace(s) == "" {
			errs = append(errs, field.Required(data.Key(c.key), "the service account key has no client_email: use the JSON key file of the service account"))
		}
		if key, _ := fields["private_key"].(string); !validPrivateKey(key) {
			errs = append(errs, field.Invalid(data.Key(c.key), "private_key", "the service account key's private_key is not a PEM RSA private key: use the JSON key file of the service account"))
		}
		if c.project == "" {
			errs = append(errs, field.Required(data.Key(KeyProjectID), "the service account key has no project_id and the secret no projectID: set projectID to the project's ID (or use the key file as Google writes it)"))
		}
		if c.endpoint != "" {
			uri, _ := fields["token_uri"].(string)
			if !sameOrigin(uri, c.endpoint) {
				errs = append(errs, field.Invalid(data.Key(c.key), "token_uri", "with computeEndpoint set, the key's token_uri must be an https URL on the same host as computeEndpoint"))
			}
		}
	case typeExternalAccount:
		ext := &externalAccount{}
		if err := json.Unmarshal(c.json, ext); err != nil {
			errs = append(errs, field.Invalid(data.Key(c.key), "(not shown)", "workload identity credentials: "+jsonProblem(err)))
			break
		}
		c.ext = ext
		errs = append(errs, c.validateExternal(data.Key(c.key), tokenFile)...)
		if c.project == "" {
			errs = append(errs, field.Required(data.Key(KeyProjectID), "set the project ID: workload identity credentials do not name it"))
		}
	default:
		errs = append(errs, field.NotSupported(data.Key(c.key).Child("type"), c.kind, []string{typeServiceAccount, typeExternalAccount}))
	}
	if err := invalid(errs); err != nil {
		return credentials{}, err
	}
	return c, nil
}

// validPrivateKey reports whether key is a PEM-encoded RSA private key (PKCS #8 or #1), as
// golang.org/x/oauth2/jwt reads it.
func validPrivateKey(key string) bool {
	block, _ := pem.Decode([]byte(key))
	if block == nil {
		return false
	}
	if k, err := x509.ParsePKCS8PrivateKey(block.Bytes); err == nil {
		_, ok := k.(*rsa.PrivateKey)
		return ok
	}
	_, err := x509.ParsePKCS1PrivateKey(block.Bytes)
	return err == nil
}

// validateExternal applies Gardener's allow-list to workload identity credentials. With a
// computeEndpoint, the token endpoints may instead be on that endpoint's host.
func (c credentials) validateExternal(p *field.Path, tokenFile string) field.ErrorList {
	var errs field.ErrorList
	e := c.ext
	if strings.TrimSpace(e.Audience) == "" {
		errs = append(errs, field.Required(p.Child("audience"), "set the workload identity pool provider's audience"))
	}
	if url := strings.TrimSpace(e.TokenURL); url != googleSTSURL && !(c.endpoint != "" && sameOrigin(url, c.endpoint)) {
		errs = append(errs, field.Invalid(p.Child("token_url"), e.TokenURL, "must be "+googleSTSURL))
	}
	if u := e.ServiceAccountImpersonationURL; u != "" && !googleImpersonationURL.MatchString(u) && !(c.endpoint != "" && sameOrigin(u, c.endpoint) && strings.HasSuffix(u, ":generateAccessToken")) {
		errs = append(errs, field.Invalid(p.Child("service_account_impersonation_url"), u, "must match "+googleImpersonationURL.String()))
	}
	if strings.TrimSpace(e.SubjectTokenType) != subjectTokenTypeJWT {
		errs = append(errs, field.Invalid(p.Child("subject_token_type"), e.SubjectTokenType, "must be "+subjectTokenTypeJWT))
	}
	if strings.TrimSpace(e.CredentialSource.File) != tokenFile {
		errs = append(errs, field.Invalid(p.Child("credential_source", "file"), e.CredentialSource.File, "must be "+tokenFile+", where the workload identity token is mounted"))
	}
	return errs
}

// validateEndpoint checks the Compute API's base URL: https (the client sends tokens to it),
// without query or fragment. The value is not secret.
func validateEndpoint(endpoint string, p *field.Path) field.ErrorList {
	u, err := url.Parse(endpoint)
	if err != nil || u.Scheme != "https" || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		return field.ErrorList{field.Invalid(p, endpoint, "must be an https:// URL of the Compute API without query, e.g. https://compute.example.com/compute/v1/")}
	}
	return nil
}

// sameOrigin reports whether raw is an https URL on endpoint's host.
func sameOrigin(raw, endpoint string) bool {
	u, err := url.Parse(strings.TrimSpace(raw))
	e, err2 := url.Parse(endpoint)
	return err == nil && err2 == nil && u.Scheme == "https" && u.Host != "" && u.Host == e.Host
}

// jsonProblem describes a JSON error without quoting the document.
func jsonProblem(err error) string {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syn):
		return fmt.Sprintf("not valid JSON (at byte %d)", syn.Offset)
	case errors.As(err, &typ):
		return fmt.Sprintf("field %s must be a JSON %s", typ.Field, typ.Type)
	}
	return "not a JSON object"
}

// userDataKey is the metadata key of cloud-init user data.
const userDataKey = "user-data"

// startupScriptKey is the metadata key of a startup script.
const startupScriptKey = "startup-script"

// userDataItem returns the secret's userData as the metadata item Gardener's provider makes of
// it (pkg/gcp/machine_controller_util.go, getUserData): user-data for a cloud-config, a
// startup-script otherwise.
func userDataItem(secret *corev1.Secret) (key, value string, err error) {
	s, err := kit.ReadSecret(ProviderName, secret, "serviceAccountJSON")
	if err != nil {
		return "", "", err
	}
	ud, err := s.UserData()
	if err != nil {
		return "", "", err
	}
	v := string(ud)
	if len(v) > 256*1024 {
		return "", "", driver.Errorf(driver.InvalidArgument, "gcp: secret %s: data.%s is %d bytes; a Compute Engine metadata value holds at most 256 KiB: shrink it", kit.SecretName(secret), KeyUserData, len(v))
	}
	if strings.HasPrefix(v, "#cloud-config") {
		return userDataKey, v, nil
	}
	return startupScriptKey, v, nil
}
