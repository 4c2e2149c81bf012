package openstack

import (
	"fmt"
	"maps"
	"net"
	"regexp"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/core/driver"
	"github.com/machinist-io/machinist/providers/kit"
)

// APIVersion and Kind of the provider spec, as Gardener's OpenStack provider writes them.
const (
	APIVersion = "openstack.machine.gardener.cloud/v1alpha1"
	Kind       = "MachineProviderConfig"
)

// Tag key parts that scope every resource the driver touches to one cluster and one role. A
// class must carry at least one tag key containing each.
const (
	ClusterTagPrefix = "kubernetes.io-cluster-"
	RoleTagPrefix    = "kubernetes.io-role-"
)

// MachineProviderConfig is MachineClass.providerSpec: Gardener's
// openstack.machine.gardener.cloud/v1alpha1 MachineProviderConfig, field for field, so manifests
// written for Gardener's provider decode unchanged.
type MachineProviderConfig struct {
	APIVersion string                    `json:"apiVersion,omitempty"`
	Kind       string                    `json:"kind,omitempty"`
	Spec       MachineProviderConfigSpec `json:"spec"`
}

// MachineProviderConfigSpec describes the servers of a class.
type MachineProviderConfigSpec struct {
	// ImageID of the image to boot; wins over ImageName.
	ImageID string `json:"imageID,omitempty"`
	// ImageName of the image to boot, looked up in Glance (the newest active image of that name).
	ImageName string `json:"imageName,omitempty"`
	// Region of the Keystone catalog endpoints to use; also the region in provider IDs.
	Region string `json:"region"`
	// AvailabilityZone of the servers (and of pre-created root volumes).
	AvailabilityZone string `json:"availabilityZone"`
	// FlavorName of the servers.
	FlavorName string `json:"flavorName"`
	// KeyName of the Nova key pair injected into servers.
	KeyName string `json:"keyName,omitempty"`
	// SecurityGroups (names or IDs) of the servers' ports.
	SecurityGroups []string `json:"securityGroups,omitempty"`
	// Tags are stored as server metadata (and as port tags and volume metadata). They must
	// include a cluster and a role key, which scope everything the driver does.
	Tags map[string]string `json:"tags,omitempty"`
	// NetworkID is the network of the servers; mutually exclusive with Networks.
	NetworkID string `json:"networkID,omitempty"`
	// SubnetID is deprecated: use SubnetIDs.
	SubnetID *string `json:"subnetID,omitempty"`
	// SubnetIDs of NetworkID to take the server's addresses from; a port named after the
	// machine is pre-created on them.
	SubnetIDs []string `json:"subnetIDs,omitempty"`
	// PodNetworkCidr is deprecated: use PodNetworkCIDRs.
	PodNetworkCidr string `json:"podNetworkCidr,omitempty"`
	// PodNetworkCIDRs are allowed as source addresses on the pod network's ports (allowed
	// address pairs), so pod traffic is not dropped by port security.
	PodNetworkCIDRs []string `json:"podNetworkCIDRs,omitempty"`
	// RootDiskSize in GB; > 0 boots from a Cinder volume of that size.
	RootDiskSize int `json:"rootDiskSize,omitempty"`
	// RootDiskType is the Cinder volume type of the root volume; needs RootDiskSize.
	RootDiskType *string `json:"rootDiskType,omitempty"`
	// UseConfigDrive attaches a config drive with the metadata and user data.
	UseConfigDrive *bool `json:"useConfigDrive,omitempty"`
	// ServerGroupID places servers in a Nova server group (scheduler hint).
	ServerGroupID *string `json:"serverGroupID,omitempty"`
	// Networks the servers attach to; mutually exclusive with NetworkID.
	Networks []OpenStackNetwork `json:"networks,omitempty"`
}

// OpenStackNetwork is one network of a server.
type OpenStackNetwork struct {
	// Id of the network; wins over Name.
	Id string `json:"id,omitempty"` //nolint:revive // Gardener's field name.
	// Name of the network, looked up in Neutron.
	Name string `json:"name,omitempty"`
	// PodNetwork marks the network that carries pod traffic.
	PodNetwork bool `json:"podNetwork,omitempty"`
}

var uuidRE = regexp.MustCompile(`^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$`)

