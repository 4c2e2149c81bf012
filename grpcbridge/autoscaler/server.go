package autoscaler

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"
	corev1 "k8s.io/api/core/v1"

	"github.com/machinist-io/machinist/core/driver"
	pb "github.com/machinist-io/machinist/grpcbridge/proto/clusterautoscaler/cloudprovider/v1/externalgrpc"
)

// Config configures a Server.
type Config struct {
	// Source serves the node groups. Required.
	Source NodeGroupSource
	// GPULabel is the node label that marks GPU nodes (GPULabel RPC); "" reports none.
	GPULabel string
	// Log receives one record per failed call at Info; nil means slog.Default().
	Log *slog.Logger
	// LogCalls logs every call (method, request, code, duration) at Debug, as Cluster Autoscaler itself does at
	// --v=5.
	LogCalls bool
	// Metrics records calls, latency and errors per RPC; nil records nothing.
	Metrics *Metrics
}

// Server implements Cluster Autoscaler's CloudProvider service over a NodeGroupSource.
type Server struct {
	pb.UnimplementedCloudProviderServer
	source   NodeGroupSource
	gpuLabel string
	log      *slog.Logger
	logCalls bool
	metrics  *Metrics
}

// NewServer returns the CloudProvider service of cfg.Source.
func NewServer(cfg Config) *Server {
	log := cfg.Log
	if log == nil {
		log = slog.Default()
	}
	return &Server{source: cfg.Source, gpuLabel: cfg.GPULabel, log: log, logCalls: cfg.LogCalls, metrics: cfg.Metrics}
}

// NewGRPCServer returns a gRPC server with s registered and its logging and metrics
// interceptor installed. Pass grpc.Creds for TLS.
func NewGRPCServer(s *Server, opts ...grpc.ServerOption) *grpc.Server {
	g := grpc.NewServer(append([]grpc.ServerOption{grpc.ChainUnaryInterceptor(s.Intercept)}, opts...)...)
	pb.RegisterCloudProviderServer(g, s)
	return g
}

// Intercept logs and measures every call and turns the source's errors into gRPC statuses.
func (s *Server) Intercept(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	rpc := methodName(info.FullMethod)
	start := time.Now()
	resp, err := handler(ctx, req)
	err = toGRPC(err)
	elapsed := time.Since(start)
	code := status.Code(err)
	s.metrics.observe(rpc, code, elapsed)
	if s.logCalls {
		s.log.Debug("autoscaler call", "rpc", rpc, "request", compact(req), "code", code.String(), "duration", elapsed)
	}
	if err != nil && code != codes.Unimplemented {
		s.log.Info("autoscaler call failed", "rpc", rpc, "code", code.String(), "error", status.Convert(err).Message())
	}
	return resp, err
}

func methodName(full string) string {
	for i := len(full) - 1; i >= 0; i-- {
		if full[i] == '/' {
			return full[i+1:]
		}
	}
	return full
}

// compact renders a request for the call log; requests carry no secrets (node names, labels,
// group ids).
func compact(req any) string {
	if s, ok := req.(fmt.Stringer); ok {
		return s.String()
	}
	return fmt.Sprint(req)
}

// toGRPC maps a source's error (a core/driver status; the machine codes 0-16 are gRPC's) to a
// gRPC status error.
func toGRPC(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	st := driver.StatusOf(err)
	code := codes.Unknown
	if c := st.Code(); c <= driver.Unauthenticated {
		code = codes.Code(c)
	}
	return status.Error(code, st.Message())
}

func group(g NodeGroup) *pb.NodeGroup {
	return &pb.NodeGroup{Id: g.ID, MinSize: int32(g.MinSize), MaxSize: int32(g.MaxSize), Debug: g.Debug}
}

func node(n *pb.ExternalGrpcNode) Node {
	return Node{ProviderID: n.GetProviderID(), Name: n.GetName(), Labels: n.GetLabels(), Annotations: n.GetAnnotations()}
}

