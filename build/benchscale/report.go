package main

import (
	"fmt"
	"io"
	"runtime"
	"sort"
	"strconv"
	"strings"
)

// heartbeats are the requests the node agents make periodically whatever the machine count
// does: lease renewals. They grow with the run's wall time (one per node per 10 s).
const heartbeats = "leases PUT"

func mib(b int64) float64 { return float64(b) / (1 << 20) }

func report(w io.Writer, r result) {
	n := float64(r.machines)
	perMachine := func(d float64) string { return fmt.Sprintf("%.1f ms per machine", d*1000/n) }
	if r.deployments > 1 {
		fmt.Fprintf(w, "\n### Scale: %d MachineDeployments of %d local machines each (%d in all)\n\n", r.deployments, r.machines/r.deployments, r.machines)
		fmt.Fprintf(w, "Command: `go run ./build/benchscale --deployments %d` (%s/%s, %d CPUs); controller flags: `%s`.\n\n", r.deployments, runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), strings.Join(r.controllerArgs, " "))
	} else {
		fmt.Fprintf(w, "\n### Scale: one MachineDeployment of %d local machines\n\n", r.machines)
		fmt.Fprintf(w, "Command: `make bench-scale` (%s/%s, %d CPUs); controller flags: `%s`.\n\n", runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), strings.Join(r.controllerArgs, " "))
	}
	fmt.Fprintf(w, "| measure | value |\n|---|---|\n")
	fmt.Fprintf(w, "| first machine Running | %.1f s |\n", r.firstRunning.Seconds())
	fmt.Fprintf(w, "| half Running | %.1f s |\n", r.halfRunning.Seconds())
	fmt.Fprintf(w, "| all %d Running | %.1f s |\n", r.machines, r.up.wall.Seconds())
	fmt.Fprintf(w, "| load average (1 min) during the scale-up | %s |\n", r.up.load)
	if r.up.faults > 0 {
		fmt.Fprintf(w, "| faults during the scale-up (provider, controller, provider killed) | %d |\n", r.up.faults)
	}
	fmt.Fprintf(w, "| machines seen Unknown during the scale-up | %d |\n", r.up.unknown)
	fmt.Fprintf(w, "| oldest node Lease seen during the scale-up (sampled every 5 s) | %.0f s |\n", r.up.oldestLease.Seconds())
	fmt.Fprintf(w, "| Machines / Nodes / VMs at its end | %d / %d / %d |\n", r.up.machines, r.up.nodes, r.up.vms)
	switch r.provider {
	case providerCompiledIn:
		fmt.Fprintf(w, "| controller peak RSS (VmHWM, incl. the local provider's node agents) | %.0f MiB |\n", mib(r.peakRSS))
		fmt.Fprintf(w, "| controller CPU time during the scale-up (incl. the node agents) | %.1f s (%s) |\n", r.up.cpu.Seconds(), perMachine(r.up.cpu.Seconds()))
	default:
		what := "the provider child (--driver-exec: node agents, gRPC server)"
		if r.provider == providerBench {
			what = "this process (node agents, gRPC server, the benchmark's watches)"
		}
		fmt.Fprintf(w, "| controller peak RSS (VmHWM; the local provider runs in another process) | %.0f MiB |\n", mib(r.peakRSS))
		fmt.Fprintf(w, "| controller's own CPU time during the scale-up | %.1f s (%s) |\n", r.up.cpu.Seconds(), perMachine(r.up.cpu.Seconds()))
		fmt.Fprintf(w, "| local provider: %s, CPU time during the scale-up | %.1f s (%s) |\n", what, r.up.providerCPU.Seconds(), perMachine(r.up.providerCPU.Seconds()))
	}
	fmt.Fprintf(w, "| API requests during the scale-up (all clients) | %.0f (%.1f per machine; %.1f without lease renewals) |\n",
		r.up.totalRequests, r.up.totalRequests/n, (r.up.totalRequests-r.up.requests[heartbeats])/n)
	if d := r.down; d != nil {
		fmt.Fprintf(w, "| scale-down to 0: every Machine / Node / VM gone | %.1f s / %.1f s / %.1f s |\n", r.machinesGone.Seconds(), r.nodesGone.Seconds(), r.vmsGone.Seconds())
		if d.faults > 0 {
			fmt.Fprintf(w, "| faults during the scale-down (provider, controller, provider killed) | %d |\n", d.faults)
		}
		fmt.Fprintf(w, "| machines seen Unknown during the scale-down | %d |\n", d.unknown)
		fmt.Fprintf(w, "| oldest node Lease seen during the scale-down (sampled every 5 s) | %.0f s |\n", d.oldestLease.Seconds())
		fmt.Fprintf(w, "| Machines / Nodes / VMs at its end | %d / %d / %d |\n", d.machines, d.nodes, d.vms)
		fmt.Fprintf(w, "| scale-down: controller CPU, API requests | %.1f s (%s), %.1f per machine |\n", d.cpu.Seconds(), perMachine(d.cpu.Seconds()), d.totalRequests/n)
		if r.provider != providerCompiledIn {
			fmt.Fprintf(w, "| scale-down: local provider CPU | %.1f s (%s) |\n", d.providerCPU.Seconds(), perMachine(d.providerCPU.Seconds()))
		}
		fmt.Fprintf(w, "| load average (1 min) during the scale-down | %s |\n", d.load)
		fmt.Fprintf(w, "| controller peak RSS at the end | %.0f MiB |\n", mib(r.peakRSSDown))
		fmt.Fprintf(w, "| SuccessfulDelete events stored (machines they name as deleted) | %d (%d) |\n", r.deleteEvents, r.deletedInNotes)
	}
	if r.providerRSS > 0 {
		fmt.Fprintf(w, "| local provider peak RSS | %.0f MiB |\n", mib(r.providerRSS))
	}
	fmt.Fprintf(w, "| controller log: events the API server refused, overshoot freezes | %d, %d |\n", r.rejected, r.freezes)
	fmt.Fprintln(w)
	countTable(w, "scale-up: resource verb", "requests", r.up.requests, n)
	countTable(w, "scale-up: controller result", "reconciles", r.up.reconciles, n)
	if r.down != nil {
		countTable(w, "scale-down: resource verb", "requests", r.down.requests, n)
		countTable(w, "scale-down: controller result", "reconciles", r.down.reconciles, n)
	}
}