// specs decodes class.providerSpec as Gardener's provider does in Lenient mode: through
// apimachinery's UniversalDecoder, with case-sensitive names and unknown fields dropped. Every
// problem is InvalidArgument naming the field; the warnings name the fields that were ignored,
// and an invalid spec's error notes them too (a misspelt field is why a required one is missing).
var specs = kit.Spec[MachineProviderConfig]{
	Provider: ProviderName, Names: driver.ExactNames, Validate: validateConfig, Hint: unwrappedHint,
}

// decodeSpec decodes and validates class.providerSpec in mode (specs) and returns its spec.
func decodeSpec(class *v1alpha1.MachineClass, mode driver.SpecMode) (*MachineProviderConfigSpec, []driver.SpecWarning, error) {
	cfg, warnings, err := specs.Decode(class, mode)
	if err != nil {
		return nil, warnings, err
	}
	return &cfg.Spec, warnings, nil
}

// unwrappedHint says where the fields of a providerSpec with spec fields at its top level belong.
func unwrappedHint(class *v1alpha1.MachineClass) string {
	if !looksUnwrapped(class) {
		return ""
	}
	return "the fields belong under providerSpec.spec, with apiVersion: " + APIVersion + " and kind: " + Kind
}

// looksUnwrapped reports whether a providerSpec has spec fields at its top level.
func looksUnwrapped(class *v1alpha1.MachineClass) bool {
	raw := strings.ToLower(string(class.ProviderSpec.Raw))
	return strings.Contains(raw, `"flavorname"`) && !strings.Contains(raw, `"spec"`)
}

// validateConfig checks a decoded config. Paths are relative to the class.
func validateConfig(cfg *MachineProviderConfig) field.ErrorList {
	root := driver.ProviderSpecPath
	var errs field.ErrorList
	if cfg.APIVersion != "" && cfg.APIVersion != APIVersion {
		errs = append(errs, field.NotSupported(root.Child("apiVersion"), cfg.APIVersion, []string{APIVersion}))
	}
	if cfg.Kind != "" && cfg.Kind != Kind {
		errs = append(errs, field.NotSupported(root.Child("kind"), cfg.Kind, []string{Kind}))
	}
	s := &cfg.Spec
	p := root.Child("spec")
	if s.ImageID == "" && s.ImageName == "" {
		errs = append(errs, field.Required(p.Child("imageName"), "set imageID or imageName"))
	}
	if s.Region == "" {
		errs = append(errs, field.Required(p.Child("region"), "the region of the Keystone catalog endpoints"))
	}
	if s.AvailabilityZone == "" {
		errs = append(errs, field.Required(p.Child("availabilityZone"), "the Nova availability zone of the servers"))
	}
	if s.FlavorName == "" {
		errs = append(errs, field.Required(p.Child("flavorName"), "the Nova flavor of the servers"))
	}
	for i, sg := range s.SecurityGroups {
		if strings.TrimSpace(sg) == "" {
			errs = append(errs, field.Invalid(p.Child("securityGroups").Index(i), sg, "must name a security group"))
		}
	}
	switch {
	case s.NetworkID != "" && len(s.Networks) > 0:
		errs = append(errs, field.Forbidden(p.Child("networks"), "set either networkID or networks, not both"))
	case s.NetworkID == "" && len(s.Networks) == 0:
		errs = append(errs, field.Required(p.Child("networkID"), "set networkID or networks"))
	}
	subnets := s.subnets()
	if len(subnets) > 0 && s.NetworkID == "" {
		errs = append(errs, field.Forbidden(p.Child("subnetIDs"), "subnets need networkID (the network they belong to)"))
	}
	for i, id := range s.SubnetIDs {
		if strings.TrimSpace(id) == "" {
			errs = append(errs, field.Invalid(p.Child("subnetIDs").Index(i), id, "must be a subnet ID"))
		}
	}
	if s.SubnetID != nil && strings.TrimSpace(*s.SubnetID) == "" {
		errs = append(errs, field.Invalid(p.Child("subnetID"), *s.SubnetID, "must be a subnet ID or left out"))
	}
	podNetworks := 0
	for i, n := range s.Networks {
		np := p.Child("networks").Index(i)
		switch {
		case n.Id == "" && n.Name == "":
			errs = append(errs, field.Required(np, "set id or name"))
		case n.Id != "" && n.Name != "":
			errs = append(errs, field.Forbidden(np, "set id or name, not both"))
		}
		if n.PodNetwork {
			podNetworks++
		}
	}
	if s.PodNetworkCidr != "" {
		if _, _, err := net.ParseCIDR(s.PodNetworkCidr); err != nil {
			errs = append(errs, field.Invalid(p.Child("podNetworkCidr"), s.PodNetworkCidr, "must be a CIDR such as 100.96.0.0/11"))
		}
	}
	for i, c := range s.PodNetworkCIDRs {
		if _, _, err := net.ParseCIDR(c); err != nil {
			errs = append(errs, field.Invalid(p.Child("podNetworkCIDRs").Index(i), c, "must be a CIDR such as 100.96.0.0/11"))
		}
	}
	if podNetworks > 0 && len(s.podCIDRs()) == 0 {
		errs = append(errs, field.Required(p.Child("podNetworkCIDRs"), "networks marked podNetwork need the pod CIDRs"))
	}
	if s.RootDiskSize < 0 {
		errs = append(errs, field.Invalid(p.Child("rootDiskSize"), s.RootDiskSize, "must be 0 (boot from the image) or a size in GB"))
	}
	if s.RootDiskType != nil && *s.RootDiskType != "" && s.RootDiskSize <= 0 {
		errs = append(errs, field.Required(p.Child("rootDiskSize"), "rootDiskType needs rootDiskSize"))
	}
	if s.ServerGroupID != nil && *s.ServerGroupID != "" && !uuidRE.MatchString(*s.ServerGroupID) {
		errs = append(errs, field.Invalid(p.Child("serverGroupID"), *s.ServerGroupID, "must be the UUID of a Nova server group"))
	}
	errs = append(errs, validateTags(s.Tags, p.Child("tags"))...)
	return errs
}

