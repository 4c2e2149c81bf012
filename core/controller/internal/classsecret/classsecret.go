// Package classsecret builds the Secret a driver receives for a MachineClass: the data of the
// class's secretRef overlaid by its credentialsSecretRef, as Gardener MCM does. It is shared by
// the Machine controller and the orphan collector.
package classsecret

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
)

// UserDataKey is the secret key holding the machine's userData (cloud-init, Ignition, ...).
const UserDataKey = "userData"

// Get returns a synthetic Secret whose data is secretRef's data overlaid by
// credentialsSecretRef's (later wins). A referenced secret that does not exist contributes no
// data and is not an error, like in MCM; the driver reports missing credentials itself. A
// reference without namespace means the class's namespace.
func Get(ctx context.Context, c client.Reader, class *v1alpha1.MachineClass) (*corev1.Secret, error) {
	merged := map[string][]byte{}
	for _, ref := range []*corev1.SecretReference{class.SecretRef, class.CredentialsSecretRef} {
		if ref == nil || ref.Name == "" {
			continue
		}
		ns := ref.Namespace
		if ns == "" {
			ns = class.Namespace
		}
		var s corev1.Secret
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: ref.Name}, &s); err != nil {
			if apierrors.IsNotFound(err) {
				continue
			}
			return nil, fmt.Errorf("read secret %s/%s of machine class %s: %w", ns, ref.Name, class.Name, err)
		}
		for k, v := range s.Data {
			merged[k] = v
		}
		for k, v := range s.StringData {
			merged[k] = []byte(v)
		}
	}
	return &corev1.Secret{Data: merged}, nil
}

// Refs returns namespace/name of the secrets a class references.
func Refs(class *v1alpha1.MachineClass) []string {
	var out []string
	for _, ref := range []*corev1.SecretReference{class.SecretRef, class.CredentialsSecretRef} {
		if ref == nil || ref.Name == "" {
			continue
		}
		ns := ref.Namespace
		if ns == "" {
			ns = class.Namespace
		}
		out = append(out, ns+"/"+ref.Name)
	}
	return out
}
