//go:build !linux

package main

import "os/exec"

// setParentDeathSignal has no portable equivalent outside Linux; the benchmark stops the
// controller itself on every normal exit.
func setParentDeathSignal(*exec.Cmd) {}
