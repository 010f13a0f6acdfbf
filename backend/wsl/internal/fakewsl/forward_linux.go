package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// forwarder stands for WSL's localhost forwarding: it watches the TCP
// ports that something in the sandbox listens on and serves each at
// 127.0.0.1 on the host, relaying every connection to the same port on
// the sandbox's loopback.
type forwarder struct {
	pid  int // the sandbox's first process, whose network namespace is the sandbox's
	stop chan struct{}
	wg   sync.WaitGroup

	mu        sync.Mutex
	listeners map[int]net.Listener // by port
	refused   map[int]bool         // ports the host already uses
}

// trackEvery is how often the sandbox's listening sockets are read. WSL's
// port tracker reads the VM's every second; tests are happier sooner.
const trackEvery = 50 * time.Millisecond

func startForwarder(pid int) *forwarder {
	f := &forwarder{pid: pid, stop: make(chan struct{}), listeners: map[int]net.Listener{}, refused: map[int]bool{}}
	f.wg.Add(1)
	go f.track()
	return f
}

func (f *forwarder) close() {
	close(f.stop)
	f.mu.Lock()
	for _, l := range f.listeners {
		l.Close()
	}
	f.mu.Unlock()
	f.wg.Wait()
}

// track keeps the host's listeners in step with the sandbox's.
func (f *forwarder) track() {
	defer f.wg.Done()
	for {
		ports := listeningPorts(f.pid)
		f.mu.Lock()
		for p, l := range f.listeners {
			if !ports[p] {
				l.Close()
				delete(f.listeners, p)
			}
		}
		for p := range ports {
			if f.listeners[p] != nil || f.refused[p] {
				continue
			}
			l, err := net.Listen("tcp4", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
			if err != nil {
				fmt.Fprintf(os.Stderr, "fakewsl: cannot forward port %d: %v\n", p, err)
				f.refused[p] = true
				continue
			}
			f.listeners[p] = l
			f.wg.Add(1)
			go f.serve(l, p)
		}
		f.mu.Unlock()
		select {
		case <-f.stop:
			return
		case <-time.After(trackEvery):
		}
	}
}

func (f *forwarder) serve(l net.Listener, port int) {
	defer f.wg.Done()
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		go f.relay(c, port)
	}
}

// relay joins c to the sandbox's 127.0.0.1:port, as WSL's relay joins a
// Windows connection to the VM's loopback.
func (f *forwarder) relay(c net.Conn, port int) {
	defer c.Close()
	in, err := dialIn(f.pid, net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return
	}
	defer in.Close()
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		io.Copy(dst, src)
		if cw, ok := dst.(interface{ CloseWrite() error }); ok {
			cw.CloseWrite()
		}
		done <- struct{}{}
	}
	go pipe(in, c)
	go pipe(c, in)
	<-done
	<-done
}

// dialIn connects to addr from inside pid's network namespace: the socket
// is made on a thread that has joined it, and stays there.
func dialIn(pid int, addr string) (net.Conn, error) {
	runtime.LockOSThread()
	home, err := os.Open("/proc/thread-self/ns/net")
	if err != nil {
		runtime.UnlockOSThread()
		return nil, err
	}
	defer home.Close()
	target, err := os.Open(fmt.Sprintf("/proc/%d/ns/net", pid))
	if err != nil {
		runtime.UnlockOSThread()
		return nil, err
	}
	defer target.Close()
	if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
		runtime.UnlockOSThread()
		return nil, err
	}
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if serr := unix.Setns(int(home.Fd()), unix.CLONE_NEWNET); serr != nil {
		// The thread stays locked, and ends with this goroutine, rather
		// than serve others from the wrong namespace.
		if conn != nil {
			conn.Close()
		}
		return nil, serr
	}
	runtime.UnlockOSThread()
	return conn, err
}

// listeningPorts returns the TCP ports something in pid's network
// namespace listens on, from its /proc/net/tcp and tcp6.
func listeningPorts(pid int) map[int]bool {
	ports := map[int]bool{}
	for _, file := range []string{"tcp", "tcp6"} {
		fh, err := os.Open(fmt.Sprintf("/proc/%d/net/%s", pid, file))
		if err != nil {
			continue
		}
		s := bufio.NewScanner(fh)
		s.Scan() // the header
		for s.Scan() {
			// sl local_address rem_address st ...; 0A is LISTEN.
			f := strings.Fields(s.Text())
			if len(f) < 4 || f[3] != "0A" {
				continue
			}
			_, hexPort, ok := strings.Cut(f[1], ":")
			if !ok {
				continue
			}
			if p, err := strconv.ParseUint(hexPort, 16, 16); err == nil {
				ports[int(p)] = true
			}
		}
		fh.Close()
	}
	return ports
}
