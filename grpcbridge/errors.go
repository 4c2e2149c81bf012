package grpcbridge

import (
	"context"
	"errors"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/machinist-io/machinist/core/driver"
	driverv1 "github.com/machinist-io/machinist/grpcbridge/proto/machinist/driver/v1"
)

// Errors cross the wire as gRPC statuses. The machine codes 0-16 are gRPC's codes, so the status
// code is the machine code; every status a driver produced also carries an ErrorInfo detail with
// the machine code, which is how Uninitialized (17, no gRPC code) survives and how a client tells
// a driver's error from one the transport made up. The message travels unchanged (bytes that are
// not UTF-8 become U+FFFD).

// uninitializedGRPC is the gRPC code Uninitialized travels as: the closest meaning ("the VM is in
// a state that needs something first") for a peer that ignores the detail.
const uninitializedGRPC = codes.FailedPrecondition

// ToGRPCStatus converts a driver error into the gRPC status error to return from a handler; nil
// stays nil.
func ToGRPCStatus(err error) error {
	if err == nil {
		return nil
	}
	st := driver.StatusOf(err)
	code := st.Code()
	grpcCode := codes.Code(code)
	message := st.Message()
	switch {
	case code == driver.OK:
		// A non-nil error must not read as success on the other side.
		code, grpcCode = driver.Unknown, codes.Unknown
		message = "driver returned an error with code OK: " + message
	case !code.Valid():
		code, grpcCode = driver.Unknown, codes.Unknown
	case code == driver.Uninitialized:
		grpcCode = uninitializedGRPC
	}
	// gRPC carries messages as UTF-8; invalid bytes would cost the detail, so they become U+FFFD.
	s := status.New(grpcCode, strings.ToValidUTF8(message, "\uFFFD"))
	if withInfo, derr := s.WithDetails(&driverv1.ErrorInfo{MachineCode: uint32(code), CodeName: code.String()}); derr == nil {
		s = withInfo
	}
	return s.Err()
}

// FromGRPCStatus converts the error of a gRPC call into a driver error; nil stays nil. ctx is the
// caller's context: a call that failed because it ended reads as Canceled or DeadlineExceeded.
// A status without ErrorInfo came from the transport (the server is down, the message too large,
// the method unknown); its code is kept and its message says where it came from.
func FromGRPCStatus(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	s, ok := status.FromError(err)
	if !ok {
		if ctx.Err() != nil {
			return driver.StatusOf(ctx.Err())
		}
		return driver.Wrap(driver.Unknown, err, "grpcbridge")
	}
	for _, d := range s.Details() {
		if info, ok := d.(*driverv1.ErrorInfo); ok {
			code := driver.Code(info.MachineCode)
			if !code.Valid() || code == driver.OK {
				code = driver.Unknown // a failed call never reads as success
			}
			return driver.Error(code, s.Message())
		}
	}
	code := driver.Code(s.Code())
	if !code.Valid() {
		code = driver.Unknown
	}
	// The server may notice the deadline a moment before the caller's own timer fires (it counts
	// from the grpc-timeout it received), so a DeadlineExceeded from the transport is read the
	// same as an expired context here.
	switch {
	case errors.Is(ctx.Err(), context.Canceled):
		return driver.Error(driver.Canceled, "grpcbridge: the caller cancelled the call: "+s.Message())
	case errors.Is(ctx.Err(), context.DeadlineExceeded), code == driver.DeadlineExceeded:
		return driver.Error(driver.DeadlineExceeded, "grpcbridge: the call's deadline passed before the driver answered: "+s.Message())
	case code == driver.Unavailable:
		return driver.Error(code, "grpcbridge: driver server unavailable: "+s.Message())
	}
	return driver.Error(code, "grpcbridge: transport: "+s.Message())
}
