// Package clusterautoscaler is a client of the externalgrpc protocol that behaves like Cluster
// Autoscaler's externalgrpc cloud provider: the same cloud-config, the same TLS setup, the same
// per-call deadline, the same client-side caches and the same conversions of answers (status
// without state drops its error info, Unimplemented only where Cluster Autoscaler accepts it, template node
// decoded with (*v1.Node).Unmarshal, old or new field numbers depending on the emulated
// release). Tests drive machinist's server through it the way Cluster Autoscaler does; it is also a debugging
// aid against a live server.
package clusterautoscaler

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	pb "github.com/machinist-io/machinist/grpcbridge/proto/clusterautoscaler/cloudprovider/v1/externalgrpc"
)

// CloudConfig is Cluster Autoscaler's --cloud-config file for the externalgrpc provider.
type CloudConfig struct {
	// Address is host:port of the server; the host is the TLS server name.
	Address string `json:"address"`
	// Cert, Key and CACert are PEM file paths; TLS is used iff Cert is set.
	Cert   string `json:"cert,omitempty"`
	Key    string `json:"key,omitempty"`
	CACert string `json:"cacert,omitempty"`
	// GRPCTimeout is the per-call deadline as a Go duration; default 5s.
	GRPCTimeout metav1.Duration `json:"grpc_timeout,omitempty"`
}

// ParseCloudConfig reads a cloud-config file the way Cluster Autoscaler does (YAML, unknown keys ignored).
func ParseCloudConfig(data []byte) (CloudConfig, error) {
	var c CloudConfig
	if err := yaml.Unmarshal(data, &c); err != nil {
		return CloudConfig{}, fmt.Errorf("clusterautoscaler: cloud-config: %w", err)
	}
	return c, nil
}

// Release selects the generation of Cluster Autoscaler's client to emulate.
type Release int

const (
	// Current is Cluster Autoscaler 1.35 and later: new field numbers only.
	Current Release = iota
	// Legacy is Cluster Autoscaler 1.29 to 1.34.1: old field numbers only (template node in nodeInfo = 1,
	// durations as nanoseconds in fields 3/4/5, dereferenced without nil checks).
	Legacy
)

// ErrNotImplemented is what Cluster Autoscaler makes of Unimplemented from the four optional RPCs.
var ErrNotImplemented = errors.New("not implemented")

// Client talks to an externalgrpc server like Cluster Autoscaler does.
type Client struct {
	conn    *grpc.ClientConn
	api     pb.CloudProviderClient
	timeout time.Duration
	release Release

	mu         sync.Mutex
	groups     []*pb.NodeGroup
	groupsOK   bool
	forNode    map[string]*pb.NodeGroup
	gpuLabel   *string
	calls      map[string]int
	templateOf map[string]templateAnswer
}

type templateAnswer struct {
	node *corev1.Node
	err  error
}

// Dial creates a client for cfg as Cluster Autoscaler does: TLS iff cfg.Cert is set, with ServerName = host of
// Address, the client certificate always presented and RootCAs = cfg.CACert. Like Cluster Autoscaler it does
// not wait for the server.
func Dial(cfg CloudConfig, release Release) (*Client, error) {
	host, _, err := net.SplitHostPort(cfg.Address)
	if err != nil {
		return nil, fmt.Errorf("clusterautoscaler: address %q: %w", cfg.Address, err)
	}
	creds := insecure.NewCredentials()
	if cfg.Cert != "" {
		cert, err := tls.LoadX509KeyPair(cfg.Cert, cfg.Key)
		if err != nil {
			return nil, fmt.Errorf("clusterautoscaler: client certificate: %w", err)
		}
		caPEM, err := os.ReadFile(cfg.CACert)
		if err != nil {
			return nil, fmt.Errorf("clusterautoscaler: cacert: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(caPEM) {
			return nil, fmt.Errorf("clusterautoscaler: cacert %s holds no certificate", cfg.CACert)
		}
		creds = credentials.NewTLS(&tls.Config{ServerName: host, Certificates: []tls.Certificate{cert}, RootCAs: pool})
	}
	conn, err := grpc.NewClient(cfg.Address, grpc.WithTransportCredentials(creds))
	if err != nil {
		return nil, fmt.Errorf("clusterautoscaler: dial %s: %w", cfg.Address, err)
	}
	timeout := cfg.GRPCTimeout.Duration
	if timeout == 0 {
		timeout = 5 * time.Second
	}
	return &Client{
		conn: conn, api: pb.NewCloudProviderClient(conn), timeout: timeout, release: release,
		forNode: map[string]*pb.NodeGroup{}, calls: map[string]int{}, templateOf: map[string]templateAnswer{},
	}, nil
}

// Close closes the connection.
func (c *Client) Close() error { return c.conn.Close() }

// Calls returns how many RPCs of each method reached the wire (cache hits excluded).
func (c *Client) Calls() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]int, len(c.calls))
	for k, v := range c.calls {
		out[k] = v
	}
	return out
}

