package infragrpctest

import (
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// AWSClass is the part of the sample's AWSMachineClass this provider reads, decoded from
// GetMachineClass's data as the sample does (encoding/json).
type AWSClass struct {
	metav1.TypeMeta `json:",inline"`
	Metadata        metav1.ObjectMeta `json:"metadata"`
	Spec            struct {
		AMI         string                  `json:"ami"`
		Region      string                  `json:"region"`
		MachineType string                  `json:"machineType"`
		Tags        map[string]string       `json:"tags"`
		SecretRef   *corev1.SecretReference `json:"secretRef"`
	} `json:"spec"`
}

// The sample's credential keys.
const (
	AccessKeyID     = "providerAccessKeyId"
	SecretAccessKey = "providerSecretAccessKey"
)

// Instance is a VM of the in-memory EC2.
type Instance struct {
	ID, Region, Type, UserData string
	Tags                       map[string]string
}

// AWS works like the sample's AwsDriverProvider against an in-memory EC2: the class and the
// secret are pulled for every operation; create tags the instance Name=<machine> plus the class
// tags and answers aws:///<region>/<id> with a private DNS name as the node; list returns the
// instances carrying the class's kubernetes.io/cluster/* and kubernetes.io/role/* tag keys (none
// when the class has neither); delete lists by id first and succeeds when it is gone.
type AWS struct {
	Data DataProvider

	mu        sync.Mutex
	next      int
	instances map[string]*Instance
	seen      []AWSClass
	secrets   []corev1.Secret
}

// Instances returns the running instances, sorted by id.
func (a *AWS) Instances() []Instance {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []Instance
	for _, i := range a.instances {
		out = append(out, *i)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// Pulled returns the classes and secrets the provider decoded, in order.
func (a *AWS) Pulled() ([]AWSClass, []corev1.Secret) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]AWSClass(nil), a.seen...), append([]corev1.Secret(nil), a.secrets...)
}

// data is the sample's getMachineClassData.
func (a *AWS) data(meta *ClassMeta) (*AWSClass, *corev1.Secret, error) {
	if meta == nil {
		return nil, nil, errors.New("no machine class given")
	}
	raw, err := a.Data.GetMachineClass(meta)
	if err != nil {
		return nil, nil, err
	}
	var class AWSClass
	if err := json.Unmarshal([]byte(raw), &class); err != nil {
		return nil, nil, err
	}
	if class.Spec.SecretRef == nil {
		return nil, nil, errors.New("the machine class has no secretRef")
	}
	rawSecret, err := a.Data.GetSecret(&SecretMeta{SecretName: class.Spec.SecretRef.Name, SecretNameSpace: class.Spec.SecretRef.Namespace, Revision: 1})
	if err != nil {
		return nil, nil, err
	}
	var secret corev1.Secret
	if err := json.Unmarshal([]byte(rawSecret), &secret); err != nil {
		return nil, nil, err
	}
	a.mu.Lock()
	a.seen = append(a.seen, class)
	a.secrets = append(a.secrets, secret)
	a.mu.Unlock()
	if len(secret.Data[AccessKeyID]) == 0 || len(secret.Data[SecretAccessKey]) == 0 {
		return nil, nil, fmt.Errorf("secret %s/%s lacks %s or %s", secret.Namespace, secret.Name, AccessKeyID, SecretAccessKey)
	}
	return &class, &secret, nil
}

// Create runs an instance.
func (a *AWS) Create(meta *ClassMeta, _, _, machineName string) (string, string, error) {
	class, secret, err := a.data(meta)
	if err != nil {
		return "", "", err
	}
	if class.Spec.AMI == "" {
		return "Error", "Error", errors.New("InvalidAMIID.Malformed: Invalid id: \"\"")
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.next++
	id := fmt.Sprintf("i-%08x", a.next)
	tags := map[string]string{}
	for k, v := range class.Spec.Tags {
		if k != "Name" {
			tags[k] = v
		}
	}
	tags["Name"] = machineName
	if a.instances == nil {
		a.instances = map[string]*Instance{}
	}
	a.instances[id] = &Instance{ID: id, Region: class.Spec.Region, Type: class.Spec.MachineType, UserData: string(secret.Data["userData"]), Tags: tags}
	return encodeID(class.Spec.Region, id), fmt.Sprintf("ip-10-0-0-%d.%s.compute.internal", a.next, class.Spec.Region), nil
}

// Delete terminates an instance; one that does not exist is already deleted.
func (a *AWS) Delete(meta *ClassMeta, credentials, machineID string) error {
	vms, err := a.List(meta, credentials, machineID)
	if err != nil {
		return err
	}
	if len(vms) == 0 {
		return nil
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.instances, decodeID(machineID))
	return nil
}

// List returns the instances of the class's cluster and role (one when machineID is given).
func (a *AWS) List(meta *ClassMeta, _, machineID string) (map[string]string, error) {
	class, _, err := a.data(meta)
	if err != nil {
		return nil, err
	}
	var cluster, role string
	for k := range class.Spec.Tags {
		if strings.Contains(k, "kubernetes.io/cluster/") {
			cluster = k
		} else if strings.Contains(k, "kubernetes.io/role/") {
			role = k
		}
	}
	out := map[string]string{}
	if cluster == "" || role == "" {
		return out, nil
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	for id, i := range a.instances {
		_, hasCluster := i.Tags[cluster]
		_, hasRole := i.Tags[role]
		if !hasCluster || !hasRole || (machineID != "" && decodeID(machineID) != id) {
			continue
		}
		out[encodeID(class.Spec.Region, id)] = i.Tags["Name"]
	}
	return out, nil
}

func encodeID(region, id string) string { return fmt.Sprintf("aws:///%s/%s", region, id) }

func decodeID(providerID string) string {
	parts := strings.Split(providerID, "/")
	return parts[len(parts)-1]
}

var _ Provider = (*AWS)(nil)
