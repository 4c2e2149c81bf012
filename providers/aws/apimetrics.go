package aws

import (
	"context"
	"time"

	awsmiddleware "github.com/aws/aws-sdk-go-v2/aws/middleware"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/smithy-go/middleware"

	"github.com/machinist-io/machinist/providers/kit"
)

// Service labels of mcm_cloud_api_* as MCM's AWS provider names its calls
// (machine-controller-manager-provider-aws pkg/aws/core_util.go: instance_get_by_id,
// instance_get_by_tag_and_status, instance_terminate, instance_disable_source_dest_check), and
// machinist's own names, after the same pattern, for the calls MCM does not count.
const (
	serviceGetByID          = "instance_get_by_id"
	serviceGetByTags        = "instance_get_by_tag_and_status"
	serviceTerminate        = "instance_terminate"
	serviceDisableSrcDst    = "instance_disable_source_dest_check"
	serviceRunInstances     = "instance_run"
	serviceDescribeImages   = "image_get_by_id"
	serviceAssignIpv6Prefix = "instance_assign_ipv6_prefixes"
)

// apiService names an EC2 operation's call in the service label.
func apiService(operation string, input any) string {
	switch operation {
	case "DescribeInstances":
		if in, ok := input.(*ec2.DescribeInstancesInput); ok && len(in.InstanceIds) > 0 {
			return serviceGetByID
		}
		return serviceGetByTags
	case "TerminateInstances":
		return serviceTerminate
	case "ModifyNetworkInterfaceAttribute":
		return serviceDisableSrcDst
	case "RunInstances":
		return serviceRunInstances
	case "DescribeImages":
		return serviceDescribeImages
	case "AssignIpv6Addresses":
		return serviceAssignIpv6Prefix
	}
	return operation
}

// addAPIMetrics records each EC2 operation the way MCM's AWS provider records its calls
// (pkg/instrument/instrument.go RecordAwsAPIMetric): a success counts in
// mcm_cloud_api_requests_total and observes mcm_cloud_api_api_request_duration_seconds, a
// failure (any error, a lookup of a missing instance included) counts in
// mcm_cloud_api_requests_failed_total only. It sits in the Initialize step, before the
// retryer, so an operation and its retries count once and its time includes them.
func addAPIMetrics(stack *middleware.Stack) error {
	return stack.Initialize.Add(middleware.InitializeMiddlewareFunc("machinistAPIMetrics",
		func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
			svc := apiService(awsmiddleware.GetOperationName(ctx), in.Parameters)
			start := time.Now()
			out, md, err := next.HandleInitialize(ctx, in)
			kit.APIMetrics(ProviderName).Call(svc, start, err != nil)
			return out, md, err
		}), middleware.Before)
}
