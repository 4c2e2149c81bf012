package driver

import "testing"

// The names and numbers are API (they reach Machine.status.lastOperation.errorCode and cross
// the wire), so they are pinned here one by one.
func TestCodeNamesAndNumbers(t *testing.T) {
	want := map[Code]string{
		0: "OK", 1: "Canceled", 2: "Unknown", 3: "InvalidArgument", 4: "DeadlineExceeded",
		5: "NotFound", 6: "AlreadyExists", 7: "PermissionDenied", 8: "ResourceExhausted",
		9: "FailedPrecondition", 10: "Aborted", 11: "OutOfRange", 12: "Unimplemented",
		13: "Internal", 14: "Unavailable", 15: "DataLoss", 16: "Unauthenticated",
		17: "Uninitialized",
	}
	if len(want) != NumCodes {
		t.Fatalf("NumCodes = %d, want %d", NumCodes, len(want))
	}
	for c, name := range want {
		if got := c.String(); got != name {
			t.Errorf("Code(%d).String() = %q, want %q", c, got, name)
		}
		parsed, ok := ParseCode(name)
		if !ok || parsed != c {
			t.Errorf("ParseCode(%q) = %v, %v; want %d, true", name, parsed, ok, c)
		}
		if !c.Valid() {
			t.Errorf("Code(%d).Valid() = false", c)
		}
	}
	if got := Code(18).String(); got != "Code(18)" {
		t.Errorf("Code(18).String() = %q", got)
	}
	if Code(18).Valid() {
		t.Error("Code(18).Valid() = true")
	}
	if c, ok := ParseCode("NoSuchCode"); ok || c != Unknown {
		t.Errorf("ParseCode(unknown) = %v, %v; want Unknown, false", c, ok)
	}
}

func TestRetryable(t *testing.T) {
	retry := map[Code]bool{Unknown: true, DeadlineExceeded: true, Aborted: true, Unavailable: true}
	for c := Code(0); c < NumCodes; c++ {
		if got := c.Retryable(); got != retry[c] {
			t.Errorf("%v.Retryable() = %v, want %v", c, got, retry[c])
		}
	}
}
