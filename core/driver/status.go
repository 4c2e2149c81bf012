package driver

import (
	"context"
	"errors"
	"fmt"
	"strings"
)

// Status is the error every driver method returns: a Code, a human-readable message, and
// optionally the error that caused it. Read it with errors.As or the helpers CodeOf and
// MessageOf; never parse the text.
type Status struct {
	code    Code
	message string
	cause   error
}

// NewStatus returns a status with the given code and message.
func NewStatus(code Code, message string) *Status {
	return &Status{code: code, message: message}
}

// Error returns a status error with the given code and message. A code of OK yields nil.
func Error(code Code, message string) error {
	if code == OK {
		return nil
	}
	return &Status{code: code, message: message}
}

// Errorf is Error with a formatted message. A %w verb keeps the wrapped error as the cause.
func Errorf(code Code, format string, args ...any) error {
	if code == OK {
		return nil
	}
	err := fmt.Errorf(format, args...)
	return &Status{code: code, message: err.Error(), cause: errors.Unwrap(err)}
}

// Wrap returns a status error with the given code whose message is "message: cause" and whose
// cause is kept for errors.Is/As. A nil cause yields Error(code, message).
func Wrap(code Code, cause error, message string) error {
	if cause == nil {
		return Error(code, message)
	}
	if message == "" {
		return &Status{code: code, message: cause.Error(), cause: cause}
	}
	return &Status{code: code, message: message + ": " + cause.Error(), cause: cause}
}

// Code returns the status code; a nil status is OK.
func (s *Status) Code() Code {
	if s == nil {
		return OK
	}
	return s.code
}

// Message returns the human-readable message.
func (s *Status) Message() string {
	if s == nil {
		return ""
	}
	return s.message
}

// Error renders the status exactly as MCM does, so tools that parse MCM's text keep working:
// "machine codes error: code = [<Name>] message = [<message>]".
func (s *Status) Error() string {
	return fmt.Sprintf("machine codes error: code = [%s] message = [%s]", s.Code(), s.Message())
}

// Unwrap returns the cause.
func (s *Status) Unwrap() error { return s.cause }

// StatusOf returns the status carried by err. A nil err is OK. A context cancellation or
// deadline reads as Canceled or DeadlineExceeded; any other error without a status reads as
// Unknown with the error's text as its message.
func StatusOf(err error) *Status {
	if err == nil {
		return nil
	}
	var s *Status
	if errors.As(err, &s) && s != nil {
		// The outermost text carries the context that wrapping added ("openstack: create: ...").
		if err == error(s) { //nolint:errorlint // identity, not a sentinel: err is s itself, not wrapped
			return s
		}
		return &Status{code: s.code, message: outerMessage(err, s), cause: s.cause}
	}
	switch {
	case errors.Is(err, context.Canceled):
		return &Status{code: Canceled, message: err.Error(), cause: err}
	case errors.Is(err, context.DeadlineExceeded):
		return &Status{code: DeadlineExceeded, message: err.Error(), cause: err}
	}
	return &Status{code: Unknown, message: err.Error(), cause: err}
}

// outerMessage renders the wrapping text around a status without repeating MCM's rendering:
// fmt.Errorf("azure: %w", st) reads "azure: <message>".
func outerMessage(err error, s *Status) string {
	return strings.Replace(err.Error(), s.Error(), s.message, 1)
}

// CodeOf returns the code carried by err (see StatusOf).
func CodeOf(err error) Code { return StatusOf(err).Code() }

// MessageOf returns the message carried by err (see StatusOf).
func MessageOf(err error) string { return StatusOf(err).Message() }

// IsCode reports whether err carries the given code.
func IsCode(err error, code Code) bool { return CodeOf(err) == code }

// ParseStatusText reads a status back from MCM's rendering
// "machine codes error: code = [<Name>] message = [<message>]", possibly behind a prefix, for
// errors that crossed a boundary as text only. It reports false when the text is not in that
// form. MCM's own FromError is looser: it accepts any text with exactly two top-level bracket
// groups (docs/compatibility/mcm-driver-contract.md#status-errors-and-their-text).
func ParseStatusText(text string) (*Status, bool) {
	const prefix = "machine codes error: code = ["
	i := strings.Index(text, prefix)
	if i < 0 {
		return nil, false
	}
	rest := text[i+len(prefix):]
	end := strings.Index(rest, "]")
	if end < 0 {
		return nil, false
	}
	code, _ := ParseCode(rest[:end])
	rest = rest[end+1:]
	const msgPrefix = " message = ["
	if !strings.HasPrefix(rest, msgPrefix) || !strings.HasSuffix(rest, "]") {
		return nil, false
	}
	return &Status{code: code, message: rest[len(msgPrefix) : len(rest)-1]}, true
}
