// Package aws is machinist's AWS provider: it creates each machine as an EC2 instance, with its
// EBS volumes and network interfaces, through aws-sdk-go-v2, authenticating with the secret's
// access key or its workload identity token (STS AssumeRoleWithWebIdentity); the SDK's default
// credential chain only when the operator allows it (Options.AmbientCredentials).
//
// The provider spec and secret are Gardener's, so existing AWS MachineClasses work unchanged;
// README.md lists the fields, secret keys, tags and the IAM permissions the identity needs.
package aws

import (
	"context"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/core/driver"
	"github.com/machinist-io/machinist/providers/kit"
)

// ProviderName is the provider's name; MachineClass.provider "AWS" selects it.
const ProviderName = "aws"

// Options tune the driver. The zero value talks to the real AWS.
type Options struct {
	// Options are every provider's: Log, SpecMode, HTTPTransport (nil: the SDK's default
	// client), MaxClientSets (credential sets and regions that keep their clients; default 32),
	// OperationTimeout (default 10 minutes), CleanupTimeout (the termination of an instance a
	// failed create launched; default 2 minutes) and PollInterval (the first wait between the
	// reads of a launched instance, growing by half each time; default 1s).
	kit.Options
	// MaxAttempts is how often the SDK tries a call that fails transiently (throttling, 5xx,
	// connection errors); default 3, the SDK's.
	MaxAttempts int
	// MaxRetryWait caps the jittered exponential wait between attempts; default 20s, the SDK's.
	MaxRetryWait time.Duration
	// VisibleTimeout is how long a create waits for EC2 to show the instance it launched
	// (EC2's reads are eventually consistent); default 5 minutes, as Gardener's provider.
	VisibleTimeout time.Duration
	// PageSize is the MaxResults of DescribeInstances listings; default 1000, EC2's largest.
	PageSize int32
	// AmbientCredentials lets a secret without credentials use the SDK's default chain of this
	// process (environment, shared files, IRSA, EKS Pod Identity, the instance metadata service).
	// Off (the default), such a secret is refused, as Gardener's provider refuses it: in a seed on
	// AWS the chain ends at the seed node's own role.
	AmbientCredentials bool
}

// Driver manages EC2 instances. It is safe for concurrent use.
type Driver struct {
	opts       Options
	log        *slog.Logger
	cache      *kit.Clients[*ec2API] // by credential set and region
	httpClient aws.HTTPClient
}

// open is the registry's factory of the AWS driver (register.go).
func open(o kit.Options, env kit.Env) driver.Driver {
	return New(Options{Options: o, AmbientCredentials: env.AmbientCredentialsFor(ProviderName)})
}

// New returns an AWS driver. It does not contact AWS: credentials arrive with each request.
func New(opts Options) *Driver {
	opts.Options = opts.WithDefaults(kit.Options{
		MaxClientSets: 32, OperationTimeout: 10 * time.Minute, CleanupTimeout: 2 * time.Minute, PollInterval: time.Second,
	})
	if opts.MaxAttempts <= 0 {
		opts.MaxAttempts = 3
	}
	if opts.MaxRetryWait <= 0 {
		opts.MaxRetryWait = 20 * time.Second
	}
	if opts.VisibleTimeout <= 0 {
		opts.VisibleTimeout = 5 * time.Minute
	}
	if opts.PageSize < 5 || opts.PageSize > 1000 {
		opts.PageSize = 1000
	}
	var httpClient aws.HTTPClient = &http.Client{Transport: opts.HTTPTransport}
	if opts.HTTPTransport == nil {
		// One transport for every client, so connections are pooled across credential sets.
		httpClient = awshttp.NewBuildableClient()
	}
	return &Driver{opts: opts, log: opts.Logger(ProviderName), cache: kit.NewClients[*ec2API](opts.MaxClientSets), httpClient: httpClient}
}

// request is what every operation starts from: the decoded spec and the client of its
// credentials and region.
type request struct {
	spec   *ProviderSpec
	secret kit.Secret
	api    *ec2API
}

// prepare decodes the class and secret for purpose and returns the spec and the client.
func (d *Driver) prepare(ctx context.Context, class *v1alpha1.MachineClass, secret *corev1.Secret, p kit.Purpose) (*request, error) {
	spec, err := specs.DecodeFor(class, d.opts.SpecMode, p)
	if err != nil {
		return nil, err
	}
	creds, s, err := credentialsFrom(secret, d.opts.AmbientCredentials)
	if err != nil {
		return nil, err
	}
	api, err := d.clients(ctx, creds, spec.Region)
	if err != nil {
		return nil, err
	}
	return &request{spec: spec, secret: s, api: api}, nil
}

// liveStates are the states of an instance that is (or may again be) a machine; shutting-down
// and terminated instances are gone. Gardener's provider looks for the same.
var liveStates = []string{
	string(ec2types.InstanceStateNamePending), string(ec2types.InstanceStateNameRunning),
	string(ec2types.InstanceStateNameStopping), string(ec2types.InstanceStateNameStopped),
}

