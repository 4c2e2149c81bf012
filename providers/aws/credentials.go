package aws

import (
	"net"
	"net/url"
	"os"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/machinist-io/machinist/providers/kit"
)

// Secret keys. The first six are Gardener's (machine-controller-manager-provider-aws
// pkg/aws/apis/aws_provider_spec.go and pkg/cpi/aws.go); the endpoint keys are machinist's own.
const (
	KeyAccessKeyID                  = "providerAccessKeyId"
	KeySecretAccessKey              = "providerSecretAccessKey"
	KeyAlternativeAccessKeyID       = "accessKeyID"
	KeyAlternativeSecretAccessKey   = "secretAccessKey"
	KeyWorkloadIdentityTokenFile    = "workloadIdentityTokenFile"
	KeyRoleARN                      = "roleARN"
	KeyUserData                     = kit.KeyUserData
	KeyEC2Endpoint                  = "ec2Endpoint"
	KeySTSEndpoint                  = "stsEndpoint"
	workloadIdentityRoleSessionName = "machinist"
)

// credentialMode is where a client's credentials come from.
type credentialMode int

const (
	// staticKeys: the secret's access key (providerAccessKeyId/providerSecretAccessKey or
	// accessKeyID/secretAccessKey).
	staticKeys credentialMode = iota
	// webIdentity: the secret's workloadIdentityTokenFile and roleARN, exchanged with STS's
	// AssumeRoleWithWebIdentity (Gardener's workload identity).
	webIdentity
	// defaultChain: the secret holds no keys and the operator allows ambient credentials
	// (Options.AmbientCredentials), so the SDK's default chain of the process's environment
	// applies (environment variables, shared files, IRSA web identity, EKS Pod Identity or ECS
	// container credentials, the EC2 instance profile).
	defaultChain
)

func (m credentialMode) String() string {
	switch m {
	case staticKeys:
		return "access key"
	case webIdentity:
		return "web identity"
	}
	return "default chain"
}

// credentials are what the secret says about how to reach AWS.
type credentials struct {
	mode            credentialMode
	accessKeyID     string
	secretAccessKey string
	tokenFile       string
	roleARN         string
	ec2Endpoint     string
	stsEndpoint     string
}

// key identifies a credential set in a region without keeping the secret in a map key.
func (c credentials) key(region string) string {
	return kit.CredentialKey(c.mode.String(), c.accessKeyID, c.secretAccessKey, c.tokenFile, c.roleARN, c.ec2Endpoint, c.stsEndpoint, region)
}

// credentialsFrom reads and checks the secret. Errors name the keys, never the values.
//
// Gardener's provider takes a key's value from the first of its names that exists, even when
// empty; machinist takes the first that is not empty. A secret with a workload identity token
// file uses it, as in Gardener (pkg/cpi/aws.go NewConfig), even if it also holds access keys. A
// secret with neither is refused, as Gardener's validation refuses it
// (pkg/aws/apis/validation/validation.go ValidateSecret), unless ambient is set: then the SDK's
// default chain of this process applies.
func credentialsFrom(secret *corev1.Secret, ambient bool) (credentials, kit.Secret, error) {
	s, err := kit.ReadSecret(ProviderName, secret, "userData and providerAccessKeyId/providerSecretAccessKey")
	if err != nil {
		return credentials{}, s, err
	}
	c := credentials{
		accessKeyID:     s.Value(KeyAccessKeyID, KeyAlternativeAccessKeyID),
		secretAccessKey: s.Value(KeySecretAccessKey, KeyAlternativeSecretAccessKey),
		tokenFile:       s.Value(KeyWorkloadIdentityTokenFile),
		roleARN:         s.Value(KeyRoleARN),
		ec2Endpoint:     s.Value(KeyEC2Endpoint),
		stsEndpoint:     s.Value(KeySTSEndpoint),
	}
	var errs field.ErrorList
	data := kit.SecretData
	switch {
	case s.Has(KeyWorkloadIdentityTokenFile) || c.tokenFile != "":
		c.mode = webIdentity
		c.accessKeyID, c.secretAccessKey = "", ""
		if c.tokenFile == "" {
			errs = append(errs, field.Required(data.Key(KeyWorkloadIdentityTokenFile), "set the path of the projected service account token, or remove the key to use access keys"))
		} else if _, err := os.Stat(c.tokenFile); err != nil {
			// The path is not echoed: the conformance kit (rightly) treats values of token keys
			// as secret.
			errs = append(errs, field.Invalid(data.Key(KeyWorkloadIdentityTokenFile), "<path>", "the token file cannot be read: mount the projected service account token at the path the key names"))
		}
		if c.roleARN == "" {
			errs = append(errs, field.Required(data.Key(KeyRoleARN), "set the ARN of the IAM role the workload identity assumes"))
		} else if !strings.HasPrefix(c.roleARN, "arn:") || !strings.Contains(c.roleARN, ":role/") {
			errs = append(errs, field.Invalid(data.Key(KeyRoleARN), c.roleARN, "must be an IAM role ARN: arn:aws:iam::<account>:role/<name>"))
		}
	case c.accessKeyID != "" || c.secretAccessKey != "":
		c.mode = staticKeys
		if c.accessKeyID == "" {
			errs = append(errs, field.Required(data.Key(KeyAccessKeyID), "set the access key ID (or "+KeyAlternativeAccessKeyID+") of the IAM user whose secret access key the secret holds"))
		}
		if c.secretAccessKey == "" {
			errs = append(errs, field.Required(data.Key(KeySecretAccessKey), "set the secret access key (or "+KeyAlternativeSecretAccessKey+") that belongs to the secret's access key ID"))
		}
	case ambient:
		c.mode = defaultChain
	default:
		errs = append(errs, field.Required(data.Key(KeyAccessKeyID), noCredentials))
	}
	for _, k := range []struct{ key, value string }{{KeyEC2Endpoint, c.ec2Endpoint}, {KeySTSEndpoint, c.stsEndpoint}} {
		if k.value != "" && !validEndpoint(k.value) {
			errs = append(errs, field.Invalid(data.Key(k.key), k.value, "must be an https:// URL without path or query (http:// only to a loopback address), e.g. https://ec2.eu-west-1.amazonaws.com"))
		}
	}
	if err := s.Invalid(errs); err != nil {
		return credentials{}, s, err
	}
	return c, s, nil
}

// noCredentials explains a secret without credentials: the keys Gardener accepts, and why the
// process's own identity is not used.
const noCredentials = "the secret holds no AWS credentials: set " + KeyAccessKeyID + " and " + KeySecretAccessKey +
	" (or " + KeyAlternativeAccessKeyID + " and " + KeyAlternativeSecretAccessKey + "), or " + KeyWorkloadIdentityTokenFile +
	" and " + KeyRoleARN + " for workload identity; the process's own AWS identity (environment, IRSA, the instance metadata service) " +
	"is used only when machinist runs with --aws-ambient-credentials"

// validEndpoint accepts https URLs, and http ones to loopback (the fake): the requests are
// signed, but their contents (user data) are not encrypted.
func validEndpoint(raw string) bool {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" || u.RawQuery != "" || u.Fragment != "" || (u.Path != "" && u.Path != "/") || u.User != nil {
		return false
	}
	switch u.Scheme {
	case "https":
		return true
	case "http":
		host := u.Hostname()
		ip := net.ParseIP(host)
		return host == "localhost" || (ip != nil && ip.IsLoopback())
	}
	return false
}
