package fakeaws

import (
	"encoding/xml"
	"fmt"
	"net/http"
	"sort"
	"time"
)

// ec2Namespace is the XML namespace of EC2's 2016-11-15 API, the version the SDK speaks.
const ec2Namespace = "http://ec2.amazonaws.com/doc/2016-11-15/"

// apiError is an error answer of EC2 (or STS).
type apiError struct {
	status  int
	code    string
	message string
}

func (e *apiError) Error() string { return e.code + ": " + e.message }

func errf(status int, code, format string, args ...any) *apiError {
	return &apiError{status: status, code: code, message: fmt.Sprintf(format, args...)}
}

func badRequest(code, format string, args ...any) *apiError {
	return errf(http.StatusBadRequest, code, format, args...)
}

// ec2ErrorBody is EC2's error document.
type ec2ErrorBody struct {
	XMLName   xml.Name `xml:"Response"`
	Code      string   `xml:"Errors>Error>Code"`
	Message   string   `xml:"Errors>Error>Message"`
	RequestID string   `xml:"RequestID"`
}

// stsErrorBody is the error document of the AWS query protocol (STS).
type stsErrorBody struct {
	XMLName   xml.Name `xml:"ErrorResponse"`
	Type      string   `xml:"Error>Type"`
	Code      string   `xml:"Error>Code"`
	Message   string   `xml:"Error>Message"`
	RequestID string   `xml:"RequestId"`
}