func live(i *ec2types.Instance) bool {
	return i.State != nil && slices.Contains(liveStates, string(i.State.Name))
}

// scopeFilters select the class's instances on EC2's side: those that carry every cluster and
// role tag of the class and are live. Gardener's provider filters by tag key (one cluster, one
// role key); machinist requires all of them.
func scopeFilters(spec *ProviderSpec) []ec2types.Filter {
	var fs []ec2types.Filter
	for _, k := range spec.scopeTags() {
		fs = append(fs, ec2types.Filter{Name: aws.String("tag-key"), Values: []string{k}})
	}
	return append(fs, ec2types.Filter{Name: aws.String("instance-state-name"), Values: liveStates})
}

// describe lists the instances matching filters, all pages. It calls DescribeInstances page by
// page itself (no paginator: see ec2API).
func (d *Driver) describe(ctx context.Context, r *request, what string, filters []ec2types.Filter) ([]ec2types.Instance, error) {
	var out []ec2types.Instance
	input := &ec2.DescribeInstancesInput{Filters: filters, MaxResults: aws.Int32(d.opts.PageSize)}
	seen := map[string]bool{}
	for {
		page, err := r.api.DescribeInstances(ctx, input)
		if err != nil {
			return nil, statusOf(r.spec, what, err)
		}
		for _, res := range page.Reservations {
			out = append(out, res.Instances...)
		}
		next := ptr.Deref(page.NextToken, "")
		if next == "" || seen[next] {
			return out, nil
		}
		seen[next] = true
		input.NextToken = page.NextToken
	}
}

// byName finds the live instances of the class that carry the machine's Name tag, oldest first.
func (d *Driver) byName(ctx context.Context, r *request, name string) ([]ec2types.Instance, error) {
	filters := append([]ec2types.Filter{{Name: aws.String("tag:" + NameTag), Values: []string{name}}}, scopeFilters(r.spec)...)
	found, err := d.describe(ctx, r, "find the instance of machine "+name, filters)
	if err != nil {
		return nil, err
	}
	slices.SortFunc(found, func(a, b ec2types.Instance) int {
		return ptr.Deref(a.LaunchTime, time.Time{}).Compare(ptr.Deref(b.LaunchTime, time.Time{}))
	})
	return found, nil
}

// byID returns the instance with the ID, or nil when EC2 does not know it.
func (d *Driver) byID(ctx context.Context, r *request, id string) (*ec2types.Instance, error) {
	out, err := r.api.DescribeInstances(ctx, &ec2.DescribeInstancesInput{InstanceIds: []string{id}})
	if errorCode(err) == "InvalidInstanceID.NotFound" {
		return nil, nil
	}
	if err != nil {
		return nil, statusOf(r.spec, "describe instance "+id, err)
	}
	for _, res := range out.Reservations {
		for i := range res.Instances {
			if ptr.Deref(res.Instances[i].InstanceId, "") == id {
				return &res.Instances[i], nil
			}
		}
	}
	return nil, nil
}

// owns reports whether an instance carries every cluster and role tag of the class.
func owns(spec *ProviderSpec, i *ec2types.Instance) bool {
	for _, k := range spec.scopeTags() {
		if _, ok := tagValue(i.Tags, k); !ok {
			return false
		}
	}
	return true
}

// foreignCluster reports whether an instance carries a cluster tag that is not the class's.
func foreignCluster(spec *ProviderSpec, i *ec2types.Instance) bool {
	for _, t := range i.Tags {
		k := ptr.Deref(t.Key, "")
		if strings.Contains(k, ClusterTagPrefix) {
			if _, ours := spec.Tags[k]; !ours {
				return true
			}
		}
	}
	return false
}

func tagValue(tags []ec2types.Tag, key string) (string, bool) {
	for _, t := range tags {
		if ptr.Deref(t.Key, "") == key {
			return ptr.Deref(t.Value, ""), true
		}
	}
	return "", false
}

// identity is what the controllers learn of an instance of region.
func identity(region string, i *ec2types.Instance) (pid, nodeName string, addrs []corev1.NodeAddress) {
	nodeName = ptr.Deref(i.PrivateDnsName, "")
	if ip := ptr.Deref(i.PrivateIpAddress, ""); ip != "" {
		addrs = append(addrs, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: ip})
	}
	if nodeName != "" {
		addrs = append(addrs, corev1.NodeAddress{Type: corev1.NodeInternalDNS, Address: nodeName}, corev1.NodeAddress{Type: corev1.NodeHostName, Address: nodeName})
	}
	if ip := ptr.Deref(i.PublicIpAddress, ""); ip != "" {
		addrs = append(addrs, corev1.NodeAddress{Type: corev1.NodeExternalIP, Address: ip})
	}
	return providerID(region, ptr.Deref(i.InstanceId, "")), nodeName, addrs
}

var _ driver.Driver = (*Driver)(nil)
