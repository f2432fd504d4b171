package qemu

import (
	"errors"
	"net"
	"sync"
)

// given are the host ports FreePort gave out in this process.
var given = struct {
	sync.Mutex
	ports map[int]bool
}{ports: map[int]bool{}}

// FreePort returns a TCP port on 127.0.0.1 that nothing listened on when
// asked and that FreePort has not given out before in this process, for
// a VM's forward. The kernel may hand the same free port to two requests
// in a row once the first has closed it, and two forwards of one port
// make QEMU fail to start.
func FreePort() (int, error) {
	given.Lock()
	defer given.Unlock()
	for range 100 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		p := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if !given.ports[p] {
			given.ports[p] = true
			return p, nil
		}
	}
	return 0, errors.New("no free port on 127.0.0.1 that has not been given out")
}
