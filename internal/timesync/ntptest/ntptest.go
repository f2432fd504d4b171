// Package ntptest runs an SNTP server on a loopback UDP port, for tests
// of the node's clock: unit tests query it directly, boot tests let a
// QEMU guest reach it through the user network's gateway (10.0.2.2 is
// the host's loopback there).
package ntptest

import (
	"encoding/binary"
	"net"
	"time"
)

// Server answers SNTP requests with its clock shifted by Offset.
type Server struct {
	// Port is the UDP port it listens on, on 127.0.0.1.
	Port int
	conn *net.UDPConn
}

// ntpEpoch is the NTP era's start, 1900-01-01 UTC.
var ntpEpoch = time.Date(1900, 1, 1, 0, 0, 0, 0, time.UTC)

// Start starts a server whose clock is the host's plus offset.
func Start(offset time.Duration) (*Server, error) {
	conn, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		return nil, err
	}
	s := &Server{Port: conn.LocalAddr().(*net.UDPAddr).Port, conn: conn}
	go s.serve(offset)
	return s, nil
}

// Close stops the server.
func (s *Server) Close() error { return s.conn.Close() }

func (s *Server) serve(offset time.Duration) {
	buf := make([]byte, 512)
	for {
		n, from, err := s.conn.ReadFromUDP(buf)
		if err != nil {
			return
		}
		if n < 48 {
			continue
		}
		now := time.Now().Add(offset)
		rsp := make([]byte, 48)
		rsp[0] = 0<<6 | 4<<3 | 4 // no leap warning, version 4, server
		rsp[1] = 1               // stratum 1: a reference clock
		rsp[2] = 4               // poll
		rsp[3] = 0xec            // precision 2^-20 s
		copy(rsp[12:16], "LOCL")
		putTime(rsp[16:], now.Add(-time.Second)) // reference
		copy(rsp[24:32], buf[40:48])             // origin: the client's transmit time
		putTime(rsp[32:], now)                   // receive
		putTime(rsp[40:], now)                   // transmit
		_, _ = s.conn.WriteToUDP(rsp, from)
	}
}

// putTime writes t as a 64-bit NTP timestamp.
func putTime(b []byte, t time.Time) {
	d := t.Sub(ntpEpoch)
	sec := uint64(d / time.Second)
	frac := uint64(d%time.Second) << 32 / uint64(time.Second)
	binary.BigEndian.PutUint64(b, sec<<32|frac)
}
