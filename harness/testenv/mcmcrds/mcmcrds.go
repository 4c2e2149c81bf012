// Package mcmcrds holds schema facts of Gardener machine-controller-manager's published CRDs and
// builds, from machinist's CRDs, a set shaped like MCM's, so tests can run machinist's controllers
// on the API a Gardener seed serves. It is imported by tests only.
//
// The facts were read from gardener/machine-controller-manager, kubernetes/crds/
// machine.sapcloud.io_{machineclasses,machines,machinesets,machinedeployments}.yaml at commit
// 9942dea9d55311a44447a8ddf6215edef8215f5b (the last commit touching them; the same files at the
// repository's HEAD 54caf546e0f417b1d2a7db436ea0098176267a74 of August 2026). Paths name schema
// properties from the root of openAPIV3Schema, "[]" standing for a list's items and "{}" for a
// map's values. CI cannot fetch MCM's repository: re-check the facts by hand when MCM's CRDs
// change (docs/migrating-from-mcm.md says how).
package mcmcrds

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"
)

// Source is where the facts were read.
const Source = "github.com/gardener/machine-controller-manager@9942dea9d55311a44447a8ddf6215edef8215f5b kubernetes/crds"

// Facts are what one of MCM's CRDs says, as far as compatibility goes.
type Facts struct {
	// Plural names the CRD (machines, machineclasses, machinesets, machinedeployments).
	Plural string
	// Required are the paths of the properties MCM's schema requires.
	Required []string
	// Preserve are the paths where MCM's schema keeps unknown fields
	// (x-kubernetes-preserve-unknown-fields).
	Preserve []string
	// Properties is how many property paths MCM's schema has (a check that a schema built from
	// machinist's by removing MachinistOnly has exactly MCM's).
	Properties int
	// StatusSubresource: MCM's CRD has the status subresource.
	StatusSubresource bool
	// Scale: MCM's CRD has the scale subresource (specpath .spec.replicas, statuspath
	// .status.replicas, and no labelSelectorPath).
	Scale bool
	// MachinistOnly are the properties machinist's schema has and MCM's lacks: under MCM's CRD
	// the API server drops them. Metadata below a template is listed property by property: MCM
	// types it as an object without properties that keeps whatever it holds.
	MachinistOnly []string
}

// openMetadata are the properties machinist's schema lists under an embedded ObjectMeta that
// MCM's leaves unlisted (it keeps them as unknown fields instead).
func openMetadata(at string) []string {
	var out []string
	for _, p := range []string{"annotations", "annotations{}", "finalizers", "finalizers[]", "labels", "labels{}", "name", "namespace"} {
		out = append(out, at+"."+p)
	}
	return out
}

// nodeTemplateSpecRequired are the required paths below a NodeTemplateSpec (corev1.NodeSpec's).
func nodeTemplateSpecRequired(at string) []string {
	var out []string
	for _, p := range []string{"spec.configSource.configMap.kubeletConfigKey", "spec.configSource.configMap.name", "spec.configSource.configMap.namespace", "spec.taints[].effect", "spec.taints[].key"} {
		out = append(out, at+"."+p)
	}
	return out
}

// All are the facts of MCM's four CRDs.
var All = []Facts{
	{
		Plural:        "machineclasses",
		Required:      []string{"providerSpec", "nodeTemplate.capacity", "nodeTemplate.instanceType", "nodeTemplate.region", "nodeTemplate.zone"},
		Preserve:      []string{"nodeTemplate", "providerSpec"},
		Properties:    20,
		MachinistOnly: []string{"status", "status.conditions", "status.conditions[]", "status.conditions[].lastTransitionTime", "status.conditions[].message", "status.conditions[].observedGeneration", "status.conditions[].reason", "status.conditions[].status", "status.conditions[].type"},
	},
	{
		Plural: "machines",
		Required: append(nodeTemplateSpecRequired("spec.nodeTemplate"),
			"status.addresses[].address", "status.addresses[].type", "status.conditions[].status", "status.conditions[].type"),
		Preserve:          []string{"spec.nodeTemplate.metadata"},
		Properties:        64,
		StatusSubresource: true,
		MachinistOnly:     openMetadata("spec.nodeTemplate.metadata"),
	},
	{
		Plural: "machinesets",
		Required: append(append([]string{"spec.selector.matchExpressions[].key", "spec.selector.matchExpressions[].operator"},
			nodeTemplateSpecRequired("spec.template.spec.nodeTemplate")...),
			"status.machineSetCondition[].status", "status.machineSetCondition[].type"),
		Preserve:          []string{"spec.template.metadata", "spec.template.spec.nodeTemplate.metadata"},
		Properties:        90,
		StatusSubresource: true,
		Scale:             true,
		MachinistOnly: append(append(openMetadata("spec.template.metadata"), openMetadata("spec.template.spec.nodeTemplate.metadata")...),
			"status.labelSelector"),
	},
	{
		Plural: "machinedeployments",
		Required: append(append([]string{"spec.template", "spec.selector.matchExpressions[].key", "spec.selector.matchExpressions[].operator"},
			nodeTemplateSpecRequired("spec.template.spec.nodeTemplate")...),
			"status.conditions[].status", "status.conditions[].type"),
		Preserve:          []string{"spec.template.metadata", "spec.template.spec.nodeTemplate.metadata"},
		Properties:        96,
		StatusSubresource: true,
		Scale:             true,
		MachinistOnly: append(append(openMetadata("spec.template.metadata"), openMetadata("spec.template.spec.nodeTemplate.metadata")...),
			"status.fallbackReplicas", "status.labelSelector", "status.standbyReady", "status.standbyStarting"),
	},
}

