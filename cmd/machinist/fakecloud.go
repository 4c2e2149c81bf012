//go:build !slim

package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"sync"

	"github.com/urfave/cli/v2"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/machinist-io/machinist/providers/kit/fakekit"
)

// fakecloudCmd is `machinist fakecloud`; fakecloud_<provider>.go adds a subcommand per fake (only
// for providers compiled into the binary, so a provider build links no other provider's SDK).
var fakecloudCmd = &cli.Command{
	Name:  "fakecloud",
	Usage: "serve a stateful fake cloud on loopback to try a provider without a cloud (developer tool)",
	Description: "Each subcommand serves the fake the provider's tests run against, over loopback HTTP(S), prints the\n" +
		"Secret (YAML, on stdout) that points the provider at it, and runs until interrupted. The fake keeps\n" +
		"its state while it runs; --state FILE keeps a JSON dump of it current, and the fake answers\n" +
		"GET /.fakecloud/state (the same dump), POST /.fakecloud/faults (a fault as JSON) and\n" +
		"DELETE /.fakecloud/faults. Use the MachineClasses in kubernetes/samples/fakecloud.",
	Action: func(c *cli.Context) error {
		if len(c.Command.Subcommands) == 0 {
			return errors.New("this binary has no fake cloud: build it without provider tags, or with -tags provider_openstack, provider_azure, provider_aws or provider_gcp")
		}
		return cli.ShowSubcommandHelp(c)
	},
}

func init() { commands = append(commands, fakecloudCmd) }

// servedFake is a fake cloud that serves requests until its server is closed (every fake has
// the shape of providers/kit/fakekit).
type servedFake struct {
	srv *fakekit.Server
	// state is what the fake holds, as JSON.
	state func() any
	// secret is the data of the Secret that points the provider at the fake (userData aside).
	secret map[string]string
}

// addFakecloud adds `machinist fakecloud NAME`; serve starts the fake on l and calls observe
// after each request it answers.
func addFakecloud(name, usage string, serve func(l net.Listener, observe func(http.Handler) http.Handler) (*servedFake, error)) {
	fakecloudCmd.Subcommands = append(fakecloudCmd.Subcommands, &cli.Command{
		Name:  name,
		Usage: usage,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "listen", Value: "127.0.0.1:0", Usage: "loopback address to serve on (HOST:PORT; port 0 picks one)", EnvVars: []string{"MACHINIST_LISTEN"}},
			&cli.StringFlag{Name: "state", TakesFile: true, Usage: "keep a JSON dump of the fake's state in this file (rewritten after every request and at exit)"},
		},
		Action: func(c *cli.Context) error { return runFakecloud(c, name, serve) },
	})
	sort.Slice(fakecloudCmd.Subcommands, func(i, j int) bool {
		return fakecloudCmd.Subcommands[i].Name < fakecloudCmd.Subcommands[j].Name
	})
}

func runFakecloud(c *cli.Context, name string, serve func(net.Listener, func(http.Handler) http.Handler) (*servedFake, error)) error {
	addr := c.String("listen")
	if err := loopbackOnly(addr, false); err != nil {
		return fmt.Errorf("fakecloud %s: the fake accepts well-known credentials, so it serves on loopback only: --listen %w", name, err)
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("fakecloud %s: %w", name, err)
	}
	dump := &stateDump{path: c.String("state")}
	observe := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			next.ServeHTTP(w, r)
			_ = dump.write()
		})
	}
	fake, err := serve(l, observe)
	if err != nil {
		_ = l.Close()
		return fmt.Errorf("fakecloud %s: %w", name, err)
	}
	dump.set(fake)
	defer func() {
		_ = fake.srv.Close()
		_ = dump.write()
	}()
	if err := dump.write(); err != nil {
		return fmt.Errorf("fakecloud %s: --state: %w", name, err)
	}
	data := map[string]string{"userData": fakeUserData}
	maps.Copy(data, fake.secret)
	out, err := yaml.Marshal(fakeSecret("fake"+name, data))
	if err != nil {
		return err
	}
	fmt.Fprintf(c.App.Writer, "# The Secret for `machinist driver ... --secret FILE` against the fake %s at %s/.\n%s", name, fake.srv.URL, out)
	slog.Info("fakecloud: serving; stop with Ctrl-C", "cloud", name, "url", fake.srv.URL+"/", "state", dump.path,
		"control", fake.srv.URL+fakekit.ControlPrefix+"state")
	<-c.Context.Done()
	slog.Info("fakecloud: stopping", "cloud", name)
	return nil
}

// stateDump keeps a file holding the fake's state as JSON.
type stateDump struct {
	path string
	mu   sync.Mutex
	fake *servedFake // nil until the fake is up: requests before that are not dumped
}

func (d *stateDump) set(f *servedFake) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.fake = f
}

// write replaces the file with the fake's state (atomically: readers never see half a dump).
func (d *stateDump) write() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.path == "" || d.fake == nil {
		return nil
	}
	b, err := json.MarshalIndent(d.fake.state(), "", "  ")
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(d.path), ".fakecloud-state-*")
	if err != nil {
		return err
	}
	_, err = tmp.Write(append(b, '\n'))
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), d.path)
	}
	if err != nil {
		_ = os.Remove(tmp.Name())
		slog.Warn("fakecloud: write the state dump", "file", d.path, "error", err)
	}
	return err
}

// fakeSecret is a Secret manifest of string data.
func fakeSecret(name string, data map[string]string) *corev1.Secret {
	return &corev1.Secret{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		StringData: data,
	}
}

// fakeUserData is the user data of the fakes' Secrets; the fakes do not boot anything.
const fakeUserData = "#cloud-config\n# machines of a fake cloud boot nothing\n"
