// Package soak is the soak test's client side (make soak): a steady load
// of what applications ask of etcd, kept up for hours, and a table of
// what each node reports about itself, by window, checked against stated
// bounds of growth.
//
// A fault run (package robustness) proves that nothing acknowledged is
// lost while things break; it runs minutes. What it cannot see is what
// grows slowly while nothing breaks: memory a leak holds, goroutines or
// files a reconnect forgets, a database or a volume that compaction and
// defragmentation do not keep in bounds. Those show only as a trend over
// an hour or more, so the soak samples the node's own metrics (the Go
// runtime's and process's, etcd's, Borough's) every few seconds and
// compares each window's peak with the first window's.
//
// The load is what Kubernetes' API server and Patroni put on etcd: puts
// at a fixed rate over a fixed set of keys (so that the live data stays
// the same size and only history grows), short leases that expire by the
// dozen and one lease kept alive all along, a watch that must see every
// acknowledged put, and a compaction every few minutes at the revision
// of the round before, as the API server does. The soak itself asks for
// a defragmentation and restarts every member in turn once a window.
package soak