// Of returns the facts of plural.
func Of(plural string) (Facts, bool) {
	for _, f := range All {
		if f.Plural == plural {
			return f, true
		}
	}
	return Facts{}, false
}

// Schema is what a CRD's schema says, in the terms of Facts.
type Schema struct {
	Required, Preserve, Properties []string
}

// Read walks a CRD's (first version's) schema.
func Read(crd *apiextensionsv1.CustomResourceDefinition) Schema {
	var s Schema
	if len(crd.Spec.Versions) == 0 || crd.Spec.Versions[0].Schema == nil {
		return s
	}
	walk(crd.Spec.Versions[0].Schema.OpenAPIV3Schema, "", func(path string, p *apiextensionsv1.JSONSchemaProps) {
		if path != "" {
			s.Properties = append(s.Properties, path)
		}
		if p.XPreserveUnknownFields != nil && *p.XPreserveUnknownFields {
			s.Preserve = append(s.Preserve, path)
		}
		for _, r := range p.Required {
			s.Required = append(s.Required, join(path, r))
		}
	})
	sort.Strings(s.Required)
	sort.Strings(s.Preserve)
	sort.Strings(s.Properties)
	return s
}

func join(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

// walk calls fn for every schema node below (and including) p, depth first.
func walk(p *apiextensionsv1.JSONSchemaProps, path string, fn func(string, *apiextensionsv1.JSONSchemaProps)) {
	if p == nil {
		return
	}
	fn(path, p)
	names := make([]string, 0, len(p.Properties))
	for k := range p.Properties {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		v := p.Properties[k]
		walk(&v, join(path, k), fn)
		p.Properties[k] = v
	}
	if p.Items != nil && p.Items.Schema != nil {
		walk(p.Items.Schema, path+"[]", fn)
	}
	if p.AdditionalProperties != nil && p.AdditionalProperties.Schema != nil {
		walk(p.AdditionalProperties.Schema, path+"{}", fn)
	}
}

// Shape rewrites one of machinist's CRDs into the shape of MCM's: the machinist-only
// properties (and printer columns reading them) go, the required and preserve-unknown sets become
// MCM's, and the subresources MCM's (no MachineClass status, no scale label selector).
func Shape(crd *apiextensionsv1.CustomResourceDefinition) error {
	f, ok := Of(crd.Spec.Names.Plural)
	if !ok {
		return fmt.Errorf("mcmcrds: no facts about %s", crd.Spec.Names.Plural)
	}
	v := &crd.Spec.Versions[0]
	drop := map[string]bool{}
	for _, p := range f.MachinistOnly {
		drop[p] = true
	}
	required := map[string][]string{}
	for _, r := range f.Required {
		i := strings.LastIndex(r, ".")
		parent, name := "", r
		if i >= 0 {
			parent, name = r[:i], r[i+1:]
		}
		required[parent] = append(required[parent], name)
	}
	walk(v.Schema.OpenAPIV3Schema, "", func(path string, p *apiextensionsv1.JSONSchemaProps) {
		for k := range p.Properties {
			if drop[join(path, k)] {
				delete(p.Properties, k)
			}
		}
		p.Required = slices.Clone(required[path])
		sort.Strings(p.Required)
		p.XPreserveUnknownFields = nil
		if slices.Contains(f.Preserve, path) {
			p.XPreserveUnknownFields = ptr.To(true)
		}
	})
	var cols []apiextensionsv1.CustomResourceColumnDefinition
	for _, c := range v.AdditionalPrinterColumns {
		if !drop[strings.TrimPrefix(c.JSONPath, ".")] {
			cols = append(cols, c)
		}
	}
	v.AdditionalPrinterColumns = cols
	v.Subresources = nil
	if f.StatusSubresource || f.Scale {
		v.Subresources = &apiextensionsv1.CustomResourceSubresources{}
	}
	if f.StatusSubresource {
		v.Subresources.Status = &apiextensionsv1.CustomResourceSubresourceStatus{}
	}
	if f.Scale {
		v.Subresources.Scale = &apiextensionsv1.CustomResourceSubresourceScale{SpecReplicasPath: ".spec.replicas", StatusReplicasPath: ".status.replicas"}
	}
	return nil
}

// ReadDir reads the machine.sapcloud.io CRDs of the YAML files in dir, the ones MCM has too
// (machinist's own API groups, such as machinist.io, have no MCM counterpart and are skipped).
func ReadDir(dir string) ([]*apiextensionsv1.CustomResourceDefinition, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var out []*apiextensionsv1.CustomResourceDefinition
	for _, e := range entries {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".yaml") {
			continue
		}
		data, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			return nil, err
		}
		dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
		for {
			crd := &apiextensionsv1.CustomResourceDefinition{}
			if err := dec.Decode(crd); err != nil {
				if errors.Is(err, io.EOF) {
					break
				}
				return nil, fmt.Errorf("mcmcrds: %s: %w", e.Name(), err)
			}
			if crd.Name != "" && crd.Spec.Group == "machine.sapcloud.io" {
				out = append(out, crd)
			}
		}
	}
	return out, nil
}

