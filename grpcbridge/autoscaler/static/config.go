package static

import (
	"fmt"
	"os"
	"path/filepath"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/yaml"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/core/controller/fallback"
	"github.com/machinist-io/machinist/core/driver"
	"github.com/machinist-io/machinist/grpcbridge/autoscaler"
)

// File is the --config file of static node groups.
//
//	groups:
//	- name: workers              # group id and machine name prefix (<name>-<5 chars>)
//	  minSize: 0
//	  maxSize: 10
//	  machineClass:              # a MachineClass, inline ...
//	    provider: openstack
//	    providerSpec: {...}
//	    nodeTemplate: {...}      # enables scale from zero
//	  machineClassFile: c.yaml   # ... or in a file (relative to this file)
//	  secret:                    # the class's Secret (credentials, userData), inline ...
//	    stringData: {...}
//	  secretFile: s.yaml         # ... or in a file
//	  nodeLabels: {pool: workers}
//	  nodeTaints: [{key: dedicated, value: workers, effect: NoSchedule}]
//	  options: {scale-down-unneeded-time: 5m}
//	  pricePerHour: "0.096"      # optional; else the class's machinist.io/price-per-hour
type File struct {
	Groups []GroupFile `json:"groups"`
}

// GroupFile is one group of the config file.
type GroupFile struct {
	Name             string                 `json:"name"`
	MinSize          int                    `json:"minSize"`
	MaxSize          int                    `json:"maxSize"`
	MachineClass     *v1alpha1.MachineClass `json:"machineClass,omitempty"`
	MachineClassFile string                 `json:"machineClassFile,omitempty"`
	Secret           *corev1.Secret         `json:"secret,omitempty"`
	SecretFile       string                 `json:"secretFile,omitempty"`
	NodeLabels       map[string]string      `json:"nodeLabels,omitempty"`
	NodeTaints       []corev1.Taint         `json:"nodeTaints,omitempty"`
	Options          map[string]string      `json:"options,omitempty"`
	// PricePerHour is what a machine of the group costs per hour (a decimal, e.g. "0.096"); it
	// wins over the class's machinist.io/price-per-hour annotation.
	PricePerHour string `json:"pricePerHour,omitempty"`
}

// Group is a validated group, its class and secret loaded.
type Group struct {
	Name       string
	Min, Max   int
	Class      *v1alpha1.MachineClass
	Secret     *corev1.Secret
	NodeLabels map[string]string
	NodeTaints []corev1.Taint
	Options    autoscaler.Options
	// Price of a machine of the group; nil: no price (Cluster Autoscaler's price expander
	// leaves the group out).
	Price *autoscaler.Price
}

// maxGroupName keeps <name>-<5 chars> a valid DNS label, the strictest form a node name takes.
const maxGroupName = validation.DNS1123LabelMaxLength - 1 - suffixLen

// LoadFile reads and validates a config file. Every error names the group and field and says
// how to fix it; nothing runs before the whole file is valid.
func LoadFile(path string) ([]Group, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("autoscaler: read --config: %w", err)
	}
	return Load(data, filepath.Dir(path))
}

// Load parses a config file's content; relative file names resolve against dir.
func Load(data []byte, dir string) ([]Group, error) {
	var f File
	if err := decodeStrict(data, &f, "--config"); err != nil {
		return nil, fmt.Errorf("autoscaler: %s", driver.MessageOf(err))
	}
	if len(f.Groups) == 0 {
		return nil, fmt.Errorf("autoscaler: --config defines no groups: add at least one under groups")
	}
	seen := map[string]bool{}
	var out []Group
	for i, gf := range f.Groups {
		where := fmt.Sprintf("--config groups[%d]", i)
		if gf.Name != "" {
			where = fmt.Sprintf("--config group %q", gf.Name)
		}
		g, err := loadGroup(gf, dir)
		if err != nil {
			return nil, fmt.Errorf("autoscaler: %s: %w", where, err)
		}
		if seen[g.Name] {
			return nil, fmt.Errorf("autoscaler: %s: name is used twice: give every group its own name", where)
		}
		seen[g.Name] = true
		out = append(out, g)
	}
	return out, nil
}

