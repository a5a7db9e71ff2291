// Package release holds the test that installs the repository's modules the
// way a user would, from a module proxy built from this working tree
// (TestInstallFromProxy), and the check that each nested module's go.mod
// and go.sum are tidy against the root module at the version they require
// (TestNestedModulesTidy). It has no code of its own: see docs/operations.md,
// "Releasing".
package release
