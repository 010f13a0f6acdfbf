package server

import (
	"io"
	"net/http"
	"time"
)

// The data plane proxies full duplex: the agent may answer a stream
// (start{pid}) before the proxy has passed on all of the request body,
// which the SDKs send chunked. Half duplex, writing the response header
// makes the HTTP/1.1 server drain and close the request body under the
// transport, which then aborts its connection to the agent and cuts the
// stream short (the JS SDK's "[unknown] terminated").
//
// Full duplex brings the opposite danger: the transport may still be
// reading the request body when the handler returns, and a read that
// reaches the end of the body then starts the server's background read of
// the connection at a moment when the server reads the next request
// itself ("invalid concurrent Body.Read call"). So the body the transport
// reads is a duplexBody, which the handler shuts before returning, waiting
// for a read in progress and reading the rest of the body.

// duplexFinishTimeout bounds how long a returning handler waits for a read
// of the request body in progress: one waits only for a client that is
// still sending a body nobody wants, and its connection is then dropped.
const duplexFinishTimeout = 10 * time.Second

// maxDrain is how much of an unread request body a returning handler
// reads to reach its end: what Go's server reads after a handler (its
// maxPostHandlerReadBytes).
const maxDrain = 256 << 10

// duplexBody guards a request body read by the proxy's transport. It is
// safe for concurrent use.
type duplexBody struct {
	body io.ReadCloser
	// sem holds the right to read: a Read takes it for its duration, and
	// finish takes it for good.
	sem chan struct{}
	// fill makes each Read fill its buffer unless the body ends or
	// fails first. Set for uploads, whose bodies the agent wants whole:
	// the client's writes then reach the sandbox in large blocks (see
	// blockConn) instead of piece by piece as they come.
	fill bool
}

// enableFullDuplex switches r's response to full duplex and returns the
// body to give the proxy instead of r.Body, or nil when r has no body.
func enableFullDuplex(w http.ResponseWriter, r *http.Request) *duplexBody {
	if r.Body == nil || r.Body == http.NoBody {
		return nil
	}
	// HTTP/2 writers are always full duplex and refuse the call.
	_ = http.NewResponseController(w).EnableFullDuplex()
	b := &duplexBody{body: r.Body, sem: make(chan struct{}, 1)}
	b.sem <- struct{}{}
	return b
}

// Read reads the request body until finish is called; then it fails with
// http.ErrBodyReadAfterClose.
func (b *duplexBody) Read(p []byte) (int, error) {
	if _, ok := <-b.sem; !ok {
		return 0, http.ErrBodyReadAfterClose
	}
	defer func() { b.sem <- struct{}{} }()
	if !b.fill {
		return b.body.Read(p)
	}
	n := 0
	for n < len(p) {
		m, err := b.body.Read(p[n:])
		n += m
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// Close does nothing: the server closes the request body after the
// handler. The transport calls it from goroutines of its own, which must
// not wait for a read.
func (b *duplexBody) Close() error { return nil }

// finish stops all further reads, waiting for one in progress, and then
// reads what the client still sends of the body, as far as the server
// would itself (maxDrain). Go's server would otherwise do that after the
// handler, and a body that ends there starts a read of the connection that
// collides with the server's reading of the next request (an
// EnableFullDuplex pitfall of net/http). When the body does not end within
// maxDrain bytes and duplexFinishTimeout, finish aborts the handler, which
// drops the connection: nobody wanted the rest of that body. What the
// handler already answered (a 502, say) is flushed first, since an abort
// sends only what reached the connection.
func (b *duplexBody) finish(w http.ResponseWriter) {
	if b == nil {
		return
	}
	drained := make(chan bool, 1)
	go func() {
		<-b.sem
		close(b.sem)
		_, err := io.CopyN(io.Discard, b.body, maxDrain)
		drained <- err == io.EOF
	}()
	select {
	case ok := <-drained:
		if ok {
			return
		}
	case <-time.After(duplexFinishTimeout):
	}
	http.NewResponseController(w).Flush()
	panic(http.ErrAbortHandler)
}
