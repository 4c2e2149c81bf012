package driver

import (
	"context"
	"errors"
	"fmt"
	"testing"
)

func TestErrorCarriesCodeAndMessage(t *testing.T) {
	err := Error(NotFound, "server \"m1\" not found")
	var st *Status
	if !errors.As(err, &st) {
		t.Fatalf("errors.As(%v) found no *Status", err)
	}
	if st.Code() != NotFound || st.Message() != `server "m1" not found` {
		t.Fatalf("got %v %q", st.Code(), st.Message())
	}
	if got, want := err.Error(), `machine codes error: code = [NotFound] message = [server "m1" not found]`; got != want {
		t.Fatalf("Error() = %q, want MCM's rendering %q", got, want)
	}
	if Error(OK, "fine") != nil || Errorf(OK, "fine") != nil {
		t.Fatal("OK must yield a nil error")
	}
}

func TestWrappingKeepsTheCode(t *testing.T) {
	base := Error(ResourceExhausted, "quota exceeded for cores")
	wrapped := fmt.Errorf("openstack: create server: %w", base)
	twice := fmt.Errorf("controller: %w", wrapped)
	if CodeOf(twice) != ResourceExhausted {
		t.Fatalf("CodeOf(wrapped twice) = %v", CodeOf(twice))
	}
	if got, want := MessageOf(twice), "controller: openstack: create server: quota exceeded for cores"; got != want {
		t.Fatalf("MessageOf = %q, want %q", got, want)
	}
	if !IsCode(twice, ResourceExhausted) || IsCode(twice, Unknown) {
		t.Fatal("IsCode disagrees with CodeOf")
	}
}

func TestWrapKeepsTheCause(t *testing.T) {
	cause := errors.New("connection reset by peer")
	err := Wrap(Unavailable, cause, "list servers")
	if !errors.Is(err, cause) {
		t.Fatal("errors.Is(err, cause) = false")
	}
	if CodeOf(err) != Unavailable || MessageOf(err) != "list servers: connection reset by peer" {
		t.Fatalf("got %v %q", CodeOf(err), MessageOf(err))
	}
	if Wrap(Internal, nil, "x") == nil || CodeOf(Wrap(Internal, nil, "x")) != Internal {
		t.Fatal("Wrap with a nil cause must still be an error with the code")
	}
	withW := Errorf(Aborted, "update port: %w", cause)
	if !errors.Is(withW, cause) || CodeOf(withW) != Aborted {
		t.Fatal("Errorf with %w must keep the cause and the code")
	}
}

func TestNonStatusErrors(t *testing.T) {
	if CodeOf(nil) != OK || StatusOf(nil) != nil {
		t.Fatal("nil must read as OK")
	}
	if CodeOf(errors.New("boom")) != Unknown || MessageOf(errors.New("boom")) != "boom" {
		t.Fatal("a plain error must read as Unknown with its text")
	}
	if CodeOf(context.Canceled) != Canceled {
		t.Fatalf("context.Canceled reads as %v", CodeOf(context.Canceled))
	}
	if CodeOf(fmt.Errorf("wait: %w", context.DeadlineExceeded)) != DeadlineExceeded {
		t.Fatal("a wrapped context.DeadlineExceeded must read as DeadlineExceeded")
	}
	var nilStatus *Status
	if nilStatus.Code() != OK || nilStatus.Message() != "" {
		t.Fatal("a nil *Status is OK")
	}
}

func TestParseStatusText(t *testing.T) {
	for c := Code(1); c < NumCodes; c++ {
		text := Error(c, "msg with [brackets] inside").Error()
		st, ok := ParseStatusText("rpc failed: " + text)
		if !ok || st.Code() != c || st.Message() != "msg with [brackets] inside" {
			t.Errorf("ParseStatusText(%q) = %v %q %v", text, st.Code(), st.Message(), ok)
		}
	}
	for _, bad := range []string{"", "boom", "machine codes error: code = [NotFound", "machine codes error: code = [NotFound] nope"} {
		if _, ok := ParseStatusText(bad); ok {
			t.Errorf("ParseStatusText(%q) accepted malformed text", bad)
		}
	}
	if st, ok := ParseStatusText("machine codes error: code = [Bogus] message = [m]"); !ok || st.Code() != Unknown {
		t.Error("an unknown code name must parse as Unknown, like MCM's FromError")
	}
}
