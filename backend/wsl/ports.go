package wsl

import (
	"fmt"
	"math/rand/v2"
	"net"
	"strconv"

	"github.com/lightbearco/tupper/errdefs"
)

// All WSL 2 distributions share one network namespace, and Windows reaches
// what listens there at its own 127.0.0.1 through WSL's localhost
// forwarding: every sandbox's agent needs a port no other holds, in the VM
// and on Windows alike.

// freePort picks a port of [first, last] that no sandbox of the backend
// holds (taken) and that nothing on this host listens on now, starting at
// a random one so that a port freed a moment ago is rarely handed out at
// once. It fails with errdefs.ErrResourceExhausted when there is none.
func freePort(first, last int, taken map[int]bool) (int, error) {
	n := last - first + 1
	start := rand.IntN(n)
	for i := range n {
		p := first + (start+i)%n
		if taken[p] || !bindable(p) {
			continue
		}
		return p, nil
	}
	return 0, fmt.Errorf("no free port in %d-%d: %w", first, last, errdefs.ErrResourceExhausted)
}

// bindable reports whether 127.0.0.1:port can be listened on now. On
// Windows this also finds the ports WSL forwards from the VM, which its
// relay holds.
func bindable(port int) bool {
	l, err := net.Listen("tcp4", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return false
	}
	l.Close()
	return true
}
