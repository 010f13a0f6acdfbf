package sdk

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/lightbearco/tupper/errdefs"
)

func TestFromConnect(t *testing.T) {
	tests := []struct {
		name  string
		code  connect.Code
		class error
	}{
		{name: "not_found", code: connect.CodeNotFound, class: errdefs.ErrNotFound},
		{name: "already_exists", code: connect.CodeAlreadyExists, class: errdefs.ErrAlreadyExists},
		{name: "invalid_argument", code: connect.CodeInvalidArgument, class: errdefs.ErrInvalidArgument},
		{name: "out_of_range", code: connect.CodeOutOfRange, class: errdefs.ErrInvalidArgument},
		{name: "failed_precondition", code: connect.CodeFailedPrecondition, class: errdefs.ErrFailedPrecondition},
		{name: "permission_denied", code: connect.CodePermissionDenied, class: errdefs.ErrPermissionDenied},
		{name: "unauthenticated", code: connect.CodeUnauthenticated, class: errdefs.ErrUnauthenticated},
		{name: "resource_exhausted", code: connect.CodeResourceExhausted, class: errdefs.ErrResourceExhausted},
		{name: "unavailable", code: connect.CodeUnavailable, class: errdefs.ErrUnavailable},
		{name: "deadline_exceeded", code: connect.CodeDeadlineExceeded, class: errdefs.ErrDeadlineExceeded},
		{name: "unimplemented", code: connect.CodeUnimplemented, class: errdefs.ErrNotSupported},
		{name: "internal", code: connect.CodeInternal, class: nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := fmt.Errorf("op: %w", fromConnect(connect.NewError(tt.code, errors.New("the server's words"))))
			if tt.class != nil && !errors.Is(err, tt.class) {
				t.Errorf("errors.Is(%v, %v) = false", err, tt.class)
			}
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("%v is not an *Error", err)
			}
			if e.Code != tt.name || e.Message != "the server's words" {
				t.Errorf("Error{Code: %q, Message: %q}, want %q and the server's text", e.Code, e.Message, tt.name)
			}
			if !strings.Contains(err.Error(), "the server's words") {
				t.Errorf("message %q lost the server's text", err)
			}
			var ce *connect.Error
			if !errors.As(err, &ce) || ce.Code() != tt.code {
				t.Errorf("the connect error is not in the chain of %v", err)
			}
		})
	}
	if fromConnect(nil) != nil {
		t.Error("fromConnect(nil) != nil")
	}
	// The caller's own context stays visible.
	err := fromConnect(connect.NewError(connect.CodeCanceled, context.Canceled))
	if !errors.Is(err, context.Canceled) {
		t.Errorf("fromConnect(canceled) = %v, want context.Canceled in the chain", err)
	}
}

func TestFromResponse(t *testing.T) {
	tests := []struct {
		name    string
		status  int
		body    string
		class   error
		message string
	}{
		{name: "json 404", status: 404, body: `{"code":404,"message":"path /x does not exist"}`, class: errdefs.ErrNotFound, message: "path /x does not exist"},
		{name: "text 400", status: 400, body: "path is a directory\n", class: errdefs.ErrInvalidArgument, message: "path is a directory"},
		{name: "401", status: 401, body: "bad signature", class: errdefs.ErrUnauthenticated, message: "bad signature"},
		{name: "403", status: 403, body: "no", class: errdefs.ErrPermissionDenied, message: "no"},
		{name: "409", status: 409, body: "exists", class: errdefs.ErrAlreadyExists, message: "exists"},
		{name: "507", status: 507, body: `{"code":507,"message":"no space left on device"}`, class: errdefs.ErrResourceExhausted, message: "no space left on device"},
		{name: "502", status: 502, body: "", class: errdefs.ErrUnavailable, message: "502 Bad Gateway"},
		{name: "504", status: 504, body: "slow", class: errdefs.ErrDeadlineExceeded, message: "slow"},
		{name: "500", status: 500, body: "boom", class: nil, message: "boom"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp := &http.Response{
				StatusCode: tt.status,
				Status:     fmt.Sprintf("%d %s", tt.status, http.StatusText(tt.status)),
				Body:       io.NopCloser(strings.NewReader(tt.body)),
			}
			err := fromResponse(resp)
			if tt.class != nil && !errors.Is(err, tt.class) {
				t.Errorf("errors.Is(%v, %v) = false", err, tt.class)
			}
			var e *Error
			if !errors.As(err, &e) || e.Status != tt.status || e.Message != tt.message {
				t.Errorf("fromResponse = %#v, want status %d and message %q", err, tt.status, tt.message)
			}
		})
	}
}

func TestFromTransport(t *testing.T) {
	err := fromTransport(&url.Error{Op: "Get", URL: "http://x", Err: errors.New("connection refused")})
	if !IsUnavailable(err) {
		t.Errorf("fromTransport(refused) = %v, want class unavailable", err)
	}
	if err := fromTransport(context.DeadlineExceeded); err != context.DeadlineExceeded {
		t.Errorf("fromTransport(ctx error) = %v, want it unchanged", err)
	}
}

