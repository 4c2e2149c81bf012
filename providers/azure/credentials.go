package azure

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/machinist-io/machinist/core/driver"
)

// Secret keys, as in Gardener's Azure provider. The azure* keys are deprecated aliases that are
// still read.
const (
	KeyClientID                  = "clientID"
	KeyClientSecret              = "clientSecret"
	KeyWorkloadIdentityTokenFile = "workloadIdentityTokenFile"
	KeySubscriptionID            = "subscriptionID"
	KeyTenantID                  = "tenantID"
	KeyUserData                  = "userData"

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
}

// hash identifies a credential set (and cloud) without keeping the secret in a map key.
func (c credentials) hash(cloudName string) string {
	h := sha256.New()
	for _, s := range []string{c.tenantID, c.clientID, c.clientSecret, c.tokenFile, c.subscriptionID, cloudName} {
		h.Write([]byte(s))
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil))
}

// credentialsFrom reads and checks the secret. Errors name the keys, never the values.
func credentialsFrom(secret *corev1.Secret) (credentials, error) {
	if secret == nil {
		return credentials{}, driver.Error(driver.InvalidArgument, "azure: the request carries no secret: set the MachineClass's secretRef (or credentialsSecretRef) to a secret with clientID, clientSecret, subscriptionID and tenantID")
	}
	value := func(keys ...string) string {
		for _, k := range keys {
			if v := strings.TrimSpace(driver.SecretValue(secret, k)); v != "" {
				return v
			}
		}
		return ""
	}
	c := credentials{
		tenantID:       value(KeyTenantID, KeyAzureTenantID),
		clientID:       value(KeyClientID, KeyAzureClientID),
		clientSecret:   value(KeyClientSecret, KeyAzureClientSecret),
		tokenFile:      value(KeyWorkloadIdentityTokenFile),
		subscriptionID: value(KeySubscriptionID, KeyAzureSubscriptionID),
	}
	var errs field.ErrorList
	data := field.NewPath("secret", "data")
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
	if len(errs) > 0 {
		return credentials{}, driver.Errorf(driver.InvalidArgument, "azure: secret %s is invalid: %s", secretName(secret), errs.ToAggregate().Error())
	}
	return c, nil
}

// userDataFrom returns the secret's userData, which becomes the VM's customData.
func userDataFrom(secret *corev1.Secret) ([]byte, error) {
	if secret != nil {
		if v, ok := secret.Data[KeyUserData]; ok && len(v) > 0 {
			return v, nil
		}
		if v := secret.StringData[KeyUserData]; v != "" {
			return []byte(v), nil
		}
	}
	return nil, driver.Errorf(driver.InvalidArgument, "azure: secret %s has no %s: set it to the machines' cloud-init or ignition user data", secretName(secret), data(KeyUserData))
}

func data(key string) string { return "data." + key }

func secretName(s *corev1.Secret) string {
	if s == nil || s.Name == "" {
		return "(unnamed)"
	}
	if s.Namespace != "" {
		return s.Namespace + "/" + s.Name
	}
	return s.Name
}
