package static

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"net/url"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
)

const userDataKey = "userData"

// needsToken reports whether a secret's userData asks for a bootstrap token.
func needsToken(s *corev1.Secret) bool {
	ud := s.Data[userDataKey]
	return bytes.Contains(ud, []byte(v1alpha1.UserDataBootstrapTokenPlaceholder)) ||
		bytes.Contains(ud, []byte(url.QueryEscape(v1alpha1.UserDataBootstrapTokenPlaceholder)))
}

// machineSecret returns a copy of the group's secret with the userData placeholders replaced,
// as the machine controller does: the machine name, and a bootstrap token minted in the
// target cluster when userData asks for one.
func machineSecret(ctx context.Context, g *Group, machine string, target kubernetes.Interface, ttl time.Duration) (*corev1.Secret, error) {
	s := g.Secret.DeepCopy()
	ud, ok := s.Data[userDataKey]
	if !ok {
		return s, nil
	}
	if needsToken(s) {
		if target == nil {
			return nil, fmt.Errorf("userData of group %q needs a bootstrap token: pass --target-kubeconfig so one can be created", g.Name)
		}
		token, err := createBootstrapToken(ctx, target, machine, ttl)
		if err != nil {
			return nil, err
		}
		ud = replace(ud, v1alpha1.UserDataBootstrapTokenPlaceholder, token)
	}
	s.Data[userDataKey] = replace(ud, v1alpha1.UserDataMachineNamePlaceholder, machine)
	return s, nil
}

func replace(data []byte, placeholder, value string) []byte {
	data = bytes.ReplaceAll(data, []byte(placeholder), []byte(value))
	return bytes.ReplaceAll(data, []byte(url.QueryEscape(placeholder)), []byte(url.QueryEscape(value)))
}

const tokenChars = "0123456789abcdefghijklmnopqrstuvwxyz"

func randomString(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	for i := range b {
		b[i] = tokenChars[int(b[i])%len(tokenChars)]
	}
	return string(b)
}

// createBootstrapToken creates a kubeadm-style bootstrap token Secret in kube-system that
// expires after ttl (the token cleaner removes it then) and returns "<id>.<secret>".
func createBootstrapToken(ctx context.Context, target kubernetes.Interface, machine string, ttl time.Duration) (string, error) {
	for range 5 {
		id, secret := randomString(6), randomString(16)
		s := &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: "bootstrap-token-" + id, Namespace: metav1.NamespaceSystem},
			Type:       corev1.SecretTypeBootstrapToken,
			StringData: map[string]string{
				"token-id":                       id,
				"token-secret":                   secret,
				"expiration":                     time.Now().Add(ttl).UTC().Format(time.RFC3339),
				"usage-bootstrap-authentication": "true",
				"usage-bootstrap-signing":        "true",
				"description":                    "machinist autoscaler: bootstrap token of machine " + machine,
			},
		}
		_, err := target.CoreV1().Secrets(metav1.NamespaceSystem).Create(ctx, s, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			continue
		}
		if err != nil {
			return "", fmt.Errorf("create bootstrap token for machine %s: %w", machine, err)
		}
		return id + "." + secret, nil
	}
	return "", fmt.Errorf("create bootstrap token for machine %s: every random token id was taken", machine)
}
