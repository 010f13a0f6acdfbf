package server

import (
	"io"
	"net"
	"sync"
)

// Uploads reach a sandbox in large blocks. Inside gVisor every arrival of
// data wakes the sandbox's network stack and the agent, and the wake-ups
// cost more CPU than the bytes. The transport passed each piece of a body
// on as it came, at most 32 KiB at a time, so a client slower than the
// sandbox (any remote one, or the E2B JS SDK, which node holds to about
// 150 MB/s) woke it for every piece. Now a /files upload is read in full
// blocks (duplexBody.fill), and the transport's two ways of copying a body
// (with a length: blockConn.ReadFrom; chunked: duplexBody.WriteTo) take a
// block at a time. Measured on tupper serve, the sandbox's CPU for one
// 64 MiB upload from a client sending at 100 MB/s went from 300 to 165 ms,
// at 50 MB/s from 530 to 200 ms (110 ms at full speed). Other bodies,
// Connect client streams among them, still go on as they come.

// blockSize is the most a request body moves to a sandbox in one write.
const blockSize = 1 << 20

// blocks holds buffers of blockSize bytes.
var blocks = sync.Pool{New: func() any { b := make([]byte, blockSize); return &b }}

// copyBlocks copies r to w through a buffer of blockSize bytes. Each write
// sends what one read gave, so a body streamed slowly is never held back.
func copyBlocks(w io.Writer, r io.Reader) (int64, error) {
	buf := blocks.Get().(*[]byte)
	defer blocks.Put(buf)
	// The bare reader and writer keep io.CopyBuffer from calling a
	// WriteTo or ReadFrom of theirs, which may be the caller.
	return io.CopyBuffer(struct{ io.Writer }{w}, struct{ io.Reader }{r}, *buf)
}

// blockConn is a connection to a sandbox. The transport copies a request
// body with a length into it with ReadFrom, which takes bodies of a block or
// more a block at a time where io.Copy would take 32 KiB.
type blockConn struct{ net.Conn }

func (c blockConn) ReadFrom(r io.Reader) (int64, error) {
	if lr, ok := r.(*io.LimitedReader); ok && lr.N >= blockSize {
		return copyBlocks(c.Conn, r)
	}
	return io.Copy(struct{ io.Writer }{c.Conn}, r)
}

// WriteTo copies the body to w; the transport calls it for a chunked body
// (one with a length goes through blockConn.ReadFrom), whose every write is
// then a chunk. An upload's body moves a block at a time; any other as
// io.Copy would move it.
func (b *duplexBody) WriteTo(w io.Writer) (int64, error) {
	if b.fill {
		return copyBlocks(w, b)
	}
	return io.Copy(struct{ io.Writer }{w}, struct{ io.Reader }{b})
}
