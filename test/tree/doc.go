// Package tree holds tests of the repository as a whole, not of one package: every helper has
// one home (the library that already does it, or one small internal package), the packages
// depend on each other in the documented direction, no type has more than 30 methods (a few
// named exceptions aside), and the README's layout names every package. The package has only tests; `go test ./test/tree/` runs them.
package tree
