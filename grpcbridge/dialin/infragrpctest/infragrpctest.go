// Package infragrpctest drives machinist's dial-in listener as a provider built against the 2018
// grpc-driver design (infra.Infragrpc) would. Client behaves like the 2018 design's known client,
// the infraclient of the AWS sample driver the 2018 design links to (github.com/ggaurav10/aws-driver-grpc,
// pkg/grpc/infraclient, read at commit eec065a): it opens Register and waits for the server's
// first message, answers "register" with the kind it implements, serves "create", "delete" and
// "list" one at a time on the stream, fetches the class and secret with GetMachineClass and
// GetSecret (1 s deadline each) while handling an operation, and reconnects every 5 s when the
// stream ends. AWS is a provider behind it that works like that sample's AWS driver
// (pkg/providers/driver/aws) against an in-memory EC2.
package infragrpctest

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/machinist-io/machinist/grpcbridge/proto/infra"
)

// ClassMeta and SecretMeta are what a provider asks the data provider for.
type (
	ClassMeta struct {
		Name     string
		Revision int32
	}
	SecretMeta struct {
		SecretName, SecretNameSpace string
		Revision                    int32
	}
)

// Provider is the 2018 design's ExternalDriverProvider.
type Provider interface {
	Create(class *ClassMeta, credentials, machineID, machineName string) (providerID, nodeName string, err error)
	Delete(class *ClassMeta, credentials, machineID string) error
	List(class *ClassMeta, credentials, machineID string) (map[string]string, error)
}

// DataProvider is the 2018 design's MachineClassDataProvider: the class and the secret as the
// controller serialized them.
type DataProvider interface {
	GetMachineClass(*ClassMeta) (string, error)
	GetSecret(*SecretMeta) (string, error)
}

// Client is a 2018-protocol provider process's connection to the controller.
type Client struct {
	// Addr is the controller's dial-in address.
	Addr string
	// DialOptions secure the connection (the known client used grpc.WithInsecure()).
	DialOptions []grpc.DialOption
	// Kind, Group and Version are the machine class the provider implements.
	Kind, Group, Version string
	// Provider serves the operations.
	Provider Provider
	// Retry is the wait before reconnecting; the known client's is 5 s (the default).
	Retry time.Duration

	mu     sync.Mutex
	client infra.InfragrpcClient

	registered atomic.Int64
	connected  atomic.Bool
	attempts   atomic.Int64
}

// Registrations returns how many times the client answered "register".
func (c *Client) Registrations() int { return int(c.registered.Load()) }

// Connected reports whether the client has answered "register" on the stream it holds open.
func (c *Client) Connected() bool { return c.connected.Load() }

// Attempts returns how many times the client opened a connection.
func (c *Client) Attempts() int { return int(c.attempts.Load()) }

// Run connects and serves until ctx ends, reconnecting after Retry whenever the stream ends
// (the known client's Start). When ctx ends it sends "unregister" (the known client's Stop).
func (c *Client) Run(ctx context.Context) {
	retry := c.Retry
	if retry <= 0 {
		retry = 5 * time.Second
	}
	wait.UntilWithContext(ctx, c.once, retry)
}

func (c *Client) once(ctx context.Context) {
	c.attempts.Add(1)
	conn, err := grpc.NewClient(c.Addr, c.DialOptions...)
	if err != nil {
		return
	}
	defer conn.Close()
	client := infra.NewInfragrpcClient(conn)
	c.mu.Lock()
	c.client = client
	c.mu.Unlock()
	sctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stream, err := client.Register(sctx)
	if err != nil {
		return
	}
	// Stop runs beside serve, and gRPC allows one sender at a time (CloseSend included).
	var sendMu sync.Mutex
	send := func(m *infra.DriverSide) error {
		sendMu.Lock()
		defer sendMu.Unlock()
		return stream.Send(m)
	}
	stop := context.AfterFunc(ctx, func() {
		// Stop: tell the controller and close the sending side; the controller ends the stream.
		// A controller that does not is cut off after a while.
		sendMu.Lock()
		_ = stream.Send(&infra.DriverSide{OperationType: "unregister"})
		_ = stream.CloseSend()
		sendMu.Unlock()
		time.AfterFunc(10*time.Second, cancel)
	})
	defer stop()
	defer c.connected.Store(false)
	c.serve(stream, send)
}

// serve is the known client's serveMCM: one operation at a time, answered on the stream with
// send.
func (c *Client) serve(stream grpc.BidiStreamingClient[infra.DriverSide, infra.MCMside], send func(*infra.DriverSide) error) {
	for {
		in, err := stream.Recv()
		if err != nil { // io.EOF too: the controller closed the stream
			return
		}
		p := in.GetOperationparams()
		var class *ClassMeta
		if m := p.GetMachineClassMetaData(); m != nil {
			class = &ClassMeta{Name: m.Name, Revision: m.Revision}
		}
		resp := &infra.DriverSide{OperationID: in.OperationID, OperationType: in.OperationType}
		switch in.OperationType {
		case "register":
			resp.Response = &infra.DriverSide_RegisterResp{RegisterResp: &infra.DriverSideRegisterationResp{
				Name: "externalDriver", Kind: c.Kind, Group: c.Group, Version: c.Version,
			}}
			c.registered.Add(1)
			c.connected.Store(true)
		case "create":
			id, node, err := c.Provider.Create(class, p.GetCredentials(), p.GetMachineID(), p.GetMachineName())
			resp.Response = &infra.DriverSide_Createresponse{Createresponse: &infra.DriverSideCreateResp{ProviderID: id, Nodename: node, Error: errText(err)}}
		case "delete":
			err := c.Provider.Delete(class, p.GetCredentials(), p.GetMachineID())
			resp.Response = &infra.DriverSide_Deleteresponse{Deleteresponse: &infra.DriverSideDeleteResp{Error: errText(err)}}
		case "list":
			vms, err := c.Provider.List(class, p.GetCredentials(), p.GetMachineID())
			var list []*infra.DriverSideMachine
			if err == nil {
				for id, name := range vms {
					list = append(list, &infra.DriverSideMachine{MachineID: id, MachineName: name})
				}
			}
			resp.Response = &infra.DriverSide_Listresponse{Listresponse: &infra.DriverSideListResp{List: list, Error: errText(err)}}
		}
		if err := send(resp); err != nil {
			return
		}
	}
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func (c *Client) rpc() (infra.InfragrpcClient, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.client == nil {
		return nil, errors.New("infragrpctest: not connected")
	}
	return c.client, nil
}

// GetMachineClass fetches the class with a 1 s deadline, as the known client does.
func (c *Client) GetMachineClass(m *ClassMeta) (string, error) {
	client, err := c.rpc()
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	resp, err := client.GetMachineClass(ctx, &infra.MachineClassMeta{Name: m.Name, Revision: m.Revision})
	if err != nil {
		return "", err
	}
	if resp.Error != "" {
		return "", errors.New(resp.Error)
	}
	return resp.Data, nil
}

// GetSecret fetches the secret with a 1 s deadline, as the known client does.
func (c *Client) GetSecret(m *SecretMeta) (string, error) {
	client, err := c.rpc()
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	resp, err := client.GetSecret(ctx, &infra.SecretMeta{SecretName: m.SecretName, NameSpace: m.SecretNameSpace, Revision: m.Revision})
	if err != nil {
		return "", err
	}
	if resp.Error != "" {
		return "", errors.New(resp.Error)
	}
	return resp.Data, nil
}

var _ DataProvider = (*Client)(nil)
