// Package memdriver is machinist's in-memory reference driver, provider name "mem". It
// implements all six driver methods the way the contract in core/driver describes them and is
// what the conformance kit (core/drivertest) measures itself against. Controller, bridge and CLI
// tests use it as a cloud they can see into and break on purpose.
//
// # Backend
//
// A Cloud holds VMs keyed by ID, each tagged with its machine name, cluster, role and class
// name. Several Driver values may share one Cloud (as several processes share a real cloud); all
// methods are safe for concurrent use. Tests inspect and change the backend directly with VMs,
// VM, Count, Add (an orphan or a duplicate) and Remove (a VM that vanished out of band).
//
// # ProviderSpec
//
// MachineClass.providerSpec is decoded strictly (an unknown field is InvalidArgument naming it):
//
//	{"cluster": "shoot-a", "role": "worker", "size": "small", "tags": {"team": "x"}}
//
// cluster and role are required and scope everything the driver touches: a class only sees and
// deletes VMs of its own cluster and role. A VM's ProviderID is mem:///<cluster>/<vm-id> and its
// node name is the machine name. CreateMachine is idempotent by machine name within the scope and
// answers AlreadyExists when the existing VM has another size. The secret's "userData" is stored
// on the VM so tests can check what the controller substituted into it.
//
// # Behaviour tests can switch on
//
//   - Cloud.Inject makes a method fail with a chosen code, for a number of calls, optionally
//     only for one machine, after a delay that honours the context, or after the operation took
//     effect (a lost response).
//   - Cloud.Calls counts calls per method.
//   - Cloud.SetRequireInitialization makes new VMs answer Uninitialized from GetMachineStatus
//     until InitializeMachine runs.
//   - Cloud.SetCredentials makes every machine method require secret keys (Unauthenticated
//     otherwise; values never appear in messages).
//
// GetVolumeIDs maps CSI volumes of driver "mem.csi.machinist.io" to their volumeHandle and skips
// every other volume.
//
// The package does not register itself: core imports no provider. A test or binary that wants it
// resolvable by name calls registry.Register(memdriver.Registration()) or, to keep hold of the
// backend, registry.Register(cloud.Registration()).
package memdriver
