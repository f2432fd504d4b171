// Package robustness is the fault-injection suite's client side: a
// workload of concurrent etcd clients whose every call is recorded with
// its invocation and return times and outcome (History), and the check
// that the history is linearizable (Check), with porcupine
// (github.com/anishathalye/porcupine) against a model of the keys the
// workload touches (model.go). A boot test drives it against a cluster
// of VMs while it injects faults; the package knows nothing of VMs.
//
// Every write puts a value no other write puts (the client and its
// count), so that a read names the write it saw. A call that fails or
// times out is of unknown outcome: a read is dropped (it changed
// nothing), a write is kept with its return at the end of time, so that
// the checker may place it anywhere after its call or nowhere (the
// approach porcupine's author gives for crashed clients); its client
// then takes a new identity, since the call may still be in flight.
// Left open, hundreds of them make a long run's check take longer than
// it may; a watch of the keys from before the first call (Commits) tells
// which took effect, and by when, and Settle closes them so.
//
// The model is per key (porcupine checks keys apart, in parallel): a
// key is absent or holds a value; get, put, delete and a compare-and-
// swap on the value. Revisions are not modelled.
package robustness