func validateTags(tags map[string]string, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	cluster, role := scopeKeys(tags)
	if len(cluster) == 0 {
		errs = append(errs, field.Required(p, fmt.Sprintf("a tag whose key contains %q (e.g. %sshoot--project--name: \"1\") scopes machines to their cluster", ClusterTagPrefix, ClusterTagPrefix)))
	}
	if len(role) == 0 {
		errs = append(errs, field.Required(p, fmt.Sprintf("a tag whose key contains %q (e.g. %snode: \"1\") scopes machines to their role", RoleTagPrefix, RoleTagPrefix)))
	}
	for _, k := range slices.Sorted(maps.Keys(tags)) {
		v := tags[k]
		// Nova metadata keys and values are at most 255 characters. Scope keys also become
		// Neutron port tags, filtered as a comma-separated list, so they may not hold a comma.
		if len(k) > 255 {
			errs = append(errs, field.Invalid(p.Key(k), k, "a tag key must be at most 255 characters"))
		}
		if (strings.Contains(k, ClusterTagPrefix) || strings.Contains(k, RoleTagPrefix)) && strings.Contains(k, ",") {
			errs = append(errs, field.Invalid(p.Key(k), k, "a cluster or role tag key may not contain ','"))
		}
		if len(v) > 255 {
			errs = append(errs, field.TooLong(p.Key(k), "", 255))
		}
	}
	return errs
}

// scopeKeys returns the tag keys that name the cluster and the role, sorted.
func scopeKeys(tags map[string]string) (cluster, role []string) {
	for _, k := range slices.Sorted(maps.Keys(tags)) {
		switch {
		case strings.Contains(k, ClusterTagPrefix):
			cluster = append(cluster, k)
		case strings.Contains(k, RoleTagPrefix):
			role = append(role, k)
		}
	}
	return cluster, role
}

func (s *MachineProviderConfigSpec) subnets() []string {
	out := append([]string(nil), s.SubnetIDs...)
	if s.SubnetID != nil && *s.SubnetID != "" && !slices.Contains(out, *s.SubnetID) {
		out = append(out, *s.SubnetID)
	}
	return out
}

// podCIDRs returns PodNetworkCIDRs plus the deprecated PodNetworkCidr, without duplicates.
func (s *MachineProviderConfigSpec) podCIDRs() []string {
	out := append([]string(nil), s.PodNetworkCIDRs...)
	if s.PodNetworkCidr != "" && !slices.Contains(out, s.PodNetworkCidr) {
		out = append(out, s.PodNetworkCidr)
	}
	return out
}

// scope returns the tag keys that mark a resource as this class's cluster and role.
func (s *MachineProviderConfigSpec) scope() []string {
	cluster, role := scopeKeys(s.Tags)
	return append(cluster, role...)
}
