package dialin

import (
	"context"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"

	"github.com/machinist-io/machinist/core/registry"
	"github.com/machinist-io/machinist/grpcbridge"
	"github.com/machinist-io/machinist/grpcbridge/mtls"
	dialinv1 "github.com/machinist-io/machinist/grpcbridge/proto/machinist/dialin/v1"
)

// GetMachineClass returns the class version an operation referenced (by digest), or the current
// class of a name from the ObjectSource. A peer gets only classes of providers its certificate
// authorizes.
func (s *Server) GetMachineClass(ctx context.Context, req *dialinv1.GetMachineClassRequest) (*dialinv1.GetMachineClassResponse, error) {
	ref := req.GetMachineClass()
	if ref == nil {
		return nil, status.Error(codes.InvalidArgument, "dialin: GetMachineClass needs a machine_class reference")
	}
	if len(ref.Digest) > 0 {
		raw, providers, ok := s.classes.get(ref.Digest)
		if !ok {
			return nil, status.Errorf(codes.NotFound, "dialin: no operation in flight references machineClass %s/%s at that version", ref.Namespace, ref.Name)
		}
		if !s.authorizedForAny(ctx, providers) {
			return nil, s.pullDenied(ctx, "machineClass", ref, providers)
		}
		return &dialinv1.GetMachineClassResponse{MachineClass: raw}, nil
	}
	if s.opts.Source == nil {
		return nil, status.Errorf(codes.NotFound, "dialin: this controller serves only classes that operations reference; machineClass %s/%s was asked for by name", ref.Namespace, ref.Name)
	}
	class, err := s.opts.Source.MachineClass(ctx, ref.Namespace, ref.Name)
	if err != nil {
		return nil, grpcbridge.ToGRPCStatus(err)
	}
	provider := registry.Normalize(class.Provider)
	if !s.authorizedFor(ctx, provider) {
		return nil, s.pullDenied(ctx, "machineClass", ref, []string{provider})
	}
	raw, err := grpcbridge.EncodeMachineClass(class)
	if err != nil {
		return nil, grpcbridge.ToGRPCStatus(err)
	}
	return &dialinv1.GetMachineClassResponse{MachineClass: raw}, nil
}

// GetSecret returns the secret version an operation referenced (by digest), or by name a secret
// that the named class references (secretRef or credentialsSecretRef), when the peer is
// authorized for that class's provider. Secret contents are never logged.
func (s *Server) GetSecret(ctx context.Context, req *dialinv1.GetSecretRequest) (*dialinv1.GetSecretResponse, error) {
	ref := req.GetSecret()
	if ref == nil {
		return nil, status.Error(codes.InvalidArgument, "dialin: GetSecret needs a secret reference")
	}
	if len(ref.Digest) > 0 {
		raw, providers, ok := s.secrets.get(ref.Digest)
		if !ok {
			return nil, status.Errorf(codes.NotFound, "dialin: no operation in flight references secret %s/%s at that version", ref.Namespace, ref.Name)
		}
		if !s.authorizedForAny(ctx, providers) {
			return nil, s.pullDenied(ctx, "secret", ref, providers)
		}
		return &dialinv1.GetSecretResponse{Secret: raw}, nil
	}
	classRef := req.GetMachineClass()
	if s.opts.Source == nil || classRef == nil {
		return nil, status.Errorf(codes.NotFound, "dialin: secret %s/%s asked for by name: name the class that references it (and the controller must have an object source)", ref.Namespace, ref.Name)
	}
	class, err := s.opts.Source.MachineClass(ctx, classRef.Namespace, classRef.Name)
	if err != nil {
		return nil, grpcbridge.ToGRPCStatus(err)
	}
	provider := registry.Normalize(class.Provider)
	if !s.authorizedFor(ctx, provider) {
		return nil, s.pullDenied(ctx, "secret", ref, []string{provider})
	}
	if !refersTo(class.SecretRef, class.Namespace, ref) && !refersTo(class.CredentialsSecretRef, class.Namespace, ref) {
		s.log.Warn("dialin: secret pull refused: the class does not reference it", "peer", mtls.PeerIdentity(ctx),
			"class", classRef.Namespace+"/"+classRef.Name, "secret", ref.Namespace+"/"+ref.Name)
		return nil, status.Errorf(codes.PermissionDenied, "dialin: machineClass %s/%s does not reference secret %s/%s", classRef.Namespace, classRef.Name, ref.Namespace, ref.Name)
	}
	secret, err := s.opts.Source.Secret(ctx, ref.Namespace, ref.Name)
	if err != nil {
		return nil, grpcbridge.ToGRPCStatus(err)
	}
	raw, err := grpcbridge.EncodeSecret(secret)
	if err != nil {
		return nil, grpcbridge.ToGRPCStatus(err)
	}
	return &dialinv1.GetSecretResponse{Secret: raw}, nil
}

// refersTo reports whether a class's secret reference names ref (an empty namespace is the
// class's own).
func refersTo(r *corev1.SecretReference, classNamespace string, ref *dialinv1.ObjectRef) bool {
	if r == nil {
		return false
	}
	ns := r.Namespace
	if ns == "" {
		ns = classNamespace
	}
	return r.Name == ref.Name && ns == ref.Namespace
}

func (s *Server) authorizedForAny(ctx context.Context, providers []string) bool {
	for _, p := range providers {
		if s.authorizedFor(ctx, p) {
			return true
		}
	}
	return false
}

func (s *Server) pullDenied(ctx context.Context, kind string, ref *dialinv1.ObjectRef, providers []string) error {
	s.log.Warn("dialin: pull refused: certificate does not authorize the object's provider", "peer", mtls.PeerIdentity(ctx),
		"kind", kind, "object", ref.Namespace+"/"+ref.Name, "providers", providers, "authorized", mtls.AuthorizedProviders(mtls.PeerCertificate(ctx)))
	return status.Errorf(codes.PermissionDenied, "dialin: the client certificate (%s) does not authorize provider %v, which %s %s/%s belongs to",
		mtls.PeerIdentity(ctx), providers, kind, ref.Namespace, ref.Name)
}