// NodeGroups lists every group.
func (s *Server) NodeGroups(context.Context, *pb.NodeGroupsRequest) (*pb.NodeGroupsResponse, error) {
	groups := s.source.NodeGroups()
	// One allocation for every message: landscapes have hundreds of groups.
	msgs := make([]pb.NodeGroup, len(groups))
	resp := &pb.NodeGroupsResponse{NodeGroups: make([]*pb.NodeGroup, len(groups))}
	for i, g := range groups {
		msgs[i].Id, msgs[i].MinSize, msgs[i].MaxSize, msgs[i].Debug = g.ID, int32(g.MinSize), int32(g.MaxSize), g.Debug
		resp.NodeGroups[i] = &msgs[i]
	}
	return resp, nil
}

// NodeGroupForNode answers with the whole group (min, max and debug, which Cluster Autoscaler reads from this
// answer) or with an empty id for a node no group manages.
func (s *Server) NodeGroupForNode(_ context.Context, req *pb.NodeGroupForNodeRequest) (*pb.NodeGroupForNodeResponse, error) {
	if req.GetNode() == nil {
		return nil, status.Error(codes.InvalidArgument, "NodeGroupForNode: node is missing from the request")
	}
	n := node(req.GetNode())
	if n.IsTemplate() {
		return &pb.NodeGroupForNodeResponse{NodeGroup: &pb.NodeGroup{}}, nil
	}
	g, ok, err := s.source.NodeGroupForNode(n)
	if err != nil {
		return nil, err
	}
	if !ok {
		return &pb.NodeGroupForNodeResponse{NodeGroup: &pb.NodeGroup{}}, nil
	}
	return &pb.NodeGroupForNodeResponse{NodeGroup: group(g)}, nil
}

// PricingNodePrice is the price of a node for the interval asked: the template node of a scale-up
// option (the price of a new node of its group) or a node of a group (the price of its
// machine's class), per hour times the interval's hours. A group without a price answers
// Unimplemented: Cluster Autoscaler's price expander leaves that option out.
func (s *Server) PricingNodePrice(_ context.Context, req *pb.PricingNodePriceRequest) (*pb.PricingNodePriceResponse, error) {
	if req.GetNode() == nil {
		return nil, status.Error(codes.InvalidArgument, "PricingNodePrice: node is missing from the request")
	}
	hours, err := interval(req.GetStartTimestamp(), req.GetStartTime(), req.GetEndTimestamp(), req.GetEndTime())
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "PricingNodePrice: %v", err)
	}
	n := node(req.GetNode())
	var p Price
	if id, ok := TemplateGroupID(n); ok {
		p, err = s.source.GroupPrice(id)
	} else {
		p, err = s.source.NodePrice(n)
	}
	if errors.Is(err, ErrNoPrice) {
		return nil, status.Error(codes.Unimplemented, driver.MessageOf(err))
	}
	if err != nil {
		return nil, err
	}
	return &pb.PricingNodePriceResponse{Price: p.PerHour * hours}, nil
}

// PricingPodPrice is the theoretical minimum price of a pod's CPU and memory requests for the
// interval asked (PodPricePerHour). Unimplemented while no group has a price and a template.
func (s *Server) PricingPodPrice(_ context.Context, req *pb.PricingPodPriceRequest) (*pb.PricingPodPriceResponse, error) {
	raw := req.GetPodBytes()
	if len(raw) == 0 {
		raw = req.GetPod()
	}
	if len(raw) == 0 {
		return nil, status.Error(codes.InvalidArgument, "PricingPodPrice: pod_bytes is missing from the request")
	}
	pod := &corev1.Pod{}
	if err := pod.Unmarshal(raw); err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "PricingPodPrice: pod_bytes is not a protobuf-encoded Pod: %v", err)
	}
	hours, err := interval(req.GetStartTimestamp(), req.GetStartTime(), req.GetEndTimestamp(), req.GetEndTime())
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "PricingPodPrice %s/%s: %v", pod.Namespace, pod.Name, err)
	}
	cpu, memory := PodRequests(pod)
	perHour, ok := PodPricePerHour(cpu, memory, s.source.GroupShapes())
	if !ok {
		return nil, status.Error(codes.Unimplemented, "no node group has a price: annotate MachineClasses with "+AnnotationPricePerHour+" (and give them a nodeTemplate with cpu and memory)")
	}
	return &pb.PricingPodPriceResponse{Price: perHour * hours}, nil
}

