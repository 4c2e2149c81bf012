package local

import (
	"fmt"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/core/driver"
)

// ProviderSpec is the providerSpec of a local MachineClass. Every field but cluster is optional.
// See README.md for examples.
type ProviderSpec struct {
	// Cluster scopes the class's machines like a cloud tag: ListMachines returns only machines of
	// this cluster. Required; a DNS label.
	Cluster string `json:"cluster"`
	// CPU capacity of the node, e.g. 2 or "500m". Default 2.
	CPU *intstr.IntOrString `json:"cpu,omitempty"`
	// Memory capacity of the node, e.g. "4Gi". Default 4Gi.
	Memory *intstr.IntOrString `json:"memory,omitempty"`
	// Pods is the node's pod capacity. Default 110.
	Pods *int32 `json:"pods,omitempty"`
	// Labels are added to the node's labels.
	Labels map[string]string `json:"labels,omitempty"`
	// Zone is the node's topology.kubernetes.io/zone label. Default "local-1".
	Zone string `json:"zone,omitempty"`
	// InstanceType is the node's node.kubernetes.io/instance-type label. Default "local".
	InstanceType string `json:"instanceType,omitempty"`
	// BootDelay is how long after CreateMachine the node registers (a Go duration). Default 0:
	// the node is registered before CreateMachine returns.
	BootDelay string `json:"bootDelay,omitempty"`
	// ReadyDelay is how long after registering the node reports Ready (a Go duration): until
	// then it is NotReady, as while a kubelet waits for its network plugin. Default 0.
	ReadyDelay string `json:"readyDelay,omitempty"`
	// NeverReady registers the node and keeps its heartbeat, but it never becomes Ready: a VM
	// whose kubelet runs but whose node never works.
	NeverReady bool `json:"neverReady,omitempty"`
	// HeartbeatInterval is how often the node agent renews the node's Lease. Default 10s.
	HeartbeatInterval string `json:"heartbeatInterval,omitempty"`
	// NodeMonitorGracePeriod is how long after the last heartbeat the node's Ready condition
	// becomes Unknown. Default 40s, as in kube-controller-manager; it must exceed
	// heartbeatInterval.
	NodeMonitorGracePeriod string `json:"nodeMonitorGracePeriod,omitempty"`
	// StopHeartbeat starts the machine with its heartbeat stopped: the node registers, then goes
	// silent, like a machine that died after boot. The heartbeat switch (SetHeartbeat, `machinist
	// driver heartbeat`) overrides it per machine.
	StopHeartbeat bool `json:"stopHeartbeat,omitempty"`
	// CreateError makes CreateMachine fail with a chosen code.
	CreateError *InjectedError `json:"createError,omitempty"`
	// DeleteError makes DeleteMachine fail with a chosen code.
	DeleteError *InjectedError `json:"deleteError,omitempty"`
	// StartDelay is how long after StartMachine a stopped machine's node registers again (a Go
	// duration): its boot. Default 0: registered before StartMachine returns. readyDelay follows
	// it as after a creation.
	StartDelay string `json:"startDelay,omitempty"`
	// StartError makes StartMachine fail with a chosen code (ResourceExhausted: no capacity to
	// start the stopped VM, as EC2's InsufficientInstanceCapacity).
	StartError *InjectedError `json:"startError,omitempty"`
	// UpdateDelay is how long the node agent takes to update a node in place to this class (a
	// Go duration), counted from the node becoming ReadyForUpdate. Default 0.
	UpdateDelay string `json:"updateDelay,omitempty"`
	// UpdateError makes every in-place update to this class fail: the node agent labels the
	// node update-result=failed and annotates it with the reason.
	UpdateError *UpdateError `json:"updateError,omitempty"`
}

// UpdateError is a failing in-place update a test asks for.
type UpdateError struct {
	// Reason becomes the node's update-failed-reason annotation. Default "injected by
	// providerSpec.updateError".
	Reason string `json:"reason,omitempty"`
}

// InjectedError is a failure a test asks for.
type InjectedError struct {
	// Code is the name of a machine code, e.g. ResourceExhausted. Required; not OK.
	Code string `json:"code"`
	// Message is the error message. Default "injected by providerSpec.<field>".
	Message string `json:"message,omitempty"`
	// Times is how many calls per machine fail (counted per process) before calls succeed.
	// 0 means every call fails.
	Times int `json:"times,omitempty"`
}

// Defaults of the providerSpec.
const (
	DefaultCPU                    = "2"
	DefaultMemory                 = "4Gi"
	DefaultPods                   = 110
	DefaultZone                   = "local-1"
	DefaultInstanceType           = "local"
	DefaultHeartbeatInterval      = 10 * time.Second
	DefaultNodeMonitorGracePeriod = 40 * time.Second
)

