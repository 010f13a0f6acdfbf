package process

import "github.com/lightbearco/tupper/agent/rpcerr"

// toConnect turns err into a Connect error whose code follows its errdefs
// class; see package rpcerr.
func toConnect(err error) error { return rpcerr.ToConnect(err) }
