package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/core/driver"
	"github.com/machinist-io/machinist/core/registry"
)

func init() { commands = append(commands, driverCommand()) }

// heartbeatSwitch is implemented by drivers whose machines can simulate a dead node (local).
type heartbeatSwitch interface {
	SetHeartbeat(ctx context.Context, machine string, running bool) error
	HeartbeatRunning(ctx context.Context, machine string) (bool, error)
}

func driverCommand() *cli.Command {
	classFlag := &cli.StringFlag{Name: "class", Usage: "MachineClass manifest (YAML or JSON; - for stdin)", TakesFile: true}
	secretFlag := &cli.StringSliceFlag{Name: "secret", Usage: "Secret manifest with the class's credentials/userData; repeat to overlay (later wins, like secretRef then credentialsSecretRef)", TakesFile: true}
	machineFlag := &cli.StringFlag{Name: "machine", Usage: "machine name"}
	providerIDFlag := &cli.StringFlag{Name: "provider-id", Usage: "the machine's spec.providerID, as the controller sends it"}
	providerFlag := &cli.StringFlag{Name: "provider", Usage: "provider name when no --class is given"}
	common := []cli.Flag{
		outputFlag(),
		&cli.StringFlag{Name: "state-dir", Usage: "directory drivers keep state in (the local provider's machines)", Value: defaultStateDir(), EnvVars: []string{"MACHINIST_STATE_DIR"}},
		&cli.StringFlag{Name: "target-kubeconfig", Usage: "kubeconfig of the target cluster the machines' nodes join, or inClusterConfig (default: none)", EnvVars: []string{"TARGET_KUBECONFIG"}, TakesFile: true},
		&cli.DurationFlag{Name: "timeout", Value: 5 * time.Minute, Usage: "bound of the driver call"},
		&cli.BoolFlag{Name: "strict", Usage: "refuse providerSpecs with unknown, mis-cased or repeated fields (InvalidArgument) instead of reading them as Gardener's providers do"},
		awsAmbientFlag(""),
	}
	common = append(common, endpointFlags()...) // --endpoint ADDR and its TLS flags (serve.go)
	with := func(flags ...cli.Flag) []cli.Flag { return append(flags, common...) }
	return withRenamed(&cli.Command{
		Name:  "driver",
		Usage: "call a compiled-in driver directly: create, delete, status, list, volumes, heartbeat",
		Description: "Each subcommand reads a MachineClass (and its Secret) from files, opens the driver of the class's\n" +
			"provider and makes one driver call, printing the result as text or JSON (--output json).\n" +
			"Errors print their machine code and what to do. providerSpec fields the compiled-in driver ignores or\n" +
			"reads loosely (as Gardener's providers do) are printed as warning lines on stderr; --strict refuses them.",
		Subcommands: []*cli.Command{
			{
				Name: "create", Usage: "create the VM of a machine (or return the existing one)",
				Flags: with(classFlag, secretFlag, machineFlag),
				Action: func(c *cli.Context) error {
					return runDriverCall(c, callNeeds{class: true, machine: true}, createCall)
				},
			},
			{
				Name: "delete", Usage: "delete the VM of a machine (absent is OK)",
				Flags: with(classFlag, secretFlag, machineFlag, providerIDFlag),
				Action: func(c *cli.Context) error {
					return runDriverCall(c, callNeeds{class: true, machine: true}, deleteCall)
				},
			},
			{
				Name: "status", Usage: "show the VM of a machine",
				Flags: with(classFlag, secretFlag, machineFlag, providerIDFlag),
				Action: func(c *cli.Context) error {
					return runDriverCall(c, callNeeds{class: true, machine: true}, statusCall)
				},
			},
			{
				Name: "list", Usage: "list the VMs of the class's cluster (providerID -> machine)",
				Flags: with(classFlag, secretFlag),
				Action: func(c *cli.Context) error {
					return runDriverCall(c, callNeeds{class: true}, listCall)
				},
			},
			{
				Name: "volumes", Usage: "map PersistentVolumes to the provider's volume IDs (others are skipped)",
				Flags: with(classFlag, providerFlag,
					&cli.StringSliceFlag{Name: "pv", Usage: "PersistentVolume (or List) manifest; repeatable", TakesFile: true, Required: true}),
				Action: func(c *cli.Context) error {
					return runDriverCall(c, callNeeds{}, volumesCall)
				},
			},
			{
				Name: "heartbeat", Usage: "show or switch a machine's node heartbeat (local provider: simulate a dead node)",
				Description: "--stop makes the machine's node stop renewing its Lease; after the class's nodeMonitorGracePeriod\n" +
					"its Ready condition becomes Unknown. --start resumes it. The switch is kept in --state-dir, so the\n" +
					"process hosting the machines (e.g. the controller) applies it within a second.",
				Flags: with(classFlag, providerFlag, machineFlag,
					&cli.BoolFlag{Name: "stop", Usage: "stop the heartbeat"},
					&cli.BoolFlag{Name: "start", Usage: "start the heartbeat again"}),
				Action: func(c *cli.Context) error {
					return runDriverCall(c, callNeeds{machine: true}, heartbeatCall)
				},
			},
		},
	}, targetRenamed)
}

