package server

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/lightbearco/tupper/errdefs"
)

func TestCheckLoopback(t *testing.T) {
	tests := []struct {
		addr string
		ok   bool
	}{
		{"127.0.0.1:3000", true},
		{"127.1.2.3:3000", true},
		{"[::1]:3000", true},
		{"localhost:3000", true},
		{":3000", false},
		{"0.0.0.0:3000", false},
		{"[::]:3000", false},
		{"10.1.2.3:3000", false},
		{"192.0.2.1:3000", false},
	}
	for _, tt := range tests {
		err := checkLoopback(context.Background(), tt.addr)
		if tt.ok != (err == nil) {
			t.Errorf("checkLoopback(%q) = %v, want ok=%v", tt.addr, err, tt.ok)
		}
		if err != nil && (!errors.Is(err, errdefs.ErrPermissionDenied) || !strings.Contains(err.Error(), "TLS")) {
			t.Errorf("checkLoopback(%q): the error %q should say how to fix it", tt.addr, err)
		}
	}
	if err := checkLoopback(context.Background(), "no-port"); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("checkLoopback(no-port) = %v", err)
	}
}

func TestListenAndServeRefusesPlainRemote(t *testing.T) {
	h := http.NotFoundHandler()
	err := ListenAndServe(context.Background(), h, ListenOptions{Addr: "0.0.0.0:0"})
	if !errors.Is(err, errdefs.ErrPermissionDenied) {
		t.Errorf("plain HTTP on 0.0.0.0 = %v, want ErrPermissionDenied", err)
	}
	err = ListenAndServe(context.Background(), h, ListenOptions{Addr: "127.0.0.1:0", CertFile: "c.pem"})
	if !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("a certificate without a key = %v, want ErrInvalidArgument", err)
	}
}

func TestListenAndServeShutsDown(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan net.Addr, 1)
	done := make(chan error, 1)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "up") })
	go func() {
		done <- ListenAndServe(ctx, h, ListenOptions{Addr: "127.0.0.1:0", Ready: func(a net.Addr) { ready <- a }})
	}()
	var addr net.Addr
	select {
	case addr = <-ready:
	case err := <-done:
		t.Fatalf("ListenAndServe: %v", err)
	}
	resp, err := http.Get("http://" + addr.String())
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != "up" {
		t.Errorf("served %q", body)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("ListenAndServe after cancel = %v, want nil", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("ListenAndServe did not return after its context ended")
	}
}