func (c *Client) ctx(method string) (context.Context, context.CancelFunc) {
	c.mu.Lock()
	c.calls[method]++
	c.mu.Unlock()
	return context.WithTimeout(context.Background(), c.timeout)
}

// Refresh wipes the per-loop caches and calls Refresh, as Cluster Autoscaler does at the start of every loop.
func (c *Client) Refresh() error {
	c.mu.Lock()
	c.groups, c.groupsOK = nil, false
	c.forNode = map[string]*pb.NodeGroup{}
	c.templateOf = map[string]templateAnswer{}
	c.mu.Unlock()
	ctx, cancel := c.ctx("Refresh")
	defer cancel()
	_, err := c.api.Refresh(ctx, &pb.RefreshRequest{})
	return err
}

// NodeGroups returns the groups, cached until the next Refresh. Like Cluster Autoscaler it swallows errors (an
// error reads as no groups); the error is returned for tests.
func (c *Client) NodeGroups() ([]*pb.NodeGroup, error) {
	c.mu.Lock()
	if c.groupsOK {
		defer c.mu.Unlock()
		return c.groups, nil
	}
	c.mu.Unlock()
	ctx, cancel := c.ctx("NodeGroups")
	defer cancel()
	resp, err := c.api.NodeGroups(ctx, &pb.NodeGroupsRequest{})
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.groups, c.groupsOK = resp.GetNodeGroups(), true
	return c.groups, nil
}

// ExternalNode is the part of a Node Cluster Autoscaler sends.
func ExternalNode(n *corev1.Node) *pb.ExternalGrpcNode {
	return &pb.ExternalGrpcNode{ProviderID: n.Spec.ProviderID, Name: n.Name, Labels: n.Labels, Annotations: n.Annotations}
}

// FakeNode is the node Cluster Autoscaler builds for an instance that has no Node (yet): name and providerID
// are the instance id.
func FakeNode(instanceID, reason string) *corev1.Node {
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: instanceID, Annotations: map[string]string{"k8s.io/cluster-autoscaler/fake-node-reason": reason}},
		Spec:       corev1.NodeSpec{ProviderID: instanceID},
	}
}

// NodeGroupForNode returns the node's group or nil when it is not managed. Only managed answers
// are cached (by name + providerID), as in Cluster Autoscaler.
func (c *Client) NodeGroupForNode(n *corev1.Node) (*pb.NodeGroup, error) {
	cacheKey := n.Name + n.Spec.ProviderID
	c.mu.Lock()
	if g, ok := c.forNode[cacheKey]; ok {
		c.mu.Unlock()
		return g, nil
	}
	c.mu.Unlock()
	ctx, cancel := c.ctx("NodeGroupForNode")
	defer cancel()
	resp, err := c.api.NodeGroupForNode(ctx, &pb.NodeGroupForNodeRequest{Node: ExternalNode(n)})
	if err != nil {
		return nil, err
	}
	g := resp.GetNodeGroup()
	if g.GetId() == "" {
		return nil, nil
	}
	c.mu.Lock()
	c.forNode[cacheKey] = g
	c.mu.Unlock()
	return g, nil
}

// TargetSize returns the group's target size.
func (c *Client) TargetSize(id string) (int, error) {
	ctx, cancel := c.ctx("NodeGroupTargetSize")
	defer cancel()
	resp, err := c.api.NodeGroupTargetSize(ctx, &pb.NodeGroupTargetSizeRequest{Id: id})
	if err != nil {
		return 0, err
	}
	return int(resp.GetTargetSize()), nil
}