// callNeeds says which inputs a subcommand requires.
type callNeeds struct{ class, machine bool }

// call is one prepared driver call.
type call struct {
	c       *cli.Context
	ctx     context.Context
	drv     driver.Driver
	class   *v1alpha1.MachineClass
	secret  *corev1.Secret
	machine *v1alpha1.Machine
}

func runDriverCall(c *cli.Context, needs callNeeds, do func(*call) error) error {
	if err := checkOutput(c); err != nil {
		return err
	}
	k := &call{c: c}
	var err error
	if path := c.String("class"); path != "" {
		if k.class, err = readClass(path); err != nil {
			return err
		}
	} else if needs.class {
		return errors.New("--class is required: give the MachineClass manifest file")
	}
	if k.secret, err = readSecrets(c.StringSlice("secret")); err != nil {
		return err
	}
	if needs.machine {
		name := c.String("machine")
		if name == "" {
			return errors.New("--machine is required: name the machine")
		}
		k.machine = &v1alpha1.Machine{
			TypeMeta:   metav1.TypeMeta{APIVersion: v1alpha1.SchemeGroupVersion.String(), Kind: "Machine"},
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
			Spec:       v1alpha1.MachineSpec{ProviderID: c.String("provider-id")},
		}
		if k.class != nil {
			k.machine.Namespace = orDefault(k.class.Namespace, "default")
			k.machine.Spec.Class = v1alpha1.ClassSpec{Kind: "MachineClass", Name: k.class.Name}
		}
	}
	provider := c.String("provider")
	if k.class != nil {
		provider = k.class.Provider
	}
	if c.Bool("strict") && c.String("endpoint") != "" {
		return errors.New("--strict sets how the compiled-in driver decodes; a driver server at --endpoint decodes by its own settings: drop one of them")
	}
	if k.class != nil && c.String("endpoint") == "" && !c.Bool("strict") {
		// The driver answers the call; the warnings of its lenient decoding would be lost. (In
		// strict mode its error names the fields.)
		for _, w := range registry.CheckSpec(k.class, specMode(c)).Warnings {
			fmt.Fprintf(c.App.ErrWriter, "warning: MachineClass %s: %s\n", k.class.Name, w)
		}
	}
	if provider == "" {
		if c.Command.Name != "heartbeat" {
			return errors.New("no provider: give --class (its provider field) or --provider")
		}
		provider = "local" // the only provider with a heartbeat switch
	}
	if k.drv, err = openDriver(c, provider); err != nil {
		return err
	}
	defer closeDriver(k.drv)
	ctx, cancel := context.WithTimeout(c.Context, c.Duration("timeout"))
	defer cancel()
	k.ctx = ctx
	return do(k)
}

// openDriver returns the driver that serves provider: the one behind --endpoint, else the
// compiled-in one, opened with the target cluster of --target-kubeconfig and --state-dir.
func openDriver(c *cli.Context, provider string) (driver.Driver, error) {
	if c.String("endpoint") != "" {
		return dialDriver(c, provider)
	}
	env := registry.Env{StateDir: c.String("state-dir"), Log: slog.Default(), SpecMode: specMode(c), AmbientCredentials: ambientCredentials(c)}
	if path := c.String("target-kubeconfig"); path != "" {
		env.Target = registry.Kubeconfig(path)
	}
	if env.StateDir != "" {
		if err := os.MkdirAll(env.StateDir, 0o700); err != nil {
			return nil, fmt.Errorf("--state-dir: %w", err)
		}
	}
	return registry.Open(provider, env)
}

// specMode is the decoding mode --strict asks for.
func specMode(c *cli.Context) driver.SpecMode {
	if c.Bool("strict") {
		return driver.Strict
	}
	return driver.Lenient
}

func closeDriver(d driver.Driver) {
	if c, ok := d.(interface{ Close() error }); ok {
		if err := c.Close(); err != nil {
			slog.Warn("close driver", "error", err)
		}
	}
}

// defaultStateDir is $XDG_STATE_HOME/machinist, else ~/.local/state/machinist.
func defaultStateDir() string {
	if d := os.Getenv("XDG_STATE_HOME"); d != "" {
		return filepath.Join(d, "machinist")
	}
	if home, err := os.UserHomeDir(); err == nil {
		return filepath.Join(home, ".local", "state", "machinist")
	}
	return ""
}

