// Package docs holds Borough's design notes (decisions.md) and the tests
// that keep the README's map of the repository true to the tree: a
// newcomer walks the code from that map, so a package it does not name is
// one they will not find.
package docs