func isoTime(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000Z") }

type xmlTag struct {
	Key   string `xml:"key"`
	Value string `xml:"value"`
}

func xmlTags(tags map[string]string) []xmlTag {
	keys := make([]string, 0, len(tags))
	for k := range tags {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	out := make([]xmlTag, 0, len(keys))
	for _, k := range keys {
		out = append(out, xmlTag{Key: k, Value: tags[k]})
	}
	return out
}

type xmlState struct {
	Code int    `xml:"code"`
	Name string `xml:"name"`
}

type xmlGroup struct {
	GroupID   string `xml:"groupId"`
	GroupName string `xml:"groupName,omitempty"`
}

type xmlPlacement struct {
	AvailabilityZone string `xml:"availabilityZone"`
	GroupName        string `xml:"groupName,omitempty"`
	GroupID          string `xml:"groupId,omitempty"`
	PartitionNumber  int32  `xml:"partitionNumber,omitempty"`
	Tenancy          string `xml:"tenancy"`
}

type xmlInstanceEbs struct {
	VolumeID            string `xml:"volumeId"`
	Status              string `xml:"status"`
	AttachTime          string `xml:"attachTime"`
	DeleteOnTermination bool   `xml:"deleteOnTermination"`
}

type xmlInstanceBDM struct {
	DeviceName string         `xml:"deviceName"`
	Ebs        xmlInstanceEbs `xml:"ebs"`
}

type xmlNICAttachment struct {
	AttachmentID        string `xml:"attachmentId"`
	DeviceIndex         int32  `xml:"deviceIndex"`
	NetworkCardIndex    int32  `xml:"networkCardIndex"`
	Status              string `xml:"status"`
	DeleteOnTermination bool   `xml:"deleteOnTermination"`
}

type xmlIpv6Address struct {
	Address string `xml:"ipv6Address"`
}

type xmlIpv6Prefix struct {
	Prefix string `xml:"ipv6Prefix"`
}

type xmlInstanceNIC struct {
	NetworkInterfaceID string            `xml:"networkInterfaceId"`
	SubnetID           string            `xml:"subnetId"`
	VpcID              string            `xml:"vpcId"`
	Description        string            `xml:"description"`
	OwnerID            string            `xml:"ownerId"`
	Status             string            `xml:"status"`
	PrivateIPAddress   string            `xml:"privateIpAddress"`
	PrivateDNSName     string            `xml:"privateDnsName"`
	SourceDestCheck    bool              `xml:"sourceDestCheck"`
	InterfaceType      string            `xml:"interfaceType"`
	GroupSet           []xmlGroup        `xml:"groupSet>item"`
	Attachment         *xmlNICAttachment `xml:"attachment,omitempty"`
	Ipv6AddressesSet   []xmlIpv6Address  `xml:"ipv6AddressesSet>item"`
	Ipv6PrefixSet      []xmlIpv6Prefix   `xml:"ipv6PrefixSet>item"`
	TagSet             []xmlTag          `xml:"tagSet>item,omitempty"`
	AvailabilityZone   string            `xml:"availabilityZone,omitempty"`
}

type xmlStateReason struct {
	Code    string `xml:"code"`
	Message string `xml:"message"`
}

type xmlIAMProfile struct {
	Arn string `xml:"arn"`
	ID  string `xml:"id"`
}

type xmlCPUOptions struct {
	CoreCount      int32 `xml:"coreCount"`
	ThreadsPerCore int32 `xml:"threadsPerCore"`
}

type xmlMetadataOptions struct {
	State                   string `xml:"state"`
	HTTPTokens              string `xml:"httpTokens"`
	HTTPPutResponseHopLimit string `xml:"httpPutResponseHopLimit"`
	HTTPEndpoint            string `xml:"httpEndpoint"`
	HTTPProtocolIpv6        string `xml:"httpProtocolIpv6"`
}

type xmlInstance struct {
	InstanceID            string             `xml:"instanceId"`
	ImageID               string             `xml:"imageId"`
	InstanceState         xmlState           `xml:"instanceState"`
	PrivateDNSName        string             `xml:"privateDnsName"`
	DNSName               string             `xml:"dnsName"`
	Reason                string             `xml:"reason"`
	KeyName               string             `xml:"keyName,omitempty"`
	AmiLaunchIndex        int                `xml:"amiLaunchIndex"`
	InstanceType          string             `xml:"instanceType"`
	LaunchTime            string             `xml:"launchTime"`
	Placement             xmlPlacement       `xml:"placement"`
	MonitoringState       string             `xml:"monitoring>state"`
	SubnetID              string             `xml:"subnetId"`
	VpcID                 string             `xml:"vpcId"`
	PrivateIPAddress      string             `xml:"privateIpAddress"`
	IPAddress             string             `xml:"ipAddress,omitempty"`
	SourceDestCheck       bool               `xml:"sourceDestCheck"`
	GroupSet              []xmlGroup         `xml:"groupSet>item"`
	StateReason           *xmlStateReason    `xml:"stateReason,omitempty"`
	Architecture          string             `xml:"architecture"`
	RootDeviceType        string             `xml:"rootDeviceType"`
	RootDeviceName        string             `xml:"rootDeviceName"`
	BlockDeviceMapping    []xmlInstanceBDM   `xml:"blockDeviceMapping>item"`
	InstanceLifecycle     string             `xml:"instanceLifecycle,omitempty"`
	SpotInstanceRequestID string             `xml:"spotInstanceRequestId,omitempty"`
	VirtualizationType    string             `xml:"virtualizationType"`
	ClientToken           string             `xml:"clientToken"`
	TagSet                []xmlTag           `xml:"tagSet>item,omitempty"`
	Hypervisor            string             `xml:"hypervisor"`
	NetworkInterfaceSet   []xmlInstanceNIC   `xml:"networkInterfaceSet>item"`
	IamInstanceProfile    *xmlIAMProfile     `xml:"iamInstanceProfile,omitempty"`
	EbsOptimized          bool               `xml:"ebsOptimized"`
	CPUOptions            *xmlCPUOptions     `xml:"cpuOptions,omitempty"`
	CapacityReservationID string             `xml:"capacityReservationId,omitempty"`
	MetadataOptions       xmlMetadataOptions `xml:"metadataOptions"`
	HibernationOptions    xmlHibernation     `xml:"hibernationOptions"`
}

type xmlHibernation struct {
	Configured bool `xml:"configured"`
}

type xmlReservation struct {
	ReservationID string        `xml:"reservationId"`
	OwnerID       string        `xml:"ownerId"`
	GroupSet      []xmlGroup    `xml:"groupSet>item"`
	InstancesSet  []xmlInstance `xml:"instancesSet>item"`
}

type runInstancesResponse struct {
	XMLName   xml.Name `xml:"RunInstancesResponse"`
	Xmlns     string   `xml:"xmlns,attr"`
	RequestID string   `xml:"requestId"`
	xmlReservation
}

type describeInstancesResponse struct {
	XMLName        xml.Name         `xml:"DescribeInstancesResponse"`
	Xmlns          string           `xml:"xmlns,attr"`
	RequestID      string           `xml:"requestId"`
	ReservationSet []xmlReservation `xml:"reservationSet>item"`
	NextToken      string           `xml:"nextToken,omitempty"`
}

type xmlStateChange struct {
	InstanceID    string   `xml:"instanceId"`
	CurrentState  xmlState `xml:"currentState"`
	PreviousState xmlState `xml:"previousState"`
}

type terminateInstancesResponse struct {
	XMLName      xml.Name         `xml:"TerminateInstancesResponse"`
	Xmlns        string           `xml:"xmlns,attr"`
	RequestID    string           `xml:"requestId"`
	InstancesSet []xmlStateChange `xml:"instancesSet>item"`
}

type xmlImageBDM struct {
	DeviceName string `xml:"deviceName"`
	Ebs        struct {
		VolumeSize int32  `xml:"volumeSize"`
		VolumeType string `xml:"volumeType"`
	} `xml:"ebs"`
}

type xmlImage struct {
	ImageID            string        `xml:"imageId"`
	Name               string        `xml:"name"`
	ImageState         string        `xml:"imageState"`
	ImageOwnerID       string        `xml:"imageOwnerId"`
	IsPublic           bool          `xml:"isPublic"`
	Architecture       string        `xml:"architecture"`
	ImageType          string        `xml:"imageType"`
	RootDeviceType     string        `xml:"rootDeviceType"`
	RootDeviceName     string        `xml:"rootDeviceName"`
	VirtualizationType string        `xml:"virtualizationType"`
	BlockDeviceMapping []xmlImageBDM `xml:"blockDeviceMapping>item"`
}

type describeImagesResponse struct {
	XMLName   xml.Name   `xml:"DescribeImagesResponse"`
	Xmlns     string     `xml:"xmlns,attr"`
	RequestID string     `xml:"requestId"`
	ImagesSet []xmlImage `xml:"imagesSet>item"`
}

type xmlVolumeAttachment struct {
	VolumeID            string `xml:"volumeId"`
	InstanceID          string `xml:"instanceId"`
	Device              string `xml:"device"`
	Status              string `xml:"status"`
	DeleteOnTermination bool   `xml:"deleteOnTermination"`
}

type xmlVolume struct {
	VolumeID         string                `xml:"volumeId"`
	Size             int32                 `xml:"size"`
	SnapshotID       string                `xml:"snapshotId"`
	AvailabilityZone string                `xml:"availabilityZone"`
	Status           string                `xml:"status"`
	CreateTime       string                `xml:"createTime"`
	AttachmentSet    []xmlVolumeAttachment `xml:"attachmentSet>item"`
	VolumeType       string                `xml:"volumeType"`
	Iops             int32                 `xml:"iops,omitempty"`
	Throughput       int32                 `xml:"throughput,omitempty"`
	Encrypted        bool                  `xml:"encrypted"`
	KmsKeyID         string                `xml:"kmsKeyId,omitempty"`
	TagSet           []xmlTag              `xml:"tagSet>item,omitempty"`
}

type describeVolumesResponse struct {
	XMLName   xml.Name    `xml:"DescribeVolumesResponse"`
	Xmlns     string      `xml:"xmlns,attr"`
	RequestID string      `xml:"requestId"`
	VolumeSet []xmlVolume `xml:"volumeSet>item"`
	NextToken string      `xml:"nextToken,omitempty"`
}

type describeNetworkInterfacesResponse struct {
	XMLName             xml.Name         `xml:"DescribeNetworkInterfacesResponse"`
	Xmlns               string           `xml:"xmlns,attr"`
	RequestID           string           `xml:"requestId"`
	NetworkInterfaceSet []xmlInstanceNIC `xml:"networkInterfaceSet>item"`
	NextToken           string           `xml:"nextToken,omitempty"`
}

type xmlSpotRequest struct {
	SpotInstanceRequestID    string   `xml:"spotInstanceRequestId"`
	SpotPrice                string   `xml:"spotPrice"`
	Type                     string   `xml:"type"`
	State                    string   `xml:"state"`
	StatusCode               string   `xml:"status>code"`
	InstanceID               string   `xml:"instanceId,omitempty"`
	CreateTime               string   `xml:"createTime"`
	LaunchedAvailabilityZone string   `xml:"launchedAvailabilityZone"`
	TagSet                   []xmlTag `xml:"tagSet>item,omitempty"`
}

type describeSpotRequestsResponse struct {
	XMLName                xml.Name         `xml:"DescribeSpotInstanceRequestsResponse"`
	Xmlns                  string           `xml:"xmlns,attr"`
	RequestID              string           `xml:"requestId"`
	SpotInstanceRequestSet []xmlSpotRequest `xml:"spotInstanceRequestSet>item"`
	NextToken              string           `xml:"nextToken,omitempty"`
}

type xmlCancelledSpot struct {
	SpotInstanceRequestID string `xml:"spotInstanceRequestId"`
	State                 string `xml:"state"`
}

type cancelSpotRequestsResponse struct {
	XMLName                xml.Name           `xml:"CancelSpotInstanceRequestsResponse"`
	Xmlns                  string             `xml:"xmlns,attr"`
	RequestID              string             `xml:"requestId"`
	SpotInstanceRequestSet []xmlCancelledSpot `xml:"spotInstanceRequestSet>item"`
}

type assignIpv6Response struct {
	XMLName               xml.Name `xml:"AssignIpv6AddressesResponse"`
	Xmlns                 string   `xml:"xmlns,attr"`
	RequestID             string   `xml:"requestId"`
	NetworkInterfaceID    string   `xml:"networkInterfaceId"`
	AssignedIpv6PrefixSet []string `xml:"assignedIpv6PrefixSet>item"`
}

// returnResponse is the answer of actions that answer only true (CreateTags, Modify...).
type returnResponse struct {
	XMLName   xml.Name
	Xmlns     string `xml:"xmlns,attr"`
	RequestID string `xml:"requestId"`
	Return    bool   `xml:"return"`
}

type assumeRoleWithWebIdentityResponse struct {
	XMLName     xml.Name `xml:"AssumeRoleWithWebIdentityResponse"`
	Xmlns       string   `xml:"xmlns,attr"`
	Credentials struct {
		AccessKeyID     string `xml:"AccessKeyId"`
		SecretAccessKey string `xml:"SecretAccessKey"`
		SessionToken    string `xml:"SessionToken"`
		Expiration      string `xml:"Expiration"`
	} `xml:"AssumeRoleWithWebIdentityResult>Credentials"`
	AssumedRoleArn string `xml:"AssumeRoleWithWebIdentityResult>AssumedRoleUser>Arn"`
	AssumedRoleID  string `xml:"AssumeRoleWithWebIdentityResult>AssumedRoleUser>AssumedRoleId"`
	Subject        string `xml:"AssumeRoleWithWebIdentityResult>SubjectFromWebIdentityToken"`
	RequestID      string `xml:"ResponseMetadata>RequestId"`
}