// machineSpec is a validated providerSpec with defaults applied; it is what a machine record
// keeps, so a machine keeps the shape it was created with.
type machineSpec struct {
	Cluster                string            `json:"cluster"`
	CPU                    resource.Quantity `json:"cpu"`
	Memory                 resource.Quantity `json:"memory"`
	Pods                   int32             `json:"pods"`
	Labels                 map[string]string `json:"labels,omitempty"`
	Zone                   string            `json:"zone"`
	InstanceType           string            `json:"instanceType"`
	BootDelay              time.Duration     `json:"bootDelay,omitempty"`
	ReadyDelay             time.Duration     `json:"readyDelay,omitempty"`
	NeverReady             bool              `json:"neverReady,omitempty"`
	HeartbeatInterval      time.Duration     `json:"heartbeatInterval"`
	NodeMonitorGracePeriod time.Duration     `json:"nodeMonitorGracePeriod"`
	StopHeartbeat          bool              `json:"stopHeartbeat,omitempty"`
	// UpdateDelay and UpdateError apply to in-place updates to the class, StartDelay to starts
	// with it; a machine's record does not keep them.
	UpdateDelay time.Duration `json:"-"`
	StartDelay  time.Duration `json:"-"`
	UpdateError *UpdateError  `json:"-"`
}

// classSpec checks the class's provider and decodes (in mode), validates and defaults its
// providerSpec.
func classSpec(class *v1alpha1.MachineClass, mode driver.SpecMode) (*ProviderSpec, *machineSpec, error) {
	spec, ms, _, err := decodeClassSpec(class, mode)
	return spec, ms, err
}

// checkSpec is the provider's registry.Registration.CheckSpec.
func checkSpec(class *v1alpha1.MachineClass, mode driver.SpecMode) ([]driver.SpecWarning, error) {
	_, _, warnings, err := decodeClassSpec(class, mode)
	return warnings, err
}

// decodeClassSpec is classSpec returning the decoding warnings too. Keys match field names
// case-sensitively, as Kubernetes decodes its objects (driver.ExactNames); unknown fields are
// ignored in driver.Lenient mode and refused in driver.Strict mode.
func decodeClassSpec(class *v1alpha1.MachineClass, mode driver.SpecMode) (*ProviderSpec, *machineSpec, []driver.SpecWarning, error) {
	if err := driver.CheckProvider(class, ProviderName); err != nil {
		return nil, nil, nil, err
	}
	var spec ProviderSpec
	warnings, err := driver.DecodeSpec(class, &spec, mode, driver.ExactNames)
	if err != nil {
		return nil, nil, warnings, driver.NoteSpecWarnings(err, warnings)
	}
	ms, errs := spec.resolve(driver.ProviderSpecPath)
	if err := driver.Invalid(class, errs); err != nil {
		return nil, nil, warnings, driver.NoteSpecWarnings(err, warnings)
	}
	return &spec, ms, warnings, nil
}

