package kit

import (
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/machinist-io/machinist/core/driver"
)

// SecretData is the field path of a secret's keys in error messages: secret.data[<key>].
var SecretData = field.NewPath("secret", "data")

// KeyUserData is the secret key every provider takes the machines' user data from, as
// Gardener's providers do.
const KeyUserData = "userData"

// Secret is a request's secret as a provider reads it. Its errors name the secret and its keys,
// never a value.
type Secret struct {
	provider string
	s        *corev1.Secret
}

// ReadSecret returns the request's secret, or InvalidArgument when the request carries none;
// needs says what the secret must hold ("clientID, clientSecret, subscriptionID and tenantID").
func ReadSecret(provider string, s *corev1.Secret, needs string) (Secret, error) {
	if s == nil {
		return Secret{}, driver.Errorf(driver.InvalidArgument,
			"%s: the request carries no secret: set the MachineClass's secretRef (or credentialsSecretRef) to a secret with %s", provider, needs)
	}
	return Secret{provider: provider, s: s}, nil
}

// Name is the secret's namespace/name, for messages.
func (s Secret) Name() string { return SecretName(s.s) }

// SecretName is a secret's namespace/name, "(unnamed)" when it has none.
func SecretName(s *corev1.Secret) string {
	if s == nil || s.Name == "" {
		return "(unnamed)"
	}
	if s.Namespace != "" {
		return s.Namespace + "/" + s.Name
	}
	return s.Name
}

// Value is the value of the first of keys (a key and its aliases, in order of preference) that
// holds more than white space, trimmed; "" when none does.
func (s Secret) Value(keys ...string) string {
	for _, k := range keys {
		if v := strings.TrimSpace(driver.SecretValue(s.s, k)); v != "" {
			return v
		}
	}
	return ""
}

// Raw is the value of key as it is (a password may begin or end with a space).
func (s Secret) Raw(key string) string { return driver.SecretValue(s.s, key) }

// Has reports whether the secret holds key, even with an empty value.
func (s Secret) Has(key string) bool {
	if _, ok := s.s.Data[key]; ok {
		return true
	}
	_, ok := s.s.StringData[key]
	return ok
}

// Invalid is InvalidArgument naming the secret and every problem of errs (paths under
// SecretData), or nil when errs is empty.
func (s Secret) Invalid(errs field.ErrorList) error {
	if len(errs) == 0 {
		return nil
	}
	return driver.Errorf(driver.InvalidArgument, "%s: secret %s is invalid: %s", s.provider, s.Name(), errs.ToAggregate().Error())
}

// UserData reads the request's secret and its userData (Secret.UserData) in one step.
func UserData(provider string, s *corev1.Secret) (Secret, []byte, error) {
	secret, err := ReadSecret(provider, s, KeyUserData)
	if err != nil {
		return secret, nil, err
	}
	ud, err := secret.UserData()
	return secret, ud, err
}

// UserData is the secret's userData, or InvalidArgument when it has none.
func (s Secret) UserData() ([]byte, error) {
	if v, ok := s.s.Data[KeyUserData]; ok && len(v) > 0 {
		return v, nil
	}
	if v := s.s.StringData[KeyUserData]; v != "" {
		return []byte(v), nil
	}
	return nil, s.Invalid(field.ErrorList{field.Required(SecretData.Key(KeyUserData), "set it to the machines' cloud-init or ignition user data")})
}
