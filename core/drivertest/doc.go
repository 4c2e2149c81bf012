// Package drivertest is the conformance kit every driver must pass: the contract of
// core/driver written as executable rules. Run it from a provider's tests:
//
//	func TestConformance(t *testing.T) {
//		drivertest.Run(t, func(t testing.TB) drivertest.Target {
//			cloud := fakecloud.Start(t) // a stateful fake of the cloud's API on loopback
//			return drivertest.Target{
//				Driver:     New(...),
//				Class:      class(cloud, "shoot-a", "worker"),
//				OtherClass: class(cloud, "shoot-b", "worker"),
//				Secret:     secret(cloud),
//				CountVMs:   cloud.CountServers, // optional: count in the backend, not via the driver
//				Volumes:    []drivertest.Volume{{Spec: csiVolume("vol-1"), ID: "vol-1"}},
//			}
//		}, drivertest.WithTimeout(30*time.Second))
//	}
//
// Each rule runs as a named subtest (go test -run 'TestConformance/CreateIsIdempotent') against a
// fresh Target: newTarget is called inside the subtest and Target.Close runs when it ends, after
// the kit has deleted the machines the rule created. Machine names are unique per subtest
// ("dt-<rule tag>-<random>-<n>"), so a shared backend is fine. Rules that need an optional method
// skip themselves when the driver answers it with Unimplemented: capabilities are probed, never
// read from a provider name. Run the kit with -race: ConcurrentCreateDelete is meant for it.
//
// Check runs the same rules outside `go test` (e.g. against a driver server) and returns a
// *CheckError listing each failed rule; WithReport shows progress.
//
// # Rules
//
//   - CreateReturnsIdentity: CreateMachine returns a non-empty ProviderID with a scheme
//     (<provider>://...) and a non-empty NodeName.
//   - CreateIsIdempotent: a second CreateMachine of the same machine returns the same ProviderID
//     (and NodeName) and the backend holds one VM of it.
//   - DeleteAbsentIsOK: DeleteMachine of a machine that never had a VM is OK; deleting twice is
//     OK and leaves no VM.
//   - StatusTracksLifecycle: GetMachineStatus answers NotFound before CreateMachine, OK (or
//     Uninitialized) with the created ProviderID while the VM exists, and NotFound after
//     DeleteMachine. Skipped when GetMachineStatus is Unimplemented.
//   - DeleteByProviderID: DeleteMachine of a machine whose spec.providerID is set (as the
//     controller sends it) removes the VM. Skipped when the backend cannot be observed (no
//     CountVMs, ListMachines or GetMachineStatus).
//   - ListShowsOnlyOwnClass: ListMachines of Class maps each of its machines' ProviderID to the
//     machine name and shows none of OtherClass's machines, and the other way round. Skipped when
//     ListMachines is Unimplemented; the OtherClass part needs Target.OtherClass.
//   - InvalidProviderSpecRejected: CreateMachine with Target.InvalidProviderSpec (default: Class's
//     spec with its first top-level field's value replaced by one of another JSON type) is
//     InvalidArgument, names that field, and creates nothing. Unknown fields are not invalid:
//     drivers decode specs as Gardener's providers do and ignore them (driver.Lenient).
//   - ProviderMismatchRejected: CreateMachine and DeleteMachine with a MachineClass.provider that
//     is not the driver's are InvalidArgument; nothing is created or deleted.
//   - EmptyMachineNameRejected: CreateMachine of a machine without a name is InvalidArgument.
//   - CancelledContextReturnsPromptly: every method called with an already-cancelled context and
//     with an expired deadline returns within the prompt bound (WithPromptBound, default 5 s) with
//     Canceled or DeadlineExceeded (optional methods may answer Unimplemented, GetVolumeIDs may
//     answer), and CreateMachine creates nothing.
//   - ConcurrentCreateDelete: WithConcurrency(n) (default 8) distinct machines created at once
//     all succeed with distinct ProviderIDs and one VM each; deleting them at once leaves none.
//   - OptionalMethodsAnswerOrUnimplemented: on valid input InitializeMachine of a new VM answers
//     OK, Uninitialized or Unimplemented; GetMachineStatus OK, Uninitialized or Unimplemented;
//     ListMachines and GetVolumeIDs (of no volumes: no IDs) OK or Unimplemented. Any other code
//     (e.g. Internal for "not supported") is a violation.
//   - VolumeIDsSkipOtherDrivers: GetVolumeIDs of Target.Volumes mixed with NFS, hostPath, local
//     and another CSI driver's volumes returns exactly Target.Volumes' IDs in order, twice.
//     Skipped when GetVolumeIDs is Unimplemented.
//   - ErrorsAreStatuses: every error of the failing calls above (invalid spec, mismatched
//     provider, no VM, cancelled context) is a *driver.Status (errors.As) with a valid non-OK
//     code and a non-empty message.
//   - ErrorsHideSecrets: no such error, nor the error of a CreateMachine with wrong credentials,
//     contains a value of Target.Secret's keys that name a password, secret, token, key,
//     credential or userData. Skipped when the secret has none.
//   - RequestsAreReadOnly: no method changes its request's Machine, MachineClass, Secret or
//     PVSpecs (deep-equal before and after), for a machine with every field the controller
//     sends, on success and on the failing calls above, StopMachine and StartMachine too when the
//     driver reports the power capability. The calls share one set of objects and run at once,
//     as the controller's cache and the bridge's server hand them, so under -race a driver that
//     writes to its request fails even when it writes the value that was there.
//   - StopStartKeepsIdentity (the optional power capability, driver.PowerDriver): StopMachine of
//     a running VM is OK, twice; the stopped VM is still one VM, GetMachineStatus reports it with
//     its ProviderID and ListMachines lists it; StartMachine is OK, twice, and returns the
//     created ProviderID (and NodeName); a stopped VM deletes. Skipped when the driver does not
//     report the capability (driver.CapabilitiesOf); a driver that has the methods without
//     reporting it (a bridge to a provider built before them) must answer both with exactly
//     Unimplemented.
//   - PowerOfAbsentIsNotFound: StopMachine and StartMachine of a machine without a VM are
//     NotFound and create nothing. Skipped as the rule above.
//
// # Wiring a driver
//
// Target.Class must be a valid class of the driver whose providerSpec scopes machines to one
// cluster and role; Target.OtherClass the same backend scoped elsewhere. Give CountVMs whenever
// the backend can be read directly: without it the kit counts with the driver's own ListMachines
// or GetMachineStatus, which cannot catch a driver that loses track of its VMs. Each rule creates
// a handful of machines; against a fake cloud with latency, raise WithTimeout rather than
// lowering the rules.
package drivertest
