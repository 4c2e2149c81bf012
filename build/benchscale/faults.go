package main

import (
	"context"
	"fmt"
	"syscall"
	"time"
)

// fault is one kill of a phase's fault plan, due when the phase's progress reaches at.
type fault struct {
	at         float64 // share of the phase's machines done: Running (up) or gone (down)
	controller bool    // kill the controller (and with it its provider child) instead of the provider
	done       bool
}

// faultPlan is what --faults does in each phase: the provider child is killed at 20 % and 70 %
// of the phase, the controller at 45 %, each with SIGKILL (no shutdown: a crash, an OOM kill).
// childproc restarts the provider (run --driver-exec); the benchmark restarts the controller at
// once, as a kubelet restarts a crashed container, and the new controller starts a new child.
func faultPlan() []*fault {
	return []*fault{{at: 0.20}, {at: 0.45, controller: true}, {at: 0.70}}
}

// injector applies a phase's fault plan.
type injector struct {
	plan       []*fault
	ctl        *controllerProc
	controller *meter // sampled just before a kill, so the killed process's CPU is counted
	provider   *meter
	log        func(format string, args ...any)
}

// progress applies the faults due at share p of the phase.
func (in *injector) progress(ctx context.Context, p float64) error {
	for _, f := range in.plan {
		if f.done || p < f.at {
			continue
		}
		f.done = true
		if err := in.apply(ctx, f); err != nil {
			return err
		}
	}
	return nil
}

func (in *injector) apply(ctx context.Context, f *fault) error {
	pid := in.ctl.pid()
	child := childOf(pid)
	in.controller.sample(pid)
	in.provider.sample(child)
	if !f.controller {
		if child == 0 {
			return fmt.Errorf("faults: the controller (pid %d) has no provider child to kill", pid)
		}
		if err := syscall.Kill(child, syscall.SIGKILL); err != nil {
			return fmt.Errorf("faults: kill the provider (pid %d): %w", child, err)
		}
		in.log("fault: killed the provider child (pid %d); the controller restarts it", child)
		return nil
	}
	in.ctl.kill()
	start := time.Now()
	if err := in.ctl.start(ctx); err != nil {
		return fmt.Errorf("faults: restart the controller: %w", err)
	}
	in.log("fault: killed the controller (pid %d) and its provider (pid %d); restarted as pid %d, ready after %.1f s",
		pid, child, in.ctl.pid(), time.Since(start).Seconds())
	return nil
}