// Write writes MCM-shaped copies of machinist's CRDs in src (kubernetes/crds) into dst.
func Write(src, dst string) error {
	crds, err := ReadDir(src)
	if err != nil {
		return err
	}
	if len(crds) != len(All) {
		return fmt.Errorf("mcmcrds: %d CRDs in %s, facts about %d", len(crds), src, len(All))
	}
	for _, crd := range crds {
		if err := Shape(crd); err != nil {
			return err
		}
		data, err := yaml.Marshal(crd)
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dst, crd.Name+".yaml"), data, 0o600); err != nil {
			return err
		}
	}
	return nil
}

// Stricter lists how a schema is stricter than MCM's: a property it requires that MCM's does
// not (outside the properties MCM's lacks altogether), or a place where MCM's keeps unknown
// fields and it prunes them.
func Stricter(s Schema, f Facts) []string {
	var out []string
	for _, p := range f.Preserve {
		if !slices.Contains(s.Preserve, p) {
			out = append(out, "keeps no unknown fields at "+p)
		}
	}
	for _, r := range s.Required {
		if !slices.Contains(f.Required, r) && !machinistOnly(f, r) {
			out = append(out, "requires "+r)
		}
	}
	sort.Strings(out)
	return out
}

// Mismatches lists how a CRD differs from the facts of MCM's: its required and preserve-unknown
// sets, its number of schema properties, its status subresource, and its scale subresource
// (which MCM's has without a label selector).
func Mismatches(crd *apiextensionsv1.CustomResourceDefinition, f Facts) []string {
	var out []string
	s := Read(crd)
	if want := sortedCopy(f.Required); !slices.Equal(s.Required, want) {
		out = append(out, fmt.Sprintf("%s: required %q, MCM's %q", crd.Name, s.Required, want))
	}
	if want := sortedCopy(f.Preserve); !slices.Equal(s.Preserve, want) {
		out = append(out, fmt.Sprintf("%s: preserve %q, MCM's %q", crd.Name, s.Preserve, want))
	}
	if len(s.Properties) != f.Properties {
		out = append(out, fmt.Sprintf("%s: %d properties, MCM's %d", crd.Name, len(s.Properties), f.Properties))
	}
	v := crd.Spec.Versions[0]
	status := v.Subresources != nil && v.Subresources.Status != nil
	scale := v.Subresources != nil && v.Subresources.Scale != nil
	if status != f.StatusSubresource || scale != f.Scale || (scale && v.Subresources.Scale.LabelSelectorPath != nil) {
		out = append(out, fmt.Sprintf("%s: subresources %+v, MCM's status %v scale %v (without label selector)", crd.Name, v.Subresources, f.StatusSubresource, f.Scale))
	}
	return out
}

func sortedCopy(s []string) []string {
	out := slices.Clone(s)
	slices.Sort(out)
	return out
}

// machinistOnly reports whether path is, or lies below, a property MCM's schema lacks.
func machinistOnly(f Facts, path string) bool {
	for _, p := range f.MachinistOnly {
		if path == p || strings.HasPrefix(path, p+".") || strings.HasPrefix(path, p+"[]") || strings.HasPrefix(path, p+"{}") {
			return true
		}
	}
	return false
}
