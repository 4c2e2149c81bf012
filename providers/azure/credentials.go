package azure

import (
	"net/url"
	"os"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/machinist-io/machinist/providers/kit"
)

// Secret keys, as in Gardener's Azure provider. The azure* keys are deprecated aliases that are
// still read.
const (
	KeyClientID                  = "clientID"
	KeyClientSecret              = "clientSecret"
	KeyWorkloadIdentityTokenFile = "workloadIdentityTokenFile"
	KeySubscriptionID            = "subscriptionID"
	KeyTenantID                  = "tenantID"
	KeyUserData                  = kit.KeyUserData

	// Keys of a custom cloud (machinist only; Gardener's provider knows the public clouds by
	// cloudConfiguration.name): the endpoints of ARM's cloud.Configuration and the CA bundle
	// that signs them.
	KeyActiveDirectoryAuthorityHost = "activeDirectoryAuthorityHost"
	KeyResourceManagerEndpoint      = "resourceManagerEndpoint"
	KeyResourceManagerAudience      = "resourceManagerAudience"
	KeyCACert                       = "caCert"

	KeyAzureClientID       = "azureClientId"
	KeyAzureClientSecret   = "azureClientSecret"
	KeyAzureSubscriptionID = "azureSubscriptionId"
	KeyAzureTenantID       = "azureTenantId"
)

// credentials are what the secret says about how to reach Azure.
type credentials struct {
	tenantID       string
	clientID       string
	clientSecret   string
	tokenFile      string
	subscriptionID string

	// A custom cloud: both endpoints or neither; the audience defaults to the endpoint.
	authorityHost string
	armEndpoint   string
	armAudience   string
	caCert        string
}

// custom reports whether the secret names a custom cloud.
func (c credentials) custom() bool { return c.armEndpoint != "" }

// hash identifies a credential set (and cloud) without keeping the secret in a map key.
func (c credentials) hash(cloudName string) string {
	return kit.CredentialKey(c.tenantID, c.clientID, c.clientSecret, c.tokenFile, c.subscriptionID, cloudName,
		c.authorityHost, c.armEndpoint, c.armAudience, c.caCert)
}

// credentialsFrom reads and checks the secret. Errors name the keys, never the values.
func credentialsFrom(secret *corev1.Secret) (credentials, error) {
	s, err := readSecret(secret)
	if err != nil {
		return credentials{}, err
	}
	value := s.Value
	c := credentials{
		tenantID:       value(KeyTenantID, KeyAzureTenantID),
		clientID:       value(KeyClientID, KeyAzureClientID),
		clientSecret:   value(KeyClientSecret, KeyAzureClientSecret),
		tokenFile:      value(KeyWorkloadIdentityTokenFile),
		subscriptionID: value(KeySubscriptionID, KeyAzureSubscriptionID),
		authorityHost:  value(KeyActiveDirectoryAuthorityHost),
		armEndpoint:    value(KeyResourceManagerEndpoint),
		armAudience:    value(KeyResourceManagerAudience),
		caCert:         value(KeyCACert),
	}
	var errs field.ErrorList
	data := kit.SecretData
	if c.clientID == "" {
		errs = append(errs, field.Required(data.Key(KeyClientID), "set the application (client) ID of the service principal"))
	}
	switch {
	case c.clientSecret != "" && c.tokenFile != "":
		errs = append(errs, field.Forbidden(data.Key(KeyClientSecret), "clientSecret and workloadIdentityTokenFile are mutually exclusive: keep one"))
	case c.clientSecret == "" && c.tokenFile == "":
		errs = append(errs, field.Required(data.Key(KeyClientSecret), "set clientSecret, or workloadIdentityTokenFile for workload identity"))
	case c.tokenFile != "":
		if _, err := os.Stat(c.tokenFile); err != nil {
			// The path is not echoed: the conformance kit (rightly) treats values of token keys as
			// secret.
			errs = append(errs, field.Invalid(data.Key(KeyWorkloadIdentityTokenFile), "<path>", "the token file cannot be read: mount the projected service account token at the path the key names"))
		}
	}
	if c.subscriptionID == "" {
		errs = append(errs, field.Required(data.Key(KeySubscriptionID), "set the subscription ID"))
	}
	if c.tenantID == "" {
		errs = append(errs, field.Required(data.Key(KeyTenantID), "set the tenant (directory) ID"))
	}
	errs = append(errs, c.validateCloud(data)...)
	if err := s.Invalid(errs); err != nil {
		return credentials{}, err
	}
	if c.custom() && c.armAudience == "" {
		c.armAudience = c.armEndpoint
	}
	return c, nil
}

// validateCloud checks the custom cloud keys. Values are not echoed: they sit in a secret.
func (c credentials) validateCloud(data *field.Path) field.ErrorList {
	var errs field.ErrorList
	switch {
	case c.authorityHost != "" && c.armEndpoint == "":
		errs = append(errs, field.Required(data.Key(KeyResourceManagerEndpoint), "a custom cloud needs its Azure Resource Manager URL too"))
	case c.authorityHost == "" && (c.armEndpoint != "" || c.armAudience != ""):
		errs = append(errs, field.Required(data.Key(KeyActiveDirectoryAuthorityHost), "a custom cloud needs its Microsoft Entra ID (login) URL too"))
	case c.armAudience != "" && c.armEndpoint == "":
		errs = append(errs, field.Required(data.Key(KeyResourceManagerEndpoint), "resourceManagerAudience belongs to a custom cloud: set resourceManagerEndpoint"))
	}
	for _, k := range []struct{ key, value string }{
		{KeyActiveDirectoryAuthorityHost, c.authorityHost}, {KeyResourceManagerEndpoint, c.armEndpoint},
	} {
		if k.value == "" {
			continue
		}
		// ARM's bearer token policy sends tokens over HTTPS only.
		if u, err := url.Parse(k.value); err != nil || u.Scheme != "https" || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
			errs = append(errs, field.Invalid(data.Key(k.key), "(not shown)", "must be an https:// URL without query, e.g. https://management.example.com/"))
		}
	}
	if u, err := url.Parse(c.armAudience); c.armAudience != "" && (err != nil || u.Scheme == "") {
		errs = append(errs, field.Invalid(data.Key(KeyResourceManagerAudience), "(not shown)", "must be the URI tokens for Azure Resource Manager are issued for, e.g. https://management.example.com/"))
	}
	if c.caCert != "" {
		if _, err := kit.Transport(kit.TLS{CACert: c.caCert}); err != nil {
			errs = append(errs, field.Invalid(data.Key(KeyCACert), "(not shown)", "must hold the PEM certificates of the CAs that sign the cloud's endpoints"))
		}
	}
	return errs
}

// readSecret is the request's secret.
func readSecret(secret *corev1.Secret) (kit.Secret, error) {
	return kit.ReadSecret(ProviderName, secret, "clientID, clientSecret, subscriptionID and tenantID")
}

func data(key string) string { return "data." + key }
