package childproc

import "syscall"

// sysProcAttr makes the kernel SIGKILL the child when the parent (thread) dies, and gives the
// child its own process group so a terminal's signals reach only the parent.
func sysProcAttr(pdeathsig bool) *syscall.SysProcAttr {
	a := &syscall.SysProcAttr{Setpgid: true}
	if pdeathsig {
		a.Pdeathsig = syscall.SIGKILL
	}
	return a
}
