//go:build !linux

package localcontrolplane

import "syscall"

// sysProcAttr returns no special attributes outside Linux; children are stopped by Stop.
func sysProcAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{} }
