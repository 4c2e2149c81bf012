package main

import (
	"os/exec"
	"syscall"
)

// setParentDeathSignal makes the kernel kill the controller if the benchmark dies first.
func setParentDeathSignal(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
