// Package ports lists the TCP ports every Borough node listens on, in one
// table, so that the owner's tool, the test harness's port forwards and
// the node's own servers name the same numbers without the owner's tool
// linking the servers (etcd's among them) to learn them.
package ports

// The ports of every node.
const (
	// Client is etcd's client port: gRPC and the HTTP/JSON API, for the
	// owner and applications (package clientport).
	Client = 2379
	// Peer is etcd's peer port, between members.
	Peer = 2380
	// EtcdHTTP is etcd's own HTTP endpoints (health, version, its
	// metrics), which nothing outside the node needs: on the loopback
	// only.
	EtcdHTTP = 2381
	// Join is every member's join endpoint (package join), where a node
	// claims its ticket.
	Join = 7834
	// NodeAPI is the node API (package nodeapi), for the owner.
	NodeAPI = 7835
	// Unlock is every node's unlock responder (package unlock), where
	// peers ask for shares of a node's cluster unlock key.
	Unlock = 7836
)
