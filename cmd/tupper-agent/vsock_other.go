//go:build !linux

package main

import (
	"errors"
	"net"
)

// listenVsock fails outside Linux: only Linux guests of microVMs have
// AF_VSOCK here.
func listenVsock(port uint32) (net.Listener, error) {
	return nil, errors.New("vsock: only on Linux")
}
