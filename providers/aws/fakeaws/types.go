package fakeaws

// InstanceType is what EC2's DescribeInstanceTypes says of an instance type that the fake uses:
// its default vCPUs (SetVcpuQuota counts them), memory, architecture and GPUs.
type InstanceType struct {
	VCPUs     int
	MemoryMiB int
	Arch      string // x86_64 or arm64
	GPUs      int
}

// InstanceTypes are the instance types the fake knows: common general purpose, compute and
// memory optimised, burstable, Graviton (arm64) and GPU types, with the figures the EC2 instance
// type pages publish. RunInstances answers any other type as EC2 answers an unknown one
// (InvalidParameterValue), and refuses a type whose architecture is not the AMI's.
var InstanceTypes = map[string]InstanceType{
	"t2.micro":      {1, 1024, "x86_64", 0},
	"t2.medium":     {2, 4096, "x86_64", 0},
	"t2.large":      {2, 8192, "x86_64", 0},
	"t3.micro":      {2, 1024, "x86_64", 0},
	"t3.small":      {2, 2048, "x86_64", 0},
	"t3.medium":     {2, 4096, "x86_64", 0},
	"t3.large":      {2, 8192, "x86_64", 0},
	"t3.xlarge":     {4, 16384, "x86_64", 0},
	"t3.2xlarge":    {8, 32768, "x86_64", 0},
	"t3a.medium":    {2, 4096, "x86_64", 0},
	"t3a.large":     {2, 8192, "x86_64", 0},
	"t4g.medium":    {2, 4096, "arm64", 0},
	"t4g.large":     {2, 8192, "arm64", 0},
	"m5.large":      {2, 8192, "x86_64", 0},
	"m5.xlarge":     {4, 16384, "x86_64", 0},
	"m5.2xlarge":    {8, 32768, "x86_64", 0},
	"m5.4xlarge":    {16, 65536, "x86_64", 0},
	"m5.8xlarge":    {32, 131072, "x86_64", 0},
	"m5.12xlarge":   {48, 196608, "x86_64", 0},
	"m5.24xlarge":   {96, 393216, "x86_64", 0},
	"m5d.large":     {2, 8192, "x86_64", 0},
	"m5n.large":     {2, 8192, "x86_64", 0},
	"m6i.large":     {2, 8192, "x86_64", 0},
	"m6i.xlarge":    {4, 16384, "x86_64", 0},
	"m6i.2xlarge":   {8, 32768, "x86_64", 0},
	"m6i.4xlarge":   {16, 65536, "x86_64", 0},
	"m7i.large":     {2, 8192, "x86_64", 0},
	"m7i.xlarge":    {4, 16384, "x86_64", 0},
	"m6g.large":     {2, 8192, "arm64", 0},
	"m6g.xlarge":    {4, 16384, "arm64", 0},
	"m7g.large":     {2, 8192, "arm64", 0},
	"m7g.xlarge":    {4, 16384, "arm64", 0},
	"c5.large":      {2, 4096, "x86_64", 0},
	"c5.xlarge":     {4, 8192, "x86_64", 0},
	"c5.2xlarge":    {8, 16384, "x86_64", 0},
	"c5n.18xlarge":  {72, 196608, "x86_64", 0},
	"c6i.large":     {2, 4096, "x86_64", 0},
	"c6i.xlarge":    {4, 8192, "x86_64", 0},
	"c7g.large":     {2, 4096, "arm64", 0},
	"r5.large":      {2, 16384, "x86_64", 0},
	"r5.xlarge":     {4, 32768, "x86_64", 0},
	"r6i.large":     {2, 16384, "x86_64", 0},
	"g4dn.xlarge":   {4, 16384, "x86_64", 1},
	"g4dn.2xlarge":  {8, 32768, "x86_64", 1},
	"g4dn.12xlarge": {48, 196608, "x86_64", 4},
	"g5.xlarge":     {4, 16384, "x86_64", 1},
	"g5.2xlarge":    {8, 32768, "x86_64", 1},
	"p3.2xlarge":    {8, 62464, "x86_64", 1},
	"p4d.24xlarge":  {96, 1179648, "x86_64", 8},
	"p5.48xlarge":   {192, 2097152, "x86_64", 8},
}