// IncreaseSize adds delta nodes.
func (c *Client) IncreaseSize(id string, delta int) error {
	ctx, cancel := c.ctx("NodeGroupIncreaseSize")
	defer cancel()
	_, err := c.api.NodeGroupIncreaseSize(ctx, &pb.NodeGroupIncreaseSizeRequest{Id: id, Delta: int32(delta)})
	return err
}

// DeleteNodes deletes the nodes.
func (c *Client) DeleteNodes(id string, nodes ...*corev1.Node) error {
	req := &pb.NodeGroupDeleteNodesRequest{Id: id}
	for _, n := range nodes {
		req.Nodes = append(req.Nodes, ExternalNode(n))
	}
	ctx, cancel := c.ctx("NodeGroupDeleteNodes")
	defer cancel()
	_, err := c.api.NodeGroupDeleteNodes(ctx, req)
	return err
}

// DecreaseTargetSize lowers the target by -delta (delta < 0).
func (c *Client) DecreaseTargetSize(id string, delta int) error {
	ctx, cancel := c.ctx("NodeGroupDecreaseTargetSize")
	defer cancel()
	_, err := c.api.NodeGroupDecreaseTargetSize(ctx, &pb.NodeGroupDecreaseTargetSizeRequest{Id: id, Delta: int32(delta)})
	return err
}

// InstanceState is Cluster Autoscaler's cloudprovider.InstanceState.
type InstanceState int

// Cluster Autoscaler's instance states.
const (
	InstanceRunning  InstanceState = 1
	InstanceCreating InstanceState = 2
	InstanceDeleting InstanceState = 3
)

// Instance is Cluster Autoscaler's cloudprovider.Instance.
type Instance struct {
	ID string
	// Status is nil when the server sent an unspecified state.
	Status *InstanceStatus
}

// InstanceStatus is Cluster Autoscaler's cloudprovider.InstanceStatus.
type InstanceStatus struct {
	State InstanceState
	// ErrorInfo is nil unless the server sent a non-empty error code.
	ErrorInfo *InstanceErrorInfo
}

// InstanceErrorInfo is Cluster Autoscaler's cloudprovider.InstanceErrorInfo.
type InstanceErrorInfo struct {
	ErrorClass   int
	ErrorCode    string
	ErrorMessage string
}

// Nodes returns the group's instances converted exactly as Cluster Autoscaler converts them.
func (c *Client) Nodes(id string) ([]Instance, error) {
	ctx, cancel := c.ctx("NodeGroupNodes")
	defer cancel()
	resp, err := c.api.NodeGroupNodes(ctx, &pb.NodeGroupNodesRequest{Id: id})
	if err != nil {
		return nil, err
	}
	out := make([]Instance, 0, len(resp.GetInstances()))
	for _, in := range resp.GetInstances() {
		inst := Instance{ID: in.GetId()}
		st := in.GetStatus()
		if st.GetInstanceState() != pb.InstanceStatus_unspecified {
			inst.Status = &InstanceStatus{State: InstanceState(st.GetInstanceState())}
			if ei := st.GetErrorInfo(); ei.GetErrorCode() != "" {
				inst.Status.ErrorInfo = &InstanceErrorInfo{ErrorClass: int(ei.GetInstanceErrorClass()), ErrorCode: ei.GetErrorCode(), ErrorMessage: ei.GetErrorMessage()}
			}
		}
		out = append(out, inst)
	}
	return out, nil
}

// TemplateNodeInfo returns the group's template node, or ErrNotImplemented. Like Cluster Autoscaler it caches
// the answer (even a nil one) until the next Refresh; unlike Cluster Autoscaler it reports an OK answer without
// a node as an error instead of dereferencing it.
func (c *Client) TemplateNodeInfo(id string) (*corev1.Node, error) {
	c.mu.Lock()
	if a, ok := c.templateOf[id]; ok {
		c.mu.Unlock()
		return a.node, a.err
	}
	c.mu.Unlock()
	node, err := c.templateNodeInfo(id)
	c.mu.Lock()
	c.templateOf[id] = templateAnswer{node, err}
	c.mu.Unlock()
	return node, err
}

