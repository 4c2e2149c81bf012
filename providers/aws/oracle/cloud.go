package oracle

import (
	"net"

	"github.com/machinist-io/machinist/providers/kit/fakekit"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/machinist-io/machinist/providers/aws"
	"github.com/machinist-io/machinist/providers/aws/fakeaws"
)

// The account every scenario runs in: one region with a VPC in two zones, and the AMIs,
// security groups, key pair, instance profile, placement group and capacity reservations the
// scenarios' classes name.
const (
	Region        = "eu-west-1"
	ZoneA         = Region + "a"
	ZoneB         = Region + "b"
	VPC           = "vpc-0a1b2c3d4e5f60718"
	SubnetA       = "subnet-0aaaaaaaaaaaaaaa1"
	SubnetB       = "subnet-0bbbbbbbbbbbbbbb2"
	NodesSG       = "sg-0a1b2c3d4e5f60718"
	ExtraSG       = "sg-0b1b2c3d4e5f60719"
	AMI           = "ami-0a1b2c3d4e5f60718"
	ArmAMI        = "ami-0b1b2c3d4e5f60719"
	KeyName       = "shoot--dev--alpha-ssh"
	Profile       = "shoot--dev--alpha-nodes"
	PlacementID   = "pg-0a1b2c3d4e5f60718"
	Reservation   = "cr-0a1b2c3d4e5f60718"
	GPUReserved   = "cr-0b1b2c3d4e5f60719"
	AccessKeyID   = "AKIAORACLETEST000001"
	SecretKey     = "oracle-test-secret-access-key-0a1b2c3d"
	UserData      = "#cloud-config\nruncmd:\n- echo join\n"
	SecretName    = "cloudprovider"
	Namespace     = "shoot--dev--alpha"
	ClusterTag    = "kubernetes.io/cluster/shoot--dev--alpha"
	RoleTag       = "kubernetes.io/role/node"
	PlacementName = "workers-partition"
)

// NewCloud returns the fake account the scenarios run in.
func NewCloud() *fakeaws.Cloud {
	c := fakeaws.New(fakeaws.Options{Region: Region})
	c.Identity.AddAccessKey(AccessKeyID, SecretKey)
	c.Network.AddSubnet(SubnetA, VPC, ZoneA, "10.250.0.0/19")
	c.Network.AddSubnet(SubnetB, VPC, ZoneB, "10.250.32.0/19")
	c.Network.AddSecurityGroup(NodesSG, VPC, "shoot--dev--alpha-nodes")
	c.Network.AddSecurityGroup(ExtraSG, VPC, "shoot--dev--alpha-extra")
	c.AddImage(AMI, "gardenlinux-1592.1.0", "/dev/xvda")
	c.AddImageFor(ArmAMI, "gardenlinux-1592.1.0-arm64", "/dev/xvda", "arm64")
	c.AddKeyPair(KeyName)
	c.Identity.AddInstanceProfile(Profile)
	c.AddPlacementGroup(PlacementID, PlacementName, "partition", 3)
	c.Capacity.AddCapacityReservation(Reservation, "m5.large", ZoneA, 2)
	c.Capacity.AddCapacityReservation(GPUReserved, "p4d.24xlarge", ZoneA, 1)
	c.Capacity.SetSpotPrice("m5.large", 0.03)
	return c
}

// Serve serves c on a loopback port.
func Serve(c *fakeaws.Cloud) (*fakekit.Server, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	return c.Serve(l, nil)
}

// NewSecret is the class's secret: Gardener's keys and the user data. Gardener's driver reaches
// the fake through AWS_ENDPOINT_URL_EC2, machinist's through the ec2Endpoint key (Target adds it).
func NewSecret() *corev1.Secret {
	return &corev1.Secret{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
		ObjectMeta: metav1.ObjectMeta{Name: SecretName, Namespace: Namespace},
		Data: map[string][]byte{
			aws.KeyAccessKeyID:     []byte(AccessKeyID),
			aws.KeySecretAccessKey: []byte(SecretKey),
			aws.KeyUserData:        []byte(UserData),
		},
	}
}
