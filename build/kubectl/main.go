// Command kubectl is the upstream kubectl, built from pinned modules into bin/kubectl by
// `make kubectl`. machinist needs no kubectl to run; this one exists so `make run` users can
// watch their machines and so the deploy tests run the real `kubectl apply --dry-run=server -k`.
// It is a module of its own so its dependencies never enter machinist's go.mod.
package main

import (
	"k8s.io/component-base/cli"
	"k8s.io/kubectl/pkg/cmd"
	"k8s.io/kubectl/pkg/cmd/util"
)

func main() {
	command := cmd.NewDefaultKubectlCommand()
	if err := cli.RunNoErrOutput(command); err != nil {
		util.CheckErr(err)
	}
}