// machineView is how a machine's VM is printed.
type machineView struct {
	Machine    string               `json:"machine"`
	ProviderID string               `json:"providerID,omitempty"`
	NodeName   string               `json:"nodeName,omitempty"`
	Addresses  []corev1.NodeAddress `json:"addresses,omitempty"`
	Deleted    bool                 `json:"deleted,omitempty"`
}

func (k *call) printMachine(verb string, v machineView) error {
	if isJSON(k.c) {
		return writeJSON(k.c, v)
	}
	w := k.c.App.Writer
	fmt.Fprintf(w, "%s machine %s\n", verb, v.Machine)
	if v.ProviderID != "" {
		fmt.Fprintf(w, "  providerID: %s\n", v.ProviderID)
	}
	if v.NodeName != "" {
		fmt.Fprintf(w, "  node:       %s\n", v.NodeName)
	}
	if len(v.Addresses) > 0 {
		addrs := make([]string, len(v.Addresses))
		for i, a := range v.Addresses {
			addrs[i] = fmt.Sprintf("%s=%s", a.Type, a.Address)
		}
		fmt.Fprintf(w, "  addresses:  %s\n", strings.Join(addrs, ", "))
	}
	return nil
}

func createCall(k *call) error {
	resp, err := k.drv.CreateMachine(k.ctx, &driver.CreateMachineRequest{Machine: k.machine, MachineClass: k.class, Secret: k.secret})
	if err != nil {
		return err
	}
	return k.printMachine("created", machineView{Machine: k.machine.Name, ProviderID: resp.ProviderID, NodeName: resp.NodeName, Addresses: resp.Addresses})
}

func deleteCall(k *call) error {
	if _, err := k.drv.DeleteMachine(k.ctx, &driver.DeleteMachineRequest{Machine: k.machine, MachineClass: k.class, Secret: k.secret}); err != nil {
		return err
	}
	return k.printMachine("deleted", machineView{Machine: k.machine.Name, ProviderID: k.machine.Spec.ProviderID, Deleted: true})
}

func statusCall(k *call) error {
	resp, err := k.drv.GetMachineStatus(k.ctx, &driver.GetMachineStatusRequest{Machine: k.machine, MachineClass: k.class, Secret: k.secret})
	if err != nil {
		return err
	}
	return k.printMachine("found", machineView{Machine: k.machine.Name, ProviderID: resp.ProviderID, NodeName: resp.NodeName, Addresses: resp.Addresses})
}

func listCall(k *call) error {
	resp, err := k.drv.ListMachines(k.ctx, &driver.ListMachinesRequest{MachineClass: k.class, Secret: k.secret})
	if err != nil {
		return err
	}
	type entry struct {
		ProviderID string `json:"providerID"`
		Machine    string `json:"machine"`
	}
	entries := []entry{}
	for id, name := range resp.MachineList {
		entries = append(entries, entry{id, name})
	}
	sort.Slice(entries, func(i, j int) bool {
		if entries[i].Machine != entries[j].Machine {
			return entries[i].Machine < entries[j].Machine
		}
		return entries[i].ProviderID < entries[j].ProviderID
	})
	if isJSON(k.c) {
		return writeJSON(k.c, entries)
	}
	if len(entries) == 0 {
		_, err := fmt.Fprintf(k.c.App.Writer, "no machines in the cluster of class %s\n", k.class.Name)
		return err
	}
	w := tabwriter.NewWriter(k.c.App.Writer, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "MACHINE\tPROVIDER ID")
	for _, e := range entries {
		fmt.Fprintf(w, "%s\t%s\n", e.Machine, e.ProviderID)
	}
	return w.Flush()
}

func volumesCall(k *call) error {
	var specs []*corev1.PersistentVolumeSpec
	var names []string
	for _, path := range k.c.StringSlice("pv") {
		pvs, err := readPVs(path)
		if err != nil {
			return err
		}
		for i := range pvs {
			specs = append(specs, &pvs[i].Spec)
			names = append(names, pvs[i].Name)
		}
	}
	resp, err := k.drv.GetVolumeIDs(k.ctx, &driver.GetVolumeIDsRequest{PVSpecs: specs})
	if err != nil {
		return err
	}
	ids := resp.VolumeIDs
	if ids == nil {
		ids = []string{}
	}
	if isJSON(k.c) {
		return writeJSON(k.c, struct {
			VolumeIDs []string `json:"volumeIDs"`
		}{ids})
	}
	w := k.c.App.Writer
	fmt.Fprintf(w, "%d of %d volumes belong to this provider\n", len(ids), len(names))
	for _, id := range ids {
		fmt.Fprintf(w, "  %s\n", id)
	}
	return nil
}