func loadGroup(gf GroupFile, dir string) (Group, error) {
	if errs := validation.IsDNS1123Label(gf.Name); len(errs) > 0 || len(gf.Name) > maxGroupName {
		return Group{}, fmt.Errorf("name %q: want a DNS label of at most %d characters (lower-case letters, digits, '-'), e.g. workers", gf.Name, maxGroupName)
	}
	if gf.MinSize < 0 || gf.MaxSize < gf.MinSize {
		return Group{}, fmt.Errorf("minSize %d, maxSize %d: want 0 <= minSize <= maxSize", gf.MinSize, gf.MaxSize)
	}
	class := gf.MachineClass
	switch {
	case class != nil && gf.MachineClassFile != "":
		return Group{}, fmt.Errorf("machineClass and machineClassFile are both set: keep one")
	case gf.MachineClassFile != "":
		class = &v1alpha1.MachineClass{}
		if err := readObject(dir, gf.MachineClassFile, class); err != nil {
			return Group{}, fmt.Errorf("machineClassFile: %w", err)
		}
	case class == nil:
		return Group{}, fmt.Errorf("no machineClass: set machineClass (inline) or machineClassFile")
	}
	if class.Provider == "" {
		return Group{}, fmt.Errorf("machineClass.provider is empty: name the provider, e.g. openstack")
	}
	if len(class.ProviderSpec.Raw) == 0 {
		return Group{}, fmt.Errorf("machineClass.providerSpec is empty: set the provider's machine template")
	}
	if class.Name == "" {
		class.Name = gf.Name
	}
	if class.Namespace == "" {
		class.Namespace = metaNamespace
	}
	secret := gf.Secret
	switch {
	case secret != nil && gf.SecretFile != "":
		return Group{}, fmt.Errorf("secret and secretFile are both set: keep one")
	case gf.SecretFile != "":
		secret = &corev1.Secret{}
		if err := readObject(dir, gf.SecretFile, secret); err != nil {
			return Group{}, fmt.Errorf("secretFile: %w", err)
		}
	case secret == nil:
		secret = &corev1.Secret{}
	}
	if secret.Name == "" {
		secret.Name = gf.Name
	}
	if secret.Namespace == "" {
		secret.Namespace = class.Namespace
	}
	// A Secret written as YAML may use stringData; drivers read data.
	if len(secret.StringData) > 0 {
		if secret.Data == nil {
			secret.Data = map[string][]byte{}
		}
		for k, v := range secret.StringData {
			secret.Data[k] = []byte(v)
		}
		secret.StringData = nil
	}
	for _, t := range gf.NodeTaints {
		if t.Key == "" || t.Effect == "" {
			return Group{}, fmt.Errorf("nodeTaints: taint %q: set key and effect (NoSchedule, PreferNoSchedule or NoExecute)", t.ToString())
		}
	}
	opts, err := autoscaler.ParseOptions(gf.Options)
	if err != nil {
		return Group{}, fmt.Errorf("options: %w", err)
	}
	price, err := groupPrice(gf, class)
	if err != nil {
		return Group{}, err
	}
	return Group{
		Name: gf.Name, Min: gf.MinSize, Max: gf.MaxSize, Class: class, Secret: secret,
		NodeLabels: gf.NodeLabels, NodeTaints: gf.NodeTaints, Options: opts, Price: price,
	}, nil
}

// groupPrice reads the group's pricePerHour, else its class's price annotation; nil without.
func groupPrice(gf GroupFile, class *v1alpha1.MachineClass) (*autoscaler.Price, error) {
	if gf.PricePerHour != "" {
		p, err := fallback.ParsePrice(gf.PricePerHour)
		if err != nil {
			return nil, fmt.Errorf("pricePerHour %q: want a non-negative decimal with a dot, e.g. \"0.096\" (quoted, no currency)", gf.PricePerHour)
		}
		return &autoscaler.Price{PerHour: p, From: "pricePerHour of group " + gf.Name}, nil
	}
	p, set, err := fallback.PriceOf(class.Annotations)
	switch {
	case err != nil:
		return nil, fmt.Errorf("machineClass.metadata.annotations: %w", err)
	case !set:
		return nil, nil
	}
	return &autoscaler.Price{PerHour: p, From: "MachineClass " + class.Name}, nil
}

// metaNamespace is the namespace of the Machine objects a static group hands its driver: there
// are no Machine objects, but drivers expect a namespace.
const metaNamespace = "default"

func readObject(dir, name string, out any) error {
	path := name
	if !filepath.IsAbs(path) {
		path = filepath.Join(dir, name)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	// The message names the field; the file content (maybe credentials) is not echoed.
	if err := decodeStrict(data, out, path); err != nil {
		return fmt.Errorf("%s", driver.MessageOf(err))
	}
	return nil
}

// decodeStrict decodes YAML case-sensitively, rejecting unknown and duplicate fields.
func decodeStrict(data []byte, out any, what string) error {
	j, err := yaml.YAMLToJSON(data)
	if err != nil {
		return driver.Errorf(driver.InvalidArgument, "%s: not YAML: %v", what, err)
	}
	return driver.DecodeStrict(j, out, what)
}
