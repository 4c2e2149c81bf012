package aws

import (
	"context"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/config"
	awscredentials "github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/credentials/stscreds"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/sts"
	"github.com/aws/smithy-go/middleware"

	"github.com/machinist-io/machinist/core/driver"
)

// ec2API holds the EC2 operations the driver calls, as method values of one *ec2.Client.
//
// It deliberately holds functions, not the client: when a program uses reflection to call
// methods by name (text/template, in the CLI's help), the linker keeps every exported method of
// every type it can reach from an interface value, and the driver is one (driver.Driver).
// *ec2.Client has several hundred operations (about 30 MB of code); reached only through these
// method values, it contributes just the operations below.
type ec2API struct {
	RunInstances                    func(context.Context, *ec2.RunInstancesInput, ...func(*ec2.Options)) (*ec2.RunInstancesOutput, error)
	DescribeInstances               func(context.Context, *ec2.DescribeInstancesInput, ...func(*ec2.Options)) (*ec2.DescribeInstancesOutput, error)
	TerminateInstances              func(context.Context, *ec2.TerminateInstancesInput, ...func(*ec2.Options)) (*ec2.TerminateInstancesOutput, error)
	DescribeImages                  func(context.Context, *ec2.DescribeImagesInput, ...func(*ec2.Options)) (*ec2.DescribeImagesOutput, error)
	ModifyNetworkInterfaceAttribute func(context.Context, *ec2.ModifyNetworkInterfaceAttributeInput, ...func(*ec2.Options)) (*ec2.ModifyNetworkInterfaceAttributeOutput, error)
	AssignIpv6Addresses             func(context.Context, *ec2.AssignIpv6AddressesInput, ...func(*ec2.Options)) (*ec2.AssignIpv6AddressesOutput, error)
}

func newEC2API(c *ec2.Client) *ec2API {
	return &ec2API{
		RunInstances:                    c.RunInstances,
		DescribeInstances:               c.DescribeInstances,
		TerminateInstances:              c.TerminateInstances,
		DescribeImages:                  c.DescribeImages,
		ModifyNetworkInterfaceAttribute: c.ModifyNetworkInterfaceAttribute,
		AssignIpv6Addresses:             c.AssignIpv6Addresses,
	}
}

// clients returns the EC2 operations of a credential set in region, building the client on
// first use. It does not contact AWS.
func (d *Driver) clients(ctx context.Context, creds credentials, region string) (*ec2API, error) {
	return d.cache.Get(creds.key(region), func() (*ec2API, error) {
		api, err := d.newClient(ctx, creds, region)
		if err != nil {
			return nil, driver.Wrap(driver.Internal, err, "aws: set up the EC2 client: "+err.Error())
		}
		d.log.Debug("aws: new EC2 client", "region", region, "credentials", creds.mode.String())
		return api, nil
	})
}

func (d *Driver) newClient(ctx context.Context, creds credentials, region string) (*ec2API, error) {
	httpClient := d.httpClient
	var provider aws.CredentialsProvider
	switch creds.mode {
	case staticKeys:
		provider = awscredentials.NewStaticCredentialsProvider(creds.accessKeyID, creds.secretAccessKey, "")
	case webIdentity:
		stsClient := sts.New(sts.Options{
			Region: region, HTTPClient: httpClient, Retryer: d.retryer(), AppID: appID,
			BaseEndpoint: optional(creds.stsEndpoint),
		})
		provider = stscreds.NewWebIdentityRoleProvider(stsClient, creds.roleARN, stscreds.IdentityTokenFile(creds.tokenFile),
			func(o *stscreds.WebIdentityRoleOptions) { o.RoleSessionName = workloadIdentityRoleSessionName })
	case defaultChain:
		// The SDK's default chain, as the process's environment configures it: environment
		// variables, shared config and credentials files, web identity (IRSA), container
		// credentials (EKS Pod Identity, ECS) and the EC2 instance profile (IMDS).
		cfg, err := config.LoadDefaultConfig(ctx, config.WithRegion(region), config.WithHTTPClient(httpClient),
			config.WithRetryer(d.retryer), config.WithAppID(appID))
		if err != nil {
			return nil, err
		}
		provider = cfg.Credentials
	}
	client := ec2.New(ec2.Options{
		Region:       region,
		Credentials:  aws.NewCredentialsCache(markedCredentials{provider}),
		HTTPClient:   httpClient,
		Retryer:      d.retryer(),
		AppID:        appID,
		BaseEndpoint: optional(creds.ec2Endpoint),
		APIOptions:   []func(*middleware.Stack) error{addAPIMetrics},
	})
	return newEC2API(client), nil
}

// appID is sent in the User-Agent of every request.
const appID = "machinist"

// retryer is the SDK's standard retryer (retries throttling, 5xx and connection errors with
// jittered exponential backoff) without its client-side retry quota: one client serves every
// machine of a credential set, and a burst of throttling on one machine must not make the
// others' calls fail without trying. The controllers back off per machine on top.
func (d *Driver) retryer() aws.Retryer {
	return retry.NewStandard(func(o *retry.StandardOptions) {
		o.MaxAttempts = d.opts.MaxAttempts
		o.MaxBackoff = d.opts.MaxRetryWait
		o.Backoff = retry.NewExponentialJitterBackoff(d.opts.MaxRetryWait)
		o.RateLimiter = ratelimit.None
		// EC2 answers capacity errors with HTTP 500; retrying them at once only delays the
		// capacity fallback.
		o.Retryables = append([]retry.IsErrorRetryable{retry.IsErrorRetryableFunc(func(err error) aws.Ternary {
			if c := errorCode(err); capacityCodes[c] || quotaCodes[c] || spotCodes[c] {
				return aws.FalseTernary
			}
			return aws.UnknownTernary
		})}, o.Retryables...)
	})
}

// optional is s, or nil when s is empty: the SDK's "not set" for an endpoint.
func optional(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// markedCredentials marks the errors of a credentials provider, so that statusOf tells a failure
// to obtain credentials (STS, the default chain) from an error of EC2.
type markedCredentials struct{ aws.CredentialsProvider }

func (m markedCredentials) Retrieve(ctx context.Context) (aws.Credentials, error) {
	c, err := m.CredentialsProvider.Retrieve(ctx)
	if err != nil {
		return c, &credentialsError{err: err}
	}
	return c, nil
}

// credentialsError is a failure to obtain credentials.
type credentialsError struct{ err error }

func (e *credentialsError) Error() string { return e.err.Error() }
func (e *credentialsError) Unwrap() error { return e.err }
