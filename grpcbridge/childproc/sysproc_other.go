//go:build !linux

package childproc

import "syscall"

// sysProcAttr: without a parent-death signal, the child relies on watching its parent
// (serve --parent-pid).
func sysProcAttr(bool) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
