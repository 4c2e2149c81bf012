package gcp

import (
	"fmt"
	"regexp"
	"strings"
)

// collection is a kind of Compute Engine resource a spec field names, and where such resources
// live: global, in a region or in a zone.
type collection struct {
	kind  string // the URL's collection segment
	scope string // "global", "regions" or "zones"
}

var (
	networks     = collection{kind: "networks", scope: "global"}
	subnetworks  = collection{kind: "subnetworks", scope: "regions"}
	diskTypes    = collection{kind: "diskTypes", scope: "zones"}
	machineTypes = collection{kind: "machineTypes", scope: "zones"}
)

// resourceRef is a parsed spec value naming a resource.
type resourceRef struct {
	name string
	// url is true when the value was a full or partial URL: it goes to Compute Engine as given.
	url bool
}

var (
	// projectPattern is the project path parameter's pattern in the Compute discovery document
	// (a domain-scoped project "example.com:p" included).
	projectPattern = regexp.MustCompile(`^(?:(?:[-a-z0-9]{1,63}\.)*(?:[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?):)?(?:[0-9]{1,19}|(?:[a-z0-9](?:[-a-z0-9]{0,61}[a-z0-9])?))$`)
	// apiURLPrefix is what a full URL has before its partial URL: the API's root on any host
	// (www.googleapis.com, compute.googleapis.com, another universe's such as S3NS's) and version.
	apiURLPrefix = regexp.MustCompile(`^https?://[^/]+/compute/(?:v1|beta|alpha)/`)
)

// parseRef reads a spec value that names a resource of coll as Compute Engine accepts it (the
// discovery document's descriptions of NetworkInterface.network and .subnetwork,
// AttachedDiskInitializeParams.diskType and Instance.machineType): a name, a partial URL
// ([projects/P/]global/networks/N, [projects/P/]regions/R/subnetworks/N,
// [projects/P/]zones/Z/diskTypes/T) or a full URL (the same behind
// https://HOST/compute/v1/). where, when set, is the region or zone a regional or zonal URL must
// name: a subnetwork of another region or a disk type of another zone cannot be used.
func parseRef(v string, coll collection, where string) (resourceRef, error) {
	if resourceNamePattern.MatchString(v) {
		return resourceRef{name: v}, nil
	}
	partial := apiURLPrefix.ReplaceAllString(v, "")
	s := strings.Split(partial, "/")
	if len(s) >= 2 && s[0] == "projects" {
		if !projectPattern.MatchString(s[1]) {
			return resourceRef{}, fmt.Errorf("%q is not a project ID", s[1])
		}
		s = s[2:]
	}
	var name, at string
	switch {
	case coll.scope == "global" && len(s) == 3 && s[0] == "global" && s[1] == coll.kind:
		name = s[2]
	case coll.scope != "global" && len(s) == 4 && s[0] == coll.scope && s[2] == coll.kind:
		at, name = s[1], s[3]
	default:
		return resourceRef{}, fmt.Errorf("a URL must end in %s", refShape(coll))
	}
	if !resourceNamePattern.MatchString(name) {
		return resourceRef{}, fmt.Errorf("%q is not a resource name", name)
	}
	if where != "" && at != "" && at != where {
		return resourceRef{}, fmt.Errorf("it names %s %s, not the class's %s", strings.TrimSuffix(coll.scope, "s"), at, where)
	}
	return resourceRef{name: name, url: true}, nil
}

// refShape is the partial URL a reference of coll ends in.
func refShape(coll collection) string {
	if coll.scope == "global" {
		return "global/" + coll.kind + "/NAME"
	}
	return coll.scope + "/" + strings.ToUpper(strings.TrimSuffix(coll.scope, "s")) + "/" + coll.kind + "/NAME"
}

// refValue is what an instance sends for a spec value that names a resource: a URL as given, a
// name as the partial URL Gardener's provider writes for it (pkg/gcp/machine_controller_util.go,
// CreateMachineUtil): projects/PROJECT/global/networks/N, regions/REGION/subnetworks/N,
// zones/ZONE/diskTypes/T, zones/ZONE/machineTypes/T. where is the region or zone.
func refValue(v string, coll collection, project, where string) string {
	ref, err := parseRef(v, coll, where)
	if err == nil && ref.url {
		return v
	}
	if coll.scope == "global" {
		return fmt.Sprintf("projects/%s/global/%s/%s", project, coll.kind, v)
	}
	return fmt.Sprintf("%s/%s/%s/%s", coll.scope, where, coll.kind, v)
}

// refName is the resource name a spec value names (for error messages).
func refName(v string, coll collection) string {
	if ref, err := parseRef(v, coll, ""); err == nil {
		return ref.name
	}
	return lastSegment(v)
}
