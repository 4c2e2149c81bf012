package oracle

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"time"

	"github.com/machinist-io/machinist/core/driver"
	"github.com/machinist-io/machinist/providers/aws"
	"github.com/machinist-io/machinist/providers/kit"
)

// Machinist is machinist's AWS driver as a Target. Its secret also names the fake's URL
// (ec2Endpoint), where Gardener's driver takes AWS_ENDPOINT_URL_EC2 from its environment.
type Machinist struct {
	drv      *aws.Driver
	endpoint string
}

// NewMachinist returns machinist's driver talking to the fake at endpoint, retrying as
// Gardener's SDK client does (3 attempts) but waiting at most maxRetryWait between them.
func NewMachinist(endpoint string, maxRetryWait time.Duration) *Machinist {
	return &Machinist{endpoint: endpoint, drv: aws.New(aws.Options{
		Options:     kit.Options{PollInterval: 10 * time.Millisecond, Log: slog.New(slog.DiscardHandler)},
		MaxAttempts: 3, MaxRetryWait: maxRetryWait, VisibleTimeout: time.Minute,
	})}
}

// Call makes the call on machinist's driver.
func (m *Machinist) Call(ctx context.Context, c Call) (Result, error) {
	if c.Secret != nil {
		c.Secret = c.Secret.DeepCopy()
		c.Secret.Data[aws.KeyEC2Endpoint] = []byte(m.endpoint)
	}
	var r Result
	var err error
	switch c.Op {
	case Create:
		var resp *driver.CreateMachineResponse
		if resp, err = m.drv.CreateMachine(ctx, &driver.CreateMachineRequest{Machine: c.Machine, MachineClass: c.MachineClass, Secret: c.Secret}); resp != nil {
			r.ProviderID, r.NodeName = resp.ProviderID, resp.NodeName
		}
	case Initialize:
		var resp *driver.InitializeMachineResponse
		if resp, err = m.drv.InitializeMachine(ctx, &driver.InitializeMachineRequest{Machine: c.Machine, MachineClass: c.MachineClass, Secret: c.Secret}); resp != nil {
			r.ProviderID, r.NodeName = resp.ProviderID, resp.NodeName
		}
	case Status:
		var resp *driver.GetMachineStatusResponse
		if resp, err = m.drv.GetMachineStatus(ctx, &driver.GetMachineStatusRequest{Machine: c.Machine, MachineClass: c.MachineClass, Secret: c.Secret}); resp != nil {
			r.ProviderID, r.NodeName = resp.ProviderID, resp.NodeName
		}
	case List:
		var resp *driver.ListMachinesResponse
		if resp, err = m.drv.ListMachines(ctx, &driver.ListMachinesRequest{MachineClass: c.MachineClass, Secret: c.Secret}); resp != nil && len(resp.MachineList) > 0 {
			r.MachineList = resp.MachineList
		}
	case Delete:
		_, err = m.drv.DeleteMachine(ctx, &driver.DeleteMachineRequest{Machine: c.Machine, MachineClass: c.MachineClass, Secret: c.Secret})
	default:
		return r, fmt.Errorf("oracle: unknown operation %q", c.Op)
	}
	r.Code = "OK"
	if err != nil {
		r.Code, r.Message = driver.CodeOf(err).String(), driver.MessageOf(err)
	}
	return r, nil
}

// Close does nothing: the driver holds no process.
func (m *Machinist) Close() error { return nil }

// Gardener is Gardener's AWS driver as a Target: a process the operator supplies that serves
// Gardener's driver over the oracle's protocol (one Call per line of JSON on stdin, one Result per
// line on stdout; docs/compatibility/aws.md, "The oracle's driver process").
type Gardener struct {
	cmd  *exec.Cmd
	in   io.WriteCloser
	out  *bufio.Scanner
	done chan error
}

// StartGardener starts the driver process at path with endpoint as its EC2 endpoint and an
// environment that holds nothing else of AWS's (no credentials, no shared files, no instance
// metadata service): the secret is its only source of credentials.
func StartGardener(path, endpoint string, stderr io.Writer) (*Gardener, error) {
	home, err := os.MkdirTemp("", "machinist-oracle-home-")
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(path)
	cmd.Env = []string{
		"HOME=" + home, "PATH=" + os.Getenv("PATH"),
		"AWS_ENDPOINT_URL_EC2=" + endpoint, "AWS_EC2_METADATA_DISABLED=true",
		"AWS_CONFIG_FILE=" + home + "/config", "AWS_SHARED_CREDENTIALS_FILE=" + home + "/credentials",
	}
	cmd.Stderr = stderr
	cmd.Dir = home
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("oracle: start Gardener's driver %s: %w", path, err)
	}
	g := &Gardener{cmd: cmd, in: in, out: bufio.NewScanner(out), done: make(chan error, 1)}
	g.out.Buffer(make([]byte, 1<<20), 16<<20)
	go func() {
		g.done <- cmd.Wait()
		_ = os.RemoveAll(home)
	}()
	return g, nil
}

// Call sends the call and reads the result.
func (g *Gardener) Call(ctx context.Context, c Call) (Result, error) {
	line, err := json.Marshal(c)
	if err != nil {
		return Result{}, err
	}
	if _, err := g.in.Write(append(line, '\n')); err != nil {
		return Result{}, fmt.Errorf("oracle: Gardener's driver: %w", err)
	}
	type answer struct {
		r   Result
		err error
	}
	got := make(chan answer, 1)
	go func() {
		var a answer
		if !g.out.Scan() {
			err := g.out.Err()
			if err == nil {
				err = io.ErrUnexpectedEOF
			}
			a.err = fmt.Errorf("oracle: Gardener's driver ended: %w", err)
		} else {
			a.err = json.Unmarshal(g.out.Bytes(), &a.r)
		}
		got <- a
	}()
	select {
	case a := <-got:
		return a.r, a.err
	case <-ctx.Done():
		_ = g.cmd.Process.Kill()
		return Result{}, ctx.Err()
	}
}

// Close ends the process.
func (g *Gardener) Close() error {
	_ = g.in.Close()
	select {
	case err := <-g.done:
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			return fmt.Errorf("oracle: Gardener's driver: %w", err)
		}
		return err
	case <-time.After(10 * time.Second):
		_ = g.cmd.Process.Kill()
		return errors.New("oracle: Gardener's driver did not end within 10s of its input closing; killed")
	}
}
