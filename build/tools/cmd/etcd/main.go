// Command etcd is etcd's own server entry point, built from the pinned go.etcd.io/etcd/server
// module so tests run against the same etcd that kube-apiserver is released with.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
