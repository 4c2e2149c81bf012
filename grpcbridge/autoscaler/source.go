// Package autoscaler serves machinist's node groups to an unmodified Cluster Autoscaler over its
// externalgrpc cloud-provider protocol.
//
// The gRPC service (Server) is a thin translation layer over a NodeGroupSource. Two sources exist:
// deployments (MachineDeployments run by machinist's controllers) and static (groups served
// straight from a driver, no controller). The wire details every Cluster Autoscaler version depends
// on live here once: old and new field numbers, Unimplemented only where Cluster Autoscaler accepts
// it, never an empty template, options that echo Cluster Autoscaler's defaults. What Cluster
// Autoscaler sends and expects, with the upstream files and commits, is in
// docs/compatibility/cluster-autoscaler-externalgrpc.md.
package autoscaler

import (
	"context"
	"errors"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// NodeGroupSource is a source of node groups. Errors are core/driver *Status values: their code is sent
// to Cluster Autoscaler as the gRPC status code (NotFound for an unknown group, InvalidArgument
// for a bad request, FailedPrecondition for a refusal such as going below the minimum size).
//
// Methods are called concurrently. Lookups (NodeGroups, NodeGroupForNode, Nodes, TargetSize)
// must answer from memory: Cluster Autoscaler calls them many times per loop.
type NodeGroupSource interface {
	// NodeGroups returns every group Cluster Autoscaler may scale, sorted by id. The caller must
	// not modify the slice (a source may hand out the same one until its groups change).
	NodeGroups() []NodeGroup
	// NodeGroupForNode returns the group of a node, of a placeholder instance the source
	// reported, or ok=false when the node is not managed (template nodes, foreign nodes).
	NodeGroupForNode(node Node) (group NodeGroup, ok bool, err error)
	// TargetSize returns the desired size of a group, machines being created included.
	TargetSize(ctx context.Context, id string) (int, error)
	// IncreaseSize adds delta (> 0) machines to the group's target, up to its maximum. It
	// returns once the target is raised, not when the machines are ready.
	IncreaseSize(ctx context.Context, id string, delta int) error
	// DeleteNodes deletes exactly the named nodes of the group and lowers the target by the
	// number of machines newly deleted. It refuses nodes of other groups and going below the
	// minimum size, and skips machines already being deleted.
	DeleteNodes(ctx context.Context, id string, nodes []Node) error
	// DecreaseTargetSize lowers the target by -delta (delta < 0) without deleting registered
	// nodes: only requests not yet fulfilled are dropped.
	DecreaseTargetSize(ctx context.Context, id string, delta int) error
	// Nodes returns every instance of the group, including machines whose node has not
	// registered yet (placeholder ids).
	Nodes(ctx context.Context, id string) ([]Instance, error)
	// TemplateNode returns the node a new machine of the group would become. ErrNoTemplate
	// (wrapped) means the group has none; Cluster Autoscaler then answers scale-from-zero without it.
	TemplateNode(ctx context.Context, id string) (*corev1.Node, error)
	// Options returns the group's overrides of Cluster Autoscaler's autoscaling options.
	Options(ctx context.Context, id string) (Options, error)
	// GPUTypes returns the GPU types (values of the GPU label) the groups offer.
	GPUTypes() []string
	// GroupPrice returns what a new node of the group costs per hour: the group's own price, or
	// that of the class a new node would be created on now. ErrNoPrice (wrapped) when it has none.
	GroupPrice(id string) (Price, error)
	// NodePrice returns what a node of a group costs per hour (the class its machine runs on).
	// NotFound for a node of no group, ErrNoPrice (wrapped) when it has no price.
	NodePrice(node Node) (Price, error)
	// GroupShapes returns the price and template size of a new node of every group that has both.
	GroupShapes() []GroupShape
	// Refresh is called at the start of every Cluster Autoscaler loop. It must be cheap and must not fail for a
	// transient reason the source can ride out: an error stops Cluster Autoscaler's whole loop.
	Refresh(ctx context.Context) error
}

// NodeGroup is a set of identical machines Cluster Autoscaler scales.
type NodeGroup struct {
	// ID is stable for the lifetime of the group.
	ID string
	// MinSize and MaxSize bound the target size.
	MinSize, MaxSize int
	// Debug is shown in Cluster Autoscaler's logs and status.
	Debug string
}

// Node is a node as Cluster Autoscaler sends it: never whole, only these fields. For a placeholder
// instance Cluster Autoscaler sends Name = ProviderID = the instance id.
type Node struct {
	ProviderID  string
	Name        string
	Labels      map[string]string
	Annotations map[string]string
}

// ID returns the instance id the node stands for: its providerID, or its name when the
// providerID is empty.
func (n Node) ID() string {
	if n.ProviderID != "" {
		return n.ProviderID
	}
	return n.Name
}

// IsTemplate reports whether the node is one of Cluster Autoscaler's sanitized template nodes,
// which no provider manages.
func (n Node) IsTemplate() bool { return n.Labels[LabelTemplateNode] == "true" }

// LabelTemplateNode marks the template nodes Cluster Autoscaler builds from TemplateNodeInfo.
const LabelTemplateNode = "cluster-autoscaler.kubernetes.io/template-node"

// InstanceState is the lifecycle state of an instance as Cluster Autoscaler sees it.
type InstanceState int

// The instance states of the protocol.
const (
	StateUnspecified InstanceState = 0
	StateRunning     InstanceState = 1
	StateCreating    InstanceState = 2
	StateDeleting    InstanceState = 3
)

func (s InstanceState) String() string {
	switch s {
	case StateRunning:
		return "Running"
	case StateCreating:
		return "Creating"
	case StateDeleting:
		return "Deleting"
	}
	return "Unspecified"
}

// Instance is one machine of a group.
type Instance struct {
	// ID equals the providerID of the machine's node once it registers; before that it is a
	// placeholder (see Placeholder).
	ID    string
	State InstanceState
	// Error is set when creating the machine failed; Cluster Autoscaler then backs the group off and deletes
	// the instance. Cluster Autoscaler reads it only for Creating instances.
	Error *InstanceError
}

// InstanceError describes why an instance could not be created.
type InstanceError struct {
	// Code is the machine code name (ResourceExhausted, InvalidArgument, ...).
	Code string
	// Message is the provider's message.
	Message string
	// Class is ErrorClassOutOfResources or ErrorClassOther.
	Class int
}

// The error classes Cluster Autoscaler knows.
const (
	// ErrorClassOutOfResources is a stock-out or quota error: Cluster Autoscaler tries another group.
	ErrorClassOutOfResources = 1
	// ErrorClassOther is every other error.
	ErrorClassOther = 99
)

// Options are a group's overrides of Cluster Autoscaler's per-group autoscaling options; nil fields
// keep Cluster Autoscaler's defaults.
type Options struct {
	ScaleDownUtilizationThreshold    *float64
	ScaleDownGpuUtilizationThreshold *float64
	ScaleDownUnneededTime            *time.Duration
	ScaleDownUnreadyTime             *time.Duration
	MaxNodeProvisionTime             *time.Duration
	ZeroOrMaxNodeScaling             *bool
	IgnoreDaemonSetsUtilization      *bool
}

// IsZero reports whether no option is overridden.
func (o Options) IsZero() bool { return o == Options{} }

// ErrNoTemplate is wrapped by TemplateNode errors of groups that have no node template. The
// server answers Unimplemented, which Cluster Autoscaler (1.29+) reads as "not implemented for this group".
var ErrNoTemplate = errors.New("no node template")

// InstanceID is providerID as the machine's node carries it. Cluster Autoscaler takes an
// instance whose ID no node's spec.providerID equals for an unregistered node, and deletes it
// after --max-node-provision-time. Gardener's GCP provider records gce:///project/zone/name on
// machines, GCE's cloud controller manager gce://project/zone/name on nodes (and Cluster
// Autoscaler's own GCE provider reports that form: GceRef.ToProviderId in
// cluster-autoscaler/cloudprovider/gce/gce_cloud_provider.go, kubernetes/autoscaler at
// 55c37cd5eb550756c5ccc5a89e9068d77797e575). Other clouds' IDs are reported as recorded.
func InstanceID(providerID string) string {
	if rest, ok := strings.CutPrefix(providerID, "gce:///"); ok {
		return "gce://" + rest
	}
	return providerID
}
