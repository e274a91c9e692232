package nccl

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"ferry/dist"
)

// ExchangeID gives rank 0's id to every rank of c (the MPI backend, say):
// rank 0 passes the id it made with GetUniqueID (or the error it got), the
// others pass anything, and all return rank 0's id. Each byte travels as
// one float32 (exact), behind a flag that says whether rank 0 has an id at
// all, so that a failure on rank 0 is an error everywhere, not a hang.
func ExchangeID(c dist.Comm, id UniqueID, idErr error) (UniqueID, error) {
	buf := make([]float32, 1+len(id.Internal))
	if c.Rank() == 0 && idErr == nil {
		buf[0] = 1
		for i, b := range id.Internal {
			buf[1+i] = float32(b)
		}
	}
	if err := c.Broadcast(buf, 0).Synchronize(); err != nil {
		return UniqueID{}, fmt.Errorf("dist/nccl: exchanging the unique id: %w", err)
	}
	if c.Rank() == 0 && idErr != nil {
		return UniqueID{}, idErr
	}
	if buf[0] != 1 {
		return UniqueID{}, errors.New("dist/nccl: rank 0 could not make a unique id (its own error says why)")
	}
	var out UniqueID
	for i := range out.Internal {
		v := buf[1+i]
		if v < 0 || v > 255 || v != float32(byte(v)) {
			return UniqueID{}, fmt.Errorf("dist/nccl: exchanging the unique id: byte %d arrived as %v", i, v)
		}
		out.Internal[i] = byte(v)
	}
	return out, nil
}

// idMagic starts every id sent over TCP, so that a stray connection or
// another program on the port is not taken for a rank.
var idMagic = []byte("ferry-nccl-id/1\n")

// ServeID is rank 0's half of a TCP rendezvous: it accepts peers
// connections on ln (for one machine, listen on loopback, e.g.
// "127.0.0.1:0") and sends each the id, giving up after timeout. It closes
// ln when done.
func ServeID(ln net.Listener, id UniqueID, peers int, timeout time.Duration) error {
	defer ln.Close()
	deadline := time.Now().Add(timeout)
	if tl, ok := ln.(*net.TCPListener); ok {
		tl.SetDeadline(deadline)
	}
	msg := append(append([]byte(nil), idMagic...), id.Internal[:]...)
	for i := 0; i < peers; i++ {
		conn, err := ln.Accept()
		if err != nil {
			return fmt.Errorf("dist/nccl: rendezvous: %d of %d ranks fetched the unique id before %v: %w", i, peers, timeout, err)
		}
		conn.SetDeadline(deadline)
		_, err = conn.Write(msg)
		conn.Close()
		if err != nil {
			return fmt.Errorf("dist/nccl: rendezvous: sending the unique id: %w", err)
		}
	}
	return nil
}

// FetchID is the other ranks' half: it connects to rank 0's addr,
// retrying until timeout (rank 0 may not listen yet), and reads the id.
func FetchID(addr string, timeout time.Duration) (UniqueID, error) {
	deadline := time.Now().Add(timeout)
	var conn net.Conn
	var err error
	for {
		conn, err = net.DialTimeout("tcp", addr, time.Until(deadline))
		if err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		return UniqueID{}, fmt.Errorf("dist/nccl: rendezvous: no rank 0 at %s within %v: %w", addr, timeout, err)
	}
	defer conn.Close()
	conn.SetDeadline(deadline)
	msg := make([]byte, len(idMagic)+128)
	if _, err := io.ReadFull(conn, msg); err != nil {
		return UniqueID{}, fmt.Errorf("dist/nccl: rendezvous: reading the unique id from %s: %w", addr, err)
	}
	if !bytes.Equal(msg[:len(idMagic)], idMagic) {
		return UniqueID{}, fmt.Errorf("dist/nccl: rendezvous: %s is not a ferry rank 0 (it sent %q)", addr, msg[:len(idMagic)])
	}
	var id UniqueID
	copy(id.Internal[:], msg[len(idMagic):])
	return id, nil
}
