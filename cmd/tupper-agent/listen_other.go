//go:build !linux

package main

import "net"

// listenExclusive is net.Listen outside Linux.
func listenExclusive(addr string) (net.Listener, error) { return net.Listen("tcp", addr) }