// interval reads a request's interval, new fields first (Cluster Autoscaler 1.34.2+), the
// pre-1.35 ones as a fallback, and returns its hours.
func interval(start, oldStart, end, oldEnd *timestamppb.Timestamp) (float64, error) {
	if start == nil {
		start = oldStart
	}
	if end == nil {
		end = oldEnd
	}
	if start == nil || end == nil {
		return 0, errors.New("startTimestamp and endTimestamp are required")
	}
	return Hours(start.AsTime(), end.AsTime())
}

// GPULabel reports the configured GPU label.
func (s *Server) GPULabel(context.Context, *pb.GPULabelRequest) (*pb.GPULabelResponse, error) {
	return &pb.GPULabelResponse{Label: s.gpuLabel}, nil
}

// GetAvailableGPUTypes reports the GPU types the groups offer; Cluster Autoscaler uses only the keys.
func (s *Server) GetAvailableGPUTypes(context.Context, *pb.GetAvailableGPUTypesRequest) (*pb.GetAvailableGPUTypesResponse, error) {
	types := s.source.GPUTypes()
	resp := &pb.GetAvailableGPUTypesResponse{GpuTypes: make(map[string]*anypb.Any, len(types))}
	for _, t := range types {
		resp.GpuTypes[t] = &anypb.Any{}
	}
	return resp, nil
}

// Cleanup is called once when Cluster Autoscaler exits. Nothing Cluster Autoscaler started needs
// undoing: machines in flight belong to the groups.
func (s *Server) Cleanup(context.Context, *pb.CleanupRequest) (*pb.CleanupResponse, error) {
	return &pb.CleanupResponse{}, nil
}

// Refresh starts every Cluster Autoscaler loop.
func (s *Server) Refresh(ctx context.Context, _ *pb.RefreshRequest) (*pb.RefreshResponse, error) {
	if err := s.source.Refresh(ctx); err != nil {
		return nil, err
	}
	return &pb.RefreshResponse{}, nil
}

// NodeGroupTargetSize reports the group's target size.
func (s *Server) NodeGroupTargetSize(ctx context.Context, req *pb.NodeGroupTargetSizeRequest) (*pb.NodeGroupTargetSizeResponse, error) {
	size, err := s.source.TargetSize(ctx, req.GetId())
	if err != nil {
		return nil, err
	}
	return &pb.NodeGroupTargetSizeResponse{TargetSize: int32(size)}, nil
}

// NodeGroupIncreaseSize adds delta machines.
func (s *Server) NodeGroupIncreaseSize(ctx context.Context, req *pb.NodeGroupIncreaseSizeRequest) (*pb.NodeGroupIncreaseSizeResponse, error) {
	if req.GetDelta() <= 0 {
		return nil, status.Errorf(codes.InvalidArgument, "NodeGroupIncreaseSize %q: delta must be positive, got %d", req.GetId(), req.GetDelta())
	}
	if err := s.source.IncreaseSize(ctx, req.GetId(), int(req.GetDelta())); err != nil {
		return nil, err
	}
	return &pb.NodeGroupIncreaseSizeResponse{}, nil
}

// NodeGroupDeleteNodes deletes exactly the named nodes.
func (s *Server) NodeGroupDeleteNodes(ctx context.Context, req *pb.NodeGroupDeleteNodesRequest) (*pb.NodeGroupDeleteNodesResponse, error) {
	nodes := make([]Node, 0, len(req.GetNodes()))
	for _, n := range req.GetNodes() {
		nodes = append(nodes, node(n))
	}
	if err := s.source.DeleteNodes(ctx, req.GetId(), nodes); err != nil {
		return nil, err
	}
	return &pb.NodeGroupDeleteNodesResponse{}, nil
}

