package machine

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"math/big"
	"net/url"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/core/controller/internal/classsecret"
)

// Bootstrap tokens follow Kubernetes' bootstrap token format: Secret bootstrap-token-<id> in
// kube-system of the target cluster, token "<id>.<secret>".
const (
	bootstrapTokenNamespace = metav1.NamespaceSystem
	bootstrapTokenPrefix    = "bootstrap-token-"
	bootstrapTokenType      = corev1.SecretType("bootstrap.kubernetes.io/token")
	tokenSecretChars        = "0123456789abcdefghijklmnopqrstuvwxyz"
	// labelTokenMachine on a token secret names the machine it was made for.
	labelTokenMachine = "machine.sapcloud.io/machine-name"
)

// bootstrapTokenID derives a machine's token ID as MCM does: the first 6 hex characters of the
// last 5 bytes of its name (names shorter than that are padded).
func bootstrapTokenID(machineName string) string {
	b := []byte(machineName)
	if len(b) > 5 {
		b = b[len(b)-5:]
	}
	id := hex.EncodeToString(b)
	for len(id) < 6 {
		id += "0"
	}
	return id[:6]
}

func bootstrapTokenSecretName(machineName string) string {
	return bootstrapTokenPrefix + bootstrapTokenID(machineName)
}

// bootstrapTokens makes, hands out and deletes the machines' bootstrap tokens in the target
// cluster.
type bootstrapTokens struct{ *deps }

// userData returns a copy of secret whose userData has the placeholders replaced: the
// machine's bootstrap token (created in the target cluster when userData asks for one) and its
// name, each in plain and URL-encoded form (Ignition embeds userData URL-encoded).
func (r *bootstrapTokens) userData(ctx context.Context, m *v1alpha1.Machine, secret *corev1.Secret) (*corev1.Secret, error) {
	out := secret.DeepCopy()
	ud, ok := out.Data[classsecret.UserDataKey]
	if !ok {
		return out, nil
	}
	if r.target != nil && containsPlaceholder(ud, v1alpha1.UserDataBootstrapTokenPlaceholder) {
		token, err := r.ensure(ctx, m)
		if err != nil {
			return nil, err
		}
		ud = replacePlaceholder(ud, v1alpha1.UserDataBootstrapTokenPlaceholder, token)
	}
	ud = replacePlaceholder(ud, v1alpha1.UserDataMachineNamePlaceholder, m.Name)
	out.Data[classsecret.UserDataKey] = ud
	return out, nil
}

func containsPlaceholder(data []byte, ph string) bool {
	return bytes.Contains(data, []byte(ph)) || bytes.Contains(data, []byte(url.QueryEscape(ph)))
}

func replacePlaceholder(data []byte, ph, value string) []byte {
	data = bytes.ReplaceAll(data, []byte(ph), []byte(value))
	return bytes.ReplaceAll(data, []byte(url.QueryEscape(ph)), []byte(url.QueryEscape(value)))
}

// ensure gets or creates the machine's bootstrap token in the target cluster. It
// expires with the machine's effective creation timeout (counted from the machine's creation,
// so a retried creation reuses the same token): a node that has not joined by then is Failed
// anyway, and a long creation timeout gets a long-lived token.
func (r *bootstrapTokens) ensure(ctx context.Context, m *v1alpha1.Machine) (string, error) {
	name := bootstrapTokenSecretName(m.Name)
	secrets := r.targetCS.CoreV1().Secrets(bootstrapTokenNamespace)
	expiration := m.CreationTimestamp.Add(r.opts.creationTimeout(m))
	if m.CreationTimestamp.IsZero() {
		expiration = r.now().Add(r.opts.creationTimeout(m))
	}
	existing, err := secrets.Get(ctx, name, metav1.GetOptions{})
	switch {
	case err == nil:
		if owner := existing.Labels[labelTokenMachine]; owner == "" || owner == m.Name {
			id, sec := string(existing.Data["token-id"]), string(existing.Data["token-secret"])
			if id != "" && sec != "" {
				return id + "." + sec, nil
			}
		}
		// Made for another machine whose name ends alike, or unusable: replace it.
		if err := secrets.Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return "", fmt.Errorf("machine: replace bootstrap token %s: %w", name, err)
		}
	case !apierrors.IsNotFound(err):
		return "", fmt.Errorf("machine: read bootstrap token %s: %w", name, err)
	}
	tokenSecret, err := randomString(16)
	if err != nil {
		return "", err
	}
	id := bootstrapTokenID(m.Name)
	s := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name:      name,
			Namespace: bootstrapTokenNamespace,
			Labels:    map[string]string{labelTokenMachine: m.Name},
		},
		Type: bootstrapTokenType,
		StringData: map[string]string{
			"description":                    "bootstrap token of machine " + m.Namespace + "/" + m.Name + ", made by machinist",
			"token-id":                       id,
			"token-secret":                   tokenSecret,
			"expiration":                     expiration.UTC().Format(time.RFC3339),
			"usage-bootstrap-authentication": "true",
			"usage-bootstrap-signing":        "true",
		},
	}
	if g := strings.TrimSpace(r.opts.BootstrapTokenAuthExtraGroups); g != "" {
		s.StringData["auth-extra-groups"] = g
	}
	if _, err := secrets.Create(ctx, s, metav1.CreateOptions{}); err != nil {
		if apierrors.IsAlreadyExists(err) {
			return "", fmt.Errorf("machine: bootstrap token %s was created concurrently, will retry: %w", name, err)
		}
		return "", fmt.Errorf("machine: create bootstrap token %s: %w", name, err)
	}
	return id + "." + tokenSecret, nil
}

// delete removes the machine's token once its node joined (or the machine goes).
func (r *bootstrapTokens) delete(ctx context.Context, m *v1alpha1.Machine) error {
	if r.targetCS == nil || !r.mayHave(ctx, m) {
		return nil
	}
	name := bootstrapTokenSecretName(m.Name)
	secrets := r.targetCS.CoreV1().Secrets(bootstrapTokenNamespace)
	s, err := secrets.Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("machine: read bootstrap token %s: %w", name, err)
	}
	if owner := s.Labels[labelTokenMachine]; owner != "" && owner != m.Name {
		return nil // another machine's token
	}
	uid := s.UID
	err = secrets.Delete(ctx, name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("machine: delete bootstrap token %s: %w", name, err)
	}
	return nil
}

// mayHave reports whether the machine's userData asks for a token (read from the
// cache), so machines without one cost no API call at join and deletion. When the class or its
// secret cannot be read it answers true.
func (r *bootstrapTokens) mayHave(ctx context.Context, m *v1alpha1.Machine) bool {
	class := &v1alpha1.MachineClass{}
	if err := r.client.Get(ctx, client.ObjectKey{Namespace: m.Namespace, Name: m.Spec.Class.Name}, class); err != nil {
		return true
	}
	secret, err := r.secretFor(ctx, class)
	if err != nil {
		return true
	}
	ud, ok := secret.Data[classsecret.UserDataKey]
	return ok && containsPlaceholder(ud, v1alpha1.UserDataBootstrapTokenPlaceholder)
}

func randomString(n int) (string, error) {
	out := make([]byte, n)
	alphabetSize := big.NewInt(int64(len(tokenSecretChars)))
	for i := range out {
		v, err := rand.Int(rand.Reader, alphabetSize)
		if err != nil {
			return "", fmt.Errorf("machine: random token: %w", err)
		}
		out[i] = tokenSecretChars[v.Int64()]
	}
	return string(out), nil
}
