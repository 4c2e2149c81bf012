// Package standby holds the decisions of machinist's standby machines (docs/machine-controller.md,
// "Standby machines"): a MachineDeployment annotated machinist.io/standby: "N" keeps N machines of
// its current template created, booted once, then drained and stopped through the driver's
// optional PowerDriver; a scale-up resumes them before it creates machines.
//
// Standby machines are Machine objects, so they survive controller restarts and handovers and
// their VMs are never orphans. They are owned by the MachineDeployment (deleting it deletes them)
// and by no MachineSet, and carry none of the template's labels, so no set's selector matches them
// (MCM's MachineSet controller adopts matching orphans and would count them as replicas). The
// package has no Kubernetes client: it reads and builds objects; the controllers write them.
package standby

import (
	"fmt"
	"strconv"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
)

// Annotations and labels of the feature. Only Annotation on a MachineDeployment is the user's.
const (
	// Annotation on a MachineDeployment: how many standby machines to keep ("N", 0 to MaxPool).
	// On a Machine: the name of the deployment it stands by for (removed when a set claims it).
	Annotation = "machinist.io/standby"
	// AnnotationState on a standby Machine: where it is in its lifecycle (a State).
	AnnotationState = "machinist.io/standby-state"
	// AnnotationTemplateHash on a standby Machine: the template hash of the MachineSet it was made
	// for. Kept as an annotation, not the machine-template-hash label, so no selector matches.
	AnnotationTemplateHash = "machinist.io/standby-template-hash"
	// LabelDeployment on a standby Machine: its deployment's name, to list a pool by label.
	LabelDeployment = "machinist.io/standby-for"
)

// MaxPool bounds the annotation: a pool is a handful of warm machines, not a second fleet.
const MaxPool = 100

// State is a standby machine's place in its lifecycle.
type State string

const (
	// Booting: created, running until its node is Ready once (bootstrap and image pulls done).
	Booting State = "Booting"
	// Stopping: its node was Ready; it is being drained, its Node deleted and its VM stopped.
	Stopping State = "Stopping"
	// Stopped: its VM is stopped; a set may claim it.
	Stopped State = "Stopped"
)

// Desired reads how many standby machines md wants: 0 without the annotation; an error naming the
// annotation and what to write when its value is not a whole number from 0 to MaxPool.
func Desired(md *v1alpha1.MachineDeployment) (int, error) {
	v, ok := md.Annotations[Annotation]
	if !ok {
		return 0, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 || n > MaxPool {
		return 0, fmt.Errorf("standby: annotation %s=%q on MachineDeployment %s/%s: want a whole number from 0 to %d "+
			"(how many stopped machines to keep ready for a scale-up)", Annotation, v, md.Namespace, md.Name, MaxPool)
	}
	return n, nil
}

// Member is what the decisions need of one standby machine.
type Member struct {
	Name     string
	Hash     string // the template hash it was made for
	State    State
	Deleting bool
}

// MemberOf reads a standby machine of deployment; ok is false for any other machine (a claimed
// one included: it lost the annotation when its set claimed it).
func MemberOf(m *v1alpha1.Machine, deployment string) (Member, bool) {
	if m.Annotations[Annotation] != deployment || deployment == "" {
		return Member{}, false
	}
	st := State(m.Annotations[AnnotationState])
	if st != Stopping && st != Stopped {
		st = Booting // a machine written without a state is at the start of its life
	}
	return Member{
		Name:     m.Name,
		Hash:     m.Annotations[AnnotationTemplateHash],
		State:    st,
		Deleting: m.DeletionTimestamp != nil,
	}, true
}