func heartbeatCall(k *call) error {
	sw, ok := k.drv.(heartbeatSwitch)
	if !ok {
		return driver.Errorf(driver.Unimplemented, "this provider has no heartbeat switch (the local provider has)")
	}
	stop, start := k.c.Bool("stop"), k.c.Bool("start")
	if stop && start {
		return errors.New("give --stop or --start, not both")
	}
	name := k.machine.Name
	if stop || start {
		if err := sw.SetHeartbeat(k.ctx, name, start); err != nil {
			return err
		}
	}
	running, err := sw.HeartbeatRunning(k.ctx, name)
	if err != nil {
		return err
	}
	state := map[bool]string{true: "running", false: "stopped"}[running]
	if isJSON(k.c) {
		return writeJSON(k.c, struct {
			Machine   string `json:"machine"`
			Heartbeat string `json:"heartbeat"`
		}{name, state})
	}
	_, err = fmt.Fprintf(k.c.App.Writer, "heartbeat of machine %s: %s\n", name, state)
	return err
}

// readClass reads a MachineClass manifest; unknown fields are errors naming the field.
func readClass(path string) (*v1alpha1.MachineClass, error) {
	data, err := readInput(path)
	if err != nil {
		return nil, err
	}
	return parseClass(data, path)
}

// parseClass decodes a MachineClass manifest read from source (named in errors).
func parseClass(data []byte, path string) (*v1alpha1.MachineClass, error) {
	var class v1alpha1.MachineClass
	if err := decodeManifest(data, path, "MachineClass", &class); err != nil {
		return nil, err
	}
	if class.Name == "" {
		return nil, fmt.Errorf("--class %s: metadata.name is empty: name the class", path)
	}
	if class.Provider == "" {
		return nil, fmt.Errorf("--class %s: provider is empty: set it to one of %s", path, joinOrNone(registry.Names()))
	}
	return &class, nil
}

// readSecrets reads Secret manifests and overlays their data in order (later keys win), folding
// stringData into data as the API server does.
func readSecrets(paths []string) (*corev1.Secret, error) {
	merged := &corev1.Secret{Data: map[string][]byte{}}
	for _, path := range paths {
		var s corev1.Secret
		if err := readManifest(path, "Secret", &s); err != nil {
			return nil, err
		}
		if merged.Name == "" {
			merged.ObjectMeta = s.ObjectMeta
		}
		for k, v := range s.Data {
			merged.Data[k] = v
		}
		for k, v := range s.StringData {
			merged.Data[k] = []byte(v)
		}
	}
	return merged, nil
}

// readPVs reads a PersistentVolume, or a List / PersistentVolumeList of them.
func readPVs(path string) ([]corev1.PersistentVolume, error) {
	data, err := readInput(path)
	if err != nil {
		return nil, err
	}
	var meta metav1.TypeMeta
	if err := yaml.Unmarshal(data, &meta); err != nil {
		return nil, fmt.Errorf("--pv %s: %w", path, err)
	}
	if strings.HasSuffix(meta.Kind, "List") {
		var list corev1.PersistentVolumeList
		if err := yaml.UnmarshalStrict(data, &list); err != nil {
			return nil, fmt.Errorf("--pv %s: %w", path, err)
		}
		return list.Items, nil
	}
	var pv corev1.PersistentVolume
	if err := readManifest(path, "PersistentVolume", &pv); err != nil {
		return nil, err
	}
	return []corev1.PersistentVolume{pv}, nil
}

// readManifest decodes a YAML or JSON manifest of the given kind strictly.
func readManifest(path, kind string, out any) error {
	data, err := readInput(path)
	if err != nil {
		return err
	}
	return decodeManifest(data, path, kind, out)
}

// decodeManifest decodes data (read from path) as a manifest of kind, strictly.
func decodeManifest(data []byte, path, kind string, out any) error {
	var meta metav1.TypeMeta
	if err := yaml.Unmarshal(data, &meta); err != nil {
		return fmt.Errorf("%s: not YAML or JSON: %w", path, err)
	}
	if meta.Kind != "" && meta.Kind != kind {
		return fmt.Errorf("%s holds a %s, not a %s", path, meta.Kind, kind)
	}
	if err := yaml.UnmarshalStrict(data, out); err != nil {
		return fmt.Errorf("%s: %w: fix the %s manifest", path, err, kind)
	}
	return nil
}

func readInput(path string) ([]byte, error) {
	var r io.Reader = os.Stdin
	if path != "-" {
		f, err := os.Open(path)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		r = f
	}
	return io.ReadAll(r)
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
