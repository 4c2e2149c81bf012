package driver

import "strings"

// ProviderIDKey is the form of a provider ID under which the IDs that name the same VM compare
// equal. Clouds and their tools spell one VM's ID in more than one way, and a machine records
// the spelling of whoever created it while its node carries the cloud controller manager's:
//   - GCE's cloud controller manager writes gce://project/zone/name, Gardener's GCP provider
//     writes gce:///project/zone/name: empty path segments do not count;
//   - AWS's cloud controller manager writes aws:///zone/i-…, Gardener's AWS provider
//     aws:///region/i-…: an EC2 instance ID is unique in its partition, so it alone names the
//     instance.
//
// Scheme and segments are otherwise kept as they are (case included): two IDs of different
// schemes never match. An ID without a scheme is returned unchanged.
func ProviderIDKey(id string) string {
	scheme, rest, ok := strings.Cut(id, "://")
	if !ok || scheme == "" {
		return id
	}
	segments := strings.FieldsFunc(rest, func(r rune) bool { return r == '/' })
	if scheme == "aws" && len(segments) > 0 {
		if last := segments[len(segments)-1]; strings.HasPrefix(last, "i-") {
			segments = segments[len(segments)-1:]
		}
	}
	return scheme + ":///" + strings.Join(segments, "/")
}

// SameProviderID reports whether the provider IDs a and b name the same VM (ProviderIDKey). An
// empty ID names no VM and matches nothing.
func SameProviderID(a, b string) bool {
	if a == "" || b == "" {
		return false
	}
	return a == b || ProviderIDKey(a) == ProviderIDKey(b)
}