// NodeGroupDecreaseTargetSize drops unfulfilled requests.
func (s *Server) NodeGroupDecreaseTargetSize(ctx context.Context, req *pb.NodeGroupDecreaseTargetSizeRequest) (*pb.NodeGroupDecreaseTargetSizeResponse, error) {
	if req.GetDelta() >= 0 {
		return nil, status.Errorf(codes.InvalidArgument, "NodeGroupDecreaseTargetSize %q: delta must be negative, got %d", req.GetId(), req.GetDelta())
	}
	if err := s.source.DecreaseTargetSize(ctx, req.GetId(), int(req.GetDelta())); err != nil {
		return nil, err
	}
	return &pb.NodeGroupDecreaseTargetSizeResponse{}, nil
}

// NodeGroupNodes lists every instance with an explicit state: Cluster Autoscaler drops the error info of an
// instance whose state is unspecified.
func (s *Server) NodeGroupNodes(ctx context.Context, req *pb.NodeGroupNodesRequest) (*pb.NodeGroupNodesResponse, error) {
	instances, err := s.source.Nodes(ctx, req.GetId())
	if err != nil {
		return nil, err
	}
	// One allocation per kind of message rather than per instance: groups have thousands.
	msgs := make([]pb.Instance, len(instances))
	states := make([]pb.InstanceStatus, len(instances))
	resp := &pb.NodeGroupNodesResponse{Instances: make([]*pb.Instance, len(instances))}
	for i, in := range instances {
		st := &states[i]
		st.InstanceState = pb.InstanceStatus_InstanceState(in.State)
		if in.Error != nil {
			code := in.Error.Code
			if code == "" {
				code = driver.Unknown.String()
			}
			st.ErrorInfo = &pb.InstanceErrorInfo{ErrorCode: code, ErrorMessage: in.Error.Message, InstanceErrorClass: int32(in.Error.Class)}
		}
		msgs[i].Id, msgs[i].Status = in.ID, st
		resp.Instances[i] = &msgs[i]
	}
	return resp, nil
}

// NodeGroupTemplateNodeInfo returns the template node in both the pre-1.35 (nodeInfo = 1) and
// the 1.35 (nodeBytes = 2) field. It never answers OK without a node: Cluster Autoscaler dereferences it.
func (s *Server) NodeGroupTemplateNodeInfo(ctx context.Context, req *pb.NodeGroupTemplateNodeInfoRequest) (*pb.NodeGroupTemplateNodeInfoResponse, error) {
	n, err := s.source.TemplateNode(ctx, req.GetId())
	if errors.Is(err, ErrNoTemplate) {
		return nil, status.Error(codes.Unimplemented, driver.MessageOf(err))
	}
	if err != nil {
		return nil, err
	}
	if n == nil {
		return nil, status.Errorf(codes.Internal, "NodeGroupTemplateNodeInfo %q: the node-group source returned no node", req.GetId())
	}
	raw, err := n.Marshal()
	if err != nil {
		return nil, status.Errorf(codes.Internal, "NodeGroupTemplateNodeInfo %q: encode node: %v", req.GetId(), err)
	}
	if len(raw) == 0 {
		return nil, status.Errorf(codes.Internal, "NodeGroupTemplateNodeInfo %q: encoded node is empty", req.GetId())
	}
	return &pb.NodeGroupTemplateNodeInfoResponse{NodeInfo: raw, NodeBytes: raw}, nil
}

