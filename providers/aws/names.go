package aws

import (
	"crypto/sha256"
	"encoding/hex"
	"net/url"
	"regexp"
	"strings"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
)

// providerID is aws:///<region>/<instance-id>, what Gardener's provider writes on machines
// (pkg/aws/util.go encodeInstanceID), so tools that compare machines' provider IDs as strings
// see no change after a takeover from MCM or a handback to it. The AWS cloud controller manager
// writes aws:///<zone>/<instance-id> on the Node; the controllers compare the two by instance ID
// (driver.SameProviderID).
func providerID(region, instanceID string) string { return "aws:///" + region + "/" + instanceID }

var instanceIDPattern = regexp.MustCompile(`^i-[0-9a-f]{8,17}$`)

// instanceFromProviderID returns the instance ID of a provider ID. It takes the region form
// machinist and Gardener's provider write and the zone form machinist wrote before (and the
// cloud controller manager writes on Nodes), so existing machines are found too.
func instanceFromProviderID(id string) (string, bool) {
	rest, ok := strings.CutPrefix(id, "aws://")
	if !ok {
		return "", false
	}
	last := rest[strings.LastIndex(rest, "/")+1:]
	if !instanceIDPattern.MatchString(last) {
		return "", false
	}
	return last, true
}

// clientToken is the ClientToken of the machine's RunInstances: the same for a retried create
// of the same machine and class, so EC2 answers a repeated request with the instance the
// first one made instead of launching a second. It derives from the machine's UID (its name
// when it has none, as from the CLI), the class and its providerSpec, and after is the
// instance the previous token launched when that one was terminated since: EC2 keeps answering
// a token with its instance even after termination, so the next instance needs the next token.
func clientToken(m *v1alpha1.Machine, class *v1alpha1.MachineClass, after string) string {
	h := sha256.New()
	id := string(m.UID)
	if id == "" {
		id = m.Namespace + "/" + m.Name
	}
	for _, s := range []string{id, class.Namespace + "/" + class.Name, string(class.ProviderSpec.Raw), after} {
		h.Write([]byte(s))
		h.Write([]byte{0})
	}
	return "machinist-" + hex.EncodeToString(h.Sum(nil))[:40]
}

var volumeIDPattern = regexp.MustCompile(`^vol-[^/]*$`)

// ebsVolumeID translates an in-tree AWSElasticBlockStore volume ID (aws://<zone>/<vol>,
// aws:///<vol> or <vol>) to the EBS volume ID, as Gardener's provider does (pkg/aws/util.go
// kubernetesVolumeIDToEBSVolumeID).
func ebsVolumeID(kubernetesID string) (string, bool) {
	if !strings.HasPrefix(kubernetesID, "aws://") {
		return kubernetesID, kubernetesID != ""
	}
	u, err := url.Parse(kubernetesID)
	if err != nil || u.Scheme != "aws" {
		return "", false
	}
	id := strings.Trim(u.Path, "/")
	if !volumeIDPattern.MatchString(id) {
		return "", false
	}
	return id, true
}
