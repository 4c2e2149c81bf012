// Package tree holds tests of the repository as a whole, not of one package: every helper has
// one home (the library that already does it, or one small internal package), the packages
// depend on each other in the documented direction, and the README's layout names every
// package. The package has only tests; `go test ./test/tree/` runs them.
package tree
