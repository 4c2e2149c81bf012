package localcontrolplane

import "syscall"

// sysProcAttr kills the child when the process that started it dies, so a crashed or killed test
// binary leaves no etcd or kube-apiserver behind.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
