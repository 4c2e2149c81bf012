package truncate

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestString(t *testing.T) {
	for _, tc := range []struct {
		in    string
		limit int
		want  string
	}{
		{"short", 10, "short"},
		{"exactly10!", 10, "exactly10!"},
		{"eleven chars", 10, "eleven …"},
		{"", 0, ""},
		{"abc", 0, ""},
		// "ä" is two bytes: the cut never splits it.
		{"aaaaaaäää", 10, "aaaaaa…"},
		{"aaaaaäää", 10, "aaaaaä…"},
		// A four-byte character at the cut.
		{"ab😀cd", 7, "ab…"},
		{"ab😀cdefg", 10, "ab😀c…"},
		{"ab😀cdefg", 9, "ab😀…"},
		// A limit below the ellipsis cuts without one.
		{"abcdef", 2, "ab"},
		{"äbc", 1, ""},
		{"äbc", 2, "ä"},
		// Invalid bytes become U+FFFD (three bytes, as in the JSON the server stores).
		{"a\xffb", 10, "a\uFFFDb"},
		{"a\xff\xffb\xffc\xffd", 10, "a\uFFFDb…"},
		{"a\xffb\xffc\xffd", 6, "a…"},
	} {
		got := String(tc.in, tc.limit)
		if got != tc.want {
			t.Errorf("String(%q, %d) = %q, want %q", tc.in, tc.limit, got, tc.want)
		}
		if len(got) > max(tc.limit, 0) || !utf8.ValidString(got) {
			t.Errorf("String(%q, %d) = %q: %d bytes, valid UTF-8 %v", tc.in, tc.limit, got, len(got), utf8.ValidString(got))
		}
	}
}

// TestStringEveryCut cuts a text of one-, two-, three- and four-byte characters at every limit:
// the result is always valid, within the limit, a prefix of the text (plus the ellipsis), and
// as long as it can be.
func TestStringEveryCut(t *testing.T) {
	text := strings.Repeat("aä€😀", 8)
	for limit := 0; limit <= len(text)+1; limit++ {
		got := String(text, limit)
		if len(got) > limit || !utf8.ValidString(got) {
			t.Fatalf("limit %d: %q (%d bytes)", limit, got, len(got))
		}
		if limit >= len(text) {
			if got != text {
				t.Fatalf("limit %d: %q, want the whole text", limit, got)
			}
			continue
		}
		kept := strings.TrimSuffix(got, Ellipsis)
		if limit >= len(Ellipsis) && kept == got {
			t.Fatalf("limit %d: %q has no ellipsis", limit, got)
		}
		if !strings.HasPrefix(text, kept) {
			t.Fatalf("limit %d: %q is not a prefix", limit, kept)
		}
		// The next character would not have fitted.
		budget := limit
		if limit >= len(Ellipsis) {
			budget -= len(Ellipsis)
		}
		if _, size := utf8.DecodeRuneInString(text[len(kept):]); len(kept)+size <= budget {
			t.Fatalf("limit %d: %q stops early", limit, got)
		}
	}
}
