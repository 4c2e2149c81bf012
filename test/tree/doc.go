// Package tree holds tests of the repository as a whole, not of one package: every helper has
// one home (the library that already does it, or one small internal package), the packages
// depend on each other in the documented direction, the README's layout names every package,
// its table of cmd/machinist's files says which build compiles each, and `make deps` on a
// machine without apt-get fails only for what the tests cannot do without. The package has
// only tests; `go test ./test/tree/` runs them.
package tree