// countTable prints counts by key, largest first, with their share per machine; keys below one
// per hundred machines are left out.
func countTable(w io.Writer, keyHeader, countHeader string, counts map[string]float64, n float64) {
	keys := make([]string, 0, len(counts))
	for k := range counts {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return counts[keys[i]] > counts[keys[j]] })
	fmt.Fprintf(w, "| %s | %s | per machine |\n|---|---|---|\n", keyHeader, countHeader)
	for _, k := range keys {
		if counts[k] < n/100 {
			continue
		}
		fmt.Fprintf(w, "| %s | %.0f | %.2f |\n", k, counts[k], counts[k]/n)
	}
	fmt.Fprintln(w)
}

// growth prints one row per size and how the controller's CPU per machine compares with the
// first size.
func growth(w io.Writer, rs []result) {
	fmt.Fprintf(w, "\n### Growth: one MachineDeployment of %s local machines, one after the other\n\n", sizesOf(rs))
	fmt.Fprintf(w, "| machines | all Running | controller CPU | per machine | vs %d | provider CPU per machine | peak RSS controller / provider | API requests per machine (without lease renewals) | scale-down to 0 | load average up / down |\n", rs[0].machines)
	fmt.Fprintf(w, "|---|---|---|---|---|---|---|---|---|---|\n")
	base := rs[0].up.cpu.Seconds() / float64(rs[0].machines)
	for _, r := range rs {
		n := float64(r.machines)
		per := r.up.cpu.Seconds() / n
		down, downLoad := "—", "—"
		if r.down != nil {
			down = fmt.Sprintf("%.1f s", max(r.machinesGone, r.nodesGone, r.vmsGone).Seconds())
			downLoad = r.down.load.String()
		}
		ratio := "—"
		if base > 0 {
			ratio = fmt.Sprintf("%+.0f %%", (per/base-1)*100)
		}
		provider := "(in the controller)"
		if r.provider != providerCompiledIn {
			provider = fmt.Sprintf("%.1f ms", r.up.providerCPU.Seconds()*1000/n)
		}
		fmt.Fprintf(w, "| %d | %.1f s | %.1f s | %.1f ms | %s | %s | %.0f / %.0f MiB | %.1f (%.1f) | %s | %s / %s |\n",
			r.machines, r.up.wall.Seconds(), r.up.cpu.Seconds(), per*1000, ratio, provider, mib(r.peakRSS), mib(r.providerRSS),
			r.up.totalRequests/n, (r.up.totalRequests-r.up.requests[heartbeats])/n, down, r.up.load, downLoad)
	}
	fmt.Fprintln(w)
}

func sizesOf(rs []result) string {
	parts := make([]string, len(rs))
	for i, r := range rs {
		parts[i] = strconv.Itoa(r.machines)
	}
	return strings.Join(parts, ", ")
}