// resolve validates the spec and applies defaults. Errors name the field under path.
func (s *ProviderSpec) resolve(path *field.Path) (*machineSpec, field.ErrorList) {
	var errs field.ErrorList
	ms := &machineSpec{
		Cluster:                s.Cluster,
		Pods:                   DefaultPods,
		Labels:                 s.Labels,
		Zone:                   orDefault(s.Zone, DefaultZone),
		InstanceType:           orDefault(s.InstanceType, DefaultInstanceType),
		HeartbeatInterval:      DefaultHeartbeatInterval,
		NodeMonitorGracePeriod: DefaultNodeMonitorGracePeriod,
		StopHeartbeat:          s.StopHeartbeat,
		NeverReady:             s.NeverReady,
	}
	if s.Cluster == "" {
		errs = append(errs, field.Required(path.Child("cluster"), "set the cluster the machines belong to (a DNS label, e.g. dev)"))
	} else {
		for _, msg := range validation.IsDNS1123Label(s.Cluster) {
			errs = append(errs, field.Invalid(path.Child("cluster"), s.Cluster, msg))
		}
	}
	ms.CPU, errs = quantity(s.CPU, DefaultCPU, path.Child("cpu"), errs)
	ms.Memory, errs = quantity(s.Memory, DefaultMemory, path.Child("memory"), errs)
	if s.Pods != nil {
		ms.Pods = *s.Pods
		if ms.Pods < 1 || ms.Pods > 10000 {
			errs = append(errs, field.Invalid(path.Child("pods"), ms.Pods, "must be between 1 and 10000"))
		}
	}
	for k, v := range s.Labels {
		for _, msg := range validation.IsQualifiedName(k) {
			errs = append(errs, field.Invalid(path.Child("labels").Key(k), k, "label key: "+msg))
		}
		for _, msg := range validation.IsValidLabelValue(v) {
			errs = append(errs, field.Invalid(path.Child("labels").Key(k), v, "label value: "+msg))
		}
	}
	for name, v := range map[string]string{"zone": ms.Zone, "instanceType": ms.InstanceType} {
		for _, msg := range validation.IsValidLabelValue(v) {
			errs = append(errs, field.Invalid(path.Child(name), v, msg))
		}
	}
	ms.BootDelay, errs = duration(s.BootDelay, 0, 0, path.Child("bootDelay"), errs)
	ms.ReadyDelay, errs = duration(s.ReadyDelay, 0, 0, path.Child("readyDelay"), errs)
	if s.NeverReady && s.ReadyDelay != "" {
		errs = append(errs, field.Invalid(path.Child("readyDelay"), s.ReadyDelay, "must be empty when neverReady is true: set one of them"))
	}
	ms.HeartbeatInterval, errs = duration(s.HeartbeatInterval, DefaultHeartbeatInterval, 100*time.Millisecond, path.Child("heartbeatInterval"), errs)
	ms.NodeMonitorGracePeriod, errs = duration(s.NodeMonitorGracePeriod, DefaultNodeMonitorGracePeriod, 100*time.Millisecond, path.Child("nodeMonitorGracePeriod"), errs)
	if s.NodeMonitorGracePeriod != "" && ms.NodeMonitorGracePeriod <= ms.HeartbeatInterval {
		errs = append(errs, field.Invalid(path.Child("nodeMonitorGracePeriod"), s.NodeMonitorGracePeriod,
			fmt.Sprintf("must be longer than heartbeatInterval (%s)", ms.HeartbeatInterval)))
	}
	errs = append(errs, s.CreateError.validate(path.Child("createError"))...)
	errs = append(errs, s.DeleteError.validate(path.Child("deleteError"))...)
	errs = append(errs, s.StartError.validate(path.Child("startError"))...)
	ms.StartDelay, errs = duration(s.StartDelay, 0, 0, path.Child("startDelay"), errs)
	ms.UpdateDelay, errs = duration(s.UpdateDelay, 0, 0, path.Child("updateDelay"), errs)
	if e := s.UpdateError; e != nil {
		if len(e.Reason) > maxUpdateErrorReason {
			errs = append(errs, field.TooLong(path.Child("updateError", "reason"), "", maxUpdateErrorReason))
		}
		ms.UpdateError = e
	}
	return ms, errs
}

// maxUpdateErrorReason bounds updateError.reason, which becomes a node annotation.
const maxUpdateErrorReason = 1024

func (e *InjectedError) validate(path *field.Path) field.ErrorList {
	if e == nil {
		return nil
	}
	var errs field.ErrorList
	if code, ok := driver.ParseCode(e.Code); !ok || code == driver.OK {
		errs = append(errs, field.Invalid(path.Child("code"), e.Code, "must name a machine code other than OK, e.g. ResourceExhausted or Unavailable"))
	}
	if e.Times < 0 {
		errs = append(errs, field.Invalid(path.Child("times"), e.Times, "must be 0 (always) or a positive count"))
	}
	return errs
}

// err returns the injected error for field (createError, deleteError or startError).
func (e *InjectedError) err(fieldName string) error {
	code, _ := driver.ParseCode(e.Code)
	msg := e.Message
	if msg == "" {
		msg = "injected by providerSpec." + fieldName
	}
	return driver.Error(code, "local: "+msg)
}

func quantity(v *intstr.IntOrString, def string, path *field.Path, errs field.ErrorList) (resource.Quantity, field.ErrorList) {
	s := def
	if v != nil {
		s = v.String()
	}
	q, err := resource.ParseQuantity(s)
	if err != nil {
		return q, append(errs, field.Invalid(path, s, "must be a quantity such as 2, 500m or 4Gi"))
	}
	if q.Sign() <= 0 {
		return q, append(errs, field.Invalid(path, s, "must be positive"))
	}
	return q, errs
}

func duration(s string, def, minimum time.Duration, path *field.Path, errs field.ErrorList) (time.Duration, field.ErrorList) {
	if s == "" {
		return def, errs
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return def, append(errs, field.Invalid(path, s, "must be a Go duration such as 2s or 1m30s"))
	}
	if d < minimum || d > 24*time.Hour {
		return def, append(errs, field.Invalid(path, s, fmt.Sprintf("must be between %s and 24h", max(minimum, 0))))
	}
	return d, errs
}

func orDefault(s, def string) string {
	if strings.TrimSpace(s) == "" {
		return def
	}
	return s
}