func TestFileSignature(t *testing.T) {
	// Expected values computed independently:
	// python3 -c "import hashlib,base64; print('v1_'+base64.b64encode(hashlib.sha256(RAW.encode()).digest()).decode().rstrip('='))"
	tests := []struct {
		name       string
		path, op   string
		user       string
		expiration int64
		want       string
	}{
		{name: "no expiration", path: "/home/user/a b.txt", op: "read", user: "root", want: "v1_IlF2EqDCSsH/aojYA9Ok6knzvmYh7Bx11qthDwB/CdA"},
		{name: "expiration, default user", path: "/home/user/a b.txt", op: "write", expiration: 1700000600, want: "v1_HbObX4B/5URyvZZBMjZ3zAEXQvLbeVAdtvonJDfZXRY"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := fileSignature(tt.path, tt.op, tt.user, "tok123", tt.expiration); got != tt.want {
				t.Errorf("fileSignature = %s, want %s", got, tt.want)
			}
		})
	}
}

func TestFileURL(t *testing.T) {
	now := time.Unix(1700000000, 0)
	signed := &Sandbox{conn: &conn{baseURL: "http://10.0.0.2:49983", token: "tok123"}}
	u, err := signed.fileURL("/home/user/a b.txt", "write", URLOptions{Expires: 10 * time.Minute}, now)
	if err != nil {
		t.Fatal(err)
	}
	pu, err := url.Parse(u)
	if err != nil {
		t.Fatal(err)
	}
	q := pu.Query()
	if pu.Path != "/files" || q.Get("path") != "/home/user/a b.txt" || q.Has("username") ||
		q.Get("signature_expiration") != "1700000600" || q.Get("signature") != "v1_HbObX4B/5URyvZZBMjZ3zAEXQvLbeVAdtvonJDfZXRY" {
		t.Errorf("upload URL = %s", u)
	}

	u, err = signed.fileURL("/home/user/a b.txt", "read", URLOptions{User: "root"}, now)
	if err != nil {
		t.Fatal(err)
	}
	pu, _ = url.Parse(u)
	q = pu.Query()
	if q.Get("username") != "root" || q.Has("signature_expiration") || q.Get("signature") != "v1_IlF2EqDCSsH/aojYA9Ok6knzvmYh7Bx11qthDwB/CdA" {
		t.Errorf("download URL = %s", u)
	}

	unsigned := &Sandbox{conn: &conn{baseURL: "http://10.0.0.2:49983"}}
	u, err = unsigned.fileURL("/tmp/x", "read", URLOptions{}, now)
	if err != nil || u != "http://10.0.0.2:49983/files?path=%2Ftmp%2Fx" {
		t.Errorf("unsigned URL = %q, %v", u, err)
	}
	if _, err := unsigned.fileURL("/tmp/x", "read", URLOptions{Expires: time.Minute}, now); !IsInvalidArgument(err) {
		t.Errorf("expiring URL without a token: err = %v, want invalid argument", err)
	}
}

func TestErrorHelpers(t *testing.T) {
	tests := []struct {
		name  string
		class error
		is    func(error) bool
	}{
		{name: "not found", class: errdefs.ErrNotFound, is: IsNotFound},
		{name: "already exists", class: errdefs.ErrAlreadyExists, is: IsAlreadyExists},
		{name: "invalid argument", class: errdefs.ErrInvalidArgument, is: IsInvalidArgument},
		{name: "permission denied", class: errdefs.ErrPermissionDenied, is: IsPermissionDenied},
		{name: "unauthenticated", class: errdefs.ErrUnauthenticated, is: IsUnauthenticated},
		{name: "resource exhausted", class: errdefs.ErrResourceExhausted, is: IsResourceExhausted},
		{name: "unavailable", class: errdefs.ErrUnavailable, is: IsUnavailable},
		{name: "deadline exceeded", class: errdefs.ErrDeadlineExceeded, is: IsDeadlineExceeded},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if !tt.is(fmt.Errorf("x: %w", tt.class)) {
				t.Errorf("helper does not recognise %v", tt.class)
			}
			if tt.is(errors.New("other")) {
				t.Error("helper recognises an unrelated error")
			}
		})
	}
}

func TestCommandExitError(t *testing.T) {
	err := error(&CommandExitError{CommandResult{Stdout: "out", Stderr: "boom\n", ExitCode: 2, Error: "exit status 2"}})
	wrapped := fmt.Errorf("run: %w", err)
	var exit *CommandExitError
	if !errors.As(wrapped, &exit) || exit.ExitCode != 2 || exit.Stdout != "out" || !IsCommandExit(wrapped) {
		t.Fatalf("errors.As(%v) = %+v", wrapped, exit)
	}
	if got, want := err.Error(), "command exited with code 2 (exit status 2): boom"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
}