func (c *Client) templateNodeInfo(id string) (*corev1.Node, error) {
	ctx, cancel := c.ctx("NodeGroupTemplateNodeInfo")
	defer cancel()
	resp, err := c.api.NodeGroupTemplateNodeInfo(ctx, &pb.NodeGroupTemplateNodeInfoRequest{Id: id})
	if status.Code(err) == codes.Unimplemented {
		return nil, ErrNotImplemented
	}
	if err != nil {
		return nil, err
	}
	raw := resp.GetNodeBytes()
	if c.release == Legacy {
		raw = resp.GetNodeInfo()
	}
	if len(raw) == 0 {
		return nil, fmt.Errorf("clusterautoscaler: NodeGroupTemplateNodeInfo %q answered OK without a node: Cluster Autoscaler would dereference nil", id)
	}
	node := &corev1.Node{}
	if err := node.Unmarshal(raw); err != nil {
		return nil, fmt.Errorf("clusterautoscaler: decode template node: %w", err)
	}
	return node, nil
}

// Options are Cluster Autoscaler's config.NodeGroupAutoscalingOptions that travel over the wire.
type Options struct {
	ScaleDownUtilizationThreshold    float64
	ScaleDownGpuUtilizationThreshold float64
	ScaleDownUnneededTime            time.Duration
	ScaleDownUnreadyTime             time.Duration
	MaxNodeProvisionTime             time.Duration
	ZeroOrMaxNodeScaling             bool
	IgnoreDaemonSetsUtilization      bool
}

// GetOptions sends Cluster Autoscaler's defaults and returns the group's options: nil when the answer has none
// (Cluster Autoscaler keeps its defaults), ErrNotImplemented for Unimplemented.
func (c *Client) GetOptions(id string, defaults Options) (*Options, error) {
	d := &pb.NodeGroupAutoscalingOptions{
		ScaleDownUtilizationThreshold:    defaults.ScaleDownUtilizationThreshold,
		ScaleDownGpuUtilizationThreshold: defaults.ScaleDownGpuUtilizationThreshold,
		ZeroOrMaxNodeScaling:             defaults.ZeroOrMaxNodeScaling,
		IgnoreDaemonSetsUtilization:      defaults.IgnoreDaemonSetsUtilization,
	}
	if c.release == Legacy {
		d.ScaleDownUnneededTime = &pb.LegacyDuration{Duration: int64(defaults.ScaleDownUnneededTime)}
		d.ScaleDownUnreadyTime = &pb.LegacyDuration{Duration: int64(defaults.ScaleDownUnreadyTime)}
		d.MaxNodeProvisionTime = &pb.LegacyDuration{Duration: int64(defaults.MaxNodeProvisionTime)}
	} else {
		d.ScaleDownUnneededDuration = durationpb.New(defaults.ScaleDownUnneededTime)
		d.ScaleDownUnreadyDuration = durationpb.New(defaults.ScaleDownUnreadyTime)
		d.MaxNodeProvisionDuration = durationpb.New(defaults.MaxNodeProvisionTime)
	}
	ctx, cancel := c.ctx("NodeGroupGetOptions")
	defer cancel()
	resp, err := c.api.NodeGroupGetOptions(ctx, &pb.NodeGroupAutoscalingOptionsRequest{Id: id, Defaults: d})
	if status.Code(err) == codes.Unimplemented {
		return nil, ErrNotImplemented
	}
	if err != nil {
		return nil, err
	}
	o := resp.GetNodeGroupAutoscalingOptions()
	if o == nil {
		return nil, nil
	}
	out := &Options{
		ScaleDownUtilizationThreshold:    o.GetScaleDownUtilizationThreshold(),
		ScaleDownGpuUtilizationThreshold: o.GetScaleDownGpuUtilizationThreshold(),
		ZeroOrMaxNodeScaling:             o.GetZeroOrMaxNodeScaling(),
		IgnoreDaemonSetsUtilization:      o.GetIgnoreDaemonSetsUtilization(),
	}
	if c.release == Legacy {
		// Cluster Autoscaler 1.29-1.34.1 reads .Duration of the old fields without a nil check.
		if o.GetScaleDownUnneededTime() == nil || o.GetScaleDownUnreadyTime() == nil || o.GetMaxNodeProvisionTime() == nil {
			return nil, fmt.Errorf("clusterautoscaler: options of %q lack a pre-1.35 duration field: Cluster Autoscaler 1.34 would dereference nil", id)
		}
		out.ScaleDownUnneededTime = time.Duration(o.GetScaleDownUnneededTime().GetDuration())
		out.ScaleDownUnreadyTime = time.Duration(o.GetScaleDownUnreadyTime().GetDuration())
		out.MaxNodeProvisionTime = time.Duration(o.GetMaxNodeProvisionTime().GetDuration())
		return out, nil
	}
	out.ScaleDownUnneededTime = o.GetScaleDownUnneededDuration().AsDuration()
	out.ScaleDownUnreadyTime = o.GetScaleDownUnreadyDuration().AsDuration()
	out.MaxNodeProvisionTime = o.GetMaxNodeProvisionDuration().AsDuration()
	return out, nil
}

