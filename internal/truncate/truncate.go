// Package truncate is the tree's one way to shorten a message to a byte limit: event notes,
// condition and status messages, cloud error texts. The API server stores these as JSON, which
// turns a character cut in half into U+FFFD, so the cut is always at a character boundary.
package truncate

import (
	"strings"
	"unicode/utf8"
)

// Ellipsis marks a cut; three bytes in UTF-8.
const Ellipsis = "…"

// String returns s as valid UTF-8 (invalid bytes become U+FFFD, as a JSON encoder would make
// them, and then they count three bytes each) of at most limit bytes: cut at a character
// boundary and ending in Ellipsis when it was longer. A limit below the ellipsis's three bytes
// cuts without one.
func String(s string, limit int) string {
	if !utf8.ValidString(s) {
		s = strings.ToValidUTF8(s, "\uFFFD")
	}
	if len(s) <= limit {
		return s
	}
	if limit < len(Ellipsis) {
		return prefix(s, limit)
	}
	return prefix(s, limit-len(Ellipsis)) + Ellipsis
}

// prefix returns the longest prefix of s of at most n bytes that ends at a character boundary;
// s is valid UTF-8 and longer than n.
func prefix(s string, n int) string {
	if n <= 0 {
		return ""
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