// NodeGroupGetOptions answers with no options (Cluster Autoscaler keeps all its defaults) unless the group
// overrides some. With overrides it echoes every default Cluster Autoscaler sent, overridden fields replaced,
// in both the pre-1.35 and the 1.35 duration fields: Cluster Autoscaler takes every option from the answer and
// older releases dereference the old duration fields without checking.
func (s *Server) NodeGroupGetOptions(ctx context.Context, req *pb.NodeGroupAutoscalingOptionsRequest) (*pb.NodeGroupAutoscalingOptionsResponse, error) {
	o, err := s.source.Options(ctx, req.GetId())
	if err != nil {
		return nil, err
	}
	if o.IsZero() {
		return &pb.NodeGroupAutoscalingOptionsResponse{}, nil
	}
	if req.GetDefaults() == nil {
		s.log.Warn("autoscaler: Cluster Autoscaler sent no default options, so the group's overrides cannot be applied without zeroing the rest", "group", req.GetId(), "overrides", o.String())
		return &pb.NodeGroupAutoscalingOptionsResponse{}, nil
	}
	return &pb.NodeGroupAutoscalingOptionsResponse{NodeGroupAutoscalingOptions: MergeOptions(req.GetDefaults(), o)}, nil
}

// MergeOptions returns Cluster Autoscaler's defaults with o's overrides applied, every duration written in both
// encodings. Defaults are read from the 1.35 fields, falling back to the pre-1.35 ones.
func MergeOptions(defaults *pb.NodeGroupAutoscalingOptions, o Options) *pb.NodeGroupAutoscalingOptions {
	out := &pb.NodeGroupAutoscalingOptions{
		ScaleDownUtilizationThreshold:    defaults.GetScaleDownUtilizationThreshold(),
		ScaleDownGpuUtilizationThreshold: defaults.GetScaleDownGpuUtilizationThreshold(),
		ZeroOrMaxNodeScaling:             defaults.GetZeroOrMaxNodeScaling(),
		IgnoreDaemonSetsUtilization:      defaults.GetIgnoreDaemonSetsUtilization(),
	}
	unneeded := readDuration(defaults.GetScaleDownUnneededDuration(), defaults.GetScaleDownUnneededTime())
	unready := readDuration(defaults.GetScaleDownUnreadyDuration(), defaults.GetScaleDownUnreadyTime())
	provision := readDuration(defaults.GetMaxNodeProvisionDuration(), defaults.GetMaxNodeProvisionTime())
	if o.ScaleDownUtilizationThreshold != nil {
		out.ScaleDownUtilizationThreshold = *o.ScaleDownUtilizationThreshold
	}
	if o.ScaleDownGpuUtilizationThreshold != nil {
		out.ScaleDownGpuUtilizationThreshold = *o.ScaleDownGpuUtilizationThreshold
	}
	if o.ZeroOrMaxNodeScaling != nil {
		out.ZeroOrMaxNodeScaling = *o.ZeroOrMaxNodeScaling
	}
	if o.IgnoreDaemonSetsUtilization != nil {
		out.IgnoreDaemonSetsUtilization = *o.IgnoreDaemonSetsUtilization
	}
	if o.ScaleDownUnneededTime != nil {
		unneeded = *o.ScaleDownUnneededTime
	}
	if o.ScaleDownUnreadyTime != nil {
		unready = *o.ScaleDownUnreadyTime
	}
	if o.MaxNodeProvisionTime != nil {
		provision = *o.MaxNodeProvisionTime
	}
	out.ScaleDownUnneededDuration, out.ScaleDownUnneededTime = durationpb.New(unneeded), legacy(unneeded)
	out.ScaleDownUnreadyDuration, out.ScaleDownUnreadyTime = durationpb.New(unready), legacy(unready)
	out.MaxNodeProvisionDuration, out.MaxNodeProvisionTime = durationpb.New(provision), legacy(provision)
	return out
}

func readDuration(d *durationpb.Duration, old *pb.LegacyDuration) time.Duration {
	if d != nil {
		return d.AsDuration()
	}
	return time.Duration(old.GetDuration())
}

func legacy(d time.Duration) *pb.LegacyDuration { return &pb.LegacyDuration{Duration: int64(d)} }

// SortGroups sorts groups by id, the order NodeGroups reports.
func SortGroups(groups []NodeGroup) {
	sort.Slice(groups, func(i, j int) bool { return groups[i].ID < groups[j].ID })
}

var _ pb.CloudProviderServer = (*Server)(nil)