// GPULabel returns the GPU label, cached after the first success; errors read as "".
func (c *Client) GPULabel() string {
	c.mu.Lock()
	if c.gpuLabel != nil {
		defer c.mu.Unlock()
		return *c.gpuLabel
	}
	c.mu.Unlock()
	ctx, cancel := c.ctx("GPULabel")
	defer cancel()
	resp, err := c.api.GPULabel(ctx, &pb.GPULabelRequest{})
	if err != nil {
		return ""
	}
	label := resp.GetLabel()
	c.mu.Lock()
	c.gpuLabel = &label
	c.mu.Unlock()
	return label
}

// GetAvailableGPUTypes returns the GPU type names; errors read as none.
func (c *Client) GetAvailableGPUTypes() map[string]struct{} {
	ctx, cancel := c.ctx("GetAvailableGPUTypes")
	defer cancel()
	resp, err := c.api.GetAvailableGPUTypes(ctx, &pb.GetAvailableGPUTypesRequest{})
	if err != nil {
		return nil
	}
	out := map[string]struct{}{}
	for k := range resp.GetGpuTypes() {
		out[k] = struct{}{}
	}
	return out
}

// NodePrice asks for a node's price; ErrNotImplemented when the server has no pricing.
func (c *Client) NodePrice(n *corev1.Node, start, end time.Time) (float64, error) {
	ctx, cancel := c.ctx("PricingNodePrice")
	defer cancel()
	req := &pb.PricingNodePriceRequest{Node: ExternalNode(n)}
	if c.release == Legacy {
		req.StartTime, req.EndTime = timestamppb.New(start), timestamppb.New(end)
	} else {
		req.StartTimestamp, req.EndTimestamp = timestamppb.New(start), timestamppb.New(end)
	}
	resp, err := c.api.PricingNodePrice(ctx, req)
	if status.Code(err) == codes.Unimplemented {
		return 0, ErrNotImplemented
	}
	return resp.GetPrice(), err
}

// PodPrice asks for a pod's price; ErrNotImplemented when the server has no pricing.
func (c *Client) PodPrice(p *corev1.Pod, start, end time.Time) (float64, error) {
	raw, err := p.Marshal()
	if err != nil {
		return 0, err
	}
	ctx, cancel := c.ctx("PricingPodPrice")
	defer cancel()
	req := &pb.PricingPodPriceRequest{}
	if c.release == Legacy {
		req.Pod, req.StartTime, req.EndTime = raw, timestamppb.New(start), timestamppb.New(end)
	} else {
		req.PodBytes, req.StartTimestamp, req.EndTimestamp = raw, timestamppb.New(start), timestamppb.New(end)
	}
	resp, err := c.api.PricingPodPrice(ctx, req)
	if status.Code(err) == codes.Unimplemented {
		return 0, ErrNotImplemented
	}
	return resp.GetPrice(), err
}

// Cleanup is called once when Cluster Autoscaler exits.
func (c *Client) Cleanup() error {
	ctx, cancel := c.ctx("Cleanup")
	defer cancel()
	_, err := c.api.Cleanup(ctx, &pb.CleanupRequest{})
	return err
}
