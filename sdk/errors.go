package sdk

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"connectrpc.com/connect"

	"github.com/lightbearco/tupper/errdefs"
)

// This file is the one place where the SDK turns wire errors (Connect codes
// from the agent, HTTP statuses from /files, /health and the control plane)
// back into the errdefs classes. Every other file calls fromConnect,
// fromResponse or fromTransport and never looks at codes itself.

// ErrNoEndpoint is returned by a Client that has no Transport while the
// environment names no endpoint either, and no local daemon's socket is
// there (see HTTPConfig.APIURL).
var ErrNoEndpoint = fmt.Errorf("no Tupper endpoint configured: set TUPPER_API_URL and TUPPER_API_KEY "+
	"(or E2B_API_URL and E2B_API_KEY) to reach `tupper serve`, run on the host of a `tupper serve` (its socket needs no key for root "+
	"and group tupper), or give the Client a Transport (local.Open runs Tupper in-process): %w", errdefs.ErrUnavailable)

// ErrDisconnected is returned by CommandHandle.Wait after Disconnect: the
// handle stopped following the process, which may still run.
var ErrDisconnected = errors.New("command handle disconnected")

// Error is an error reported by a sandbox's agent (a Connect error of its
// RPCs or a failed HTTP response of /files), by the control plane of a
// remote Tupper (its {"code", "message"} answers), or by the HTTP client
// that could not reach either. It unwraps to the errdefs class of its code
// (errors.Is(err, errdefs.ErrNotFound)) and to the error it came from: the
// *connect.Error of an RPC, or the network error of an unreachable server.
type Error struct {
	// Code is the Connect code as the wire spells it ("not_found"); for
	// plain HTTP errors it is derived from the status.
	Code string
	// Status is the HTTP status of a plain HTTP call; 0 for RPCs.
	Status int
	// Message is the server's text.
	Message string

	class error // an errdefs class, or nil
	cause error // the underlying error, or nil
}

func (e *Error) Error() string {
	if e.Message == "" {
		return e.Code
	}
	return e.Code + ": " + e.Message
}

// Unwrap returns the errdefs class of the error and the error it came from.
func (e *Error) Unwrap() []error {
	var errs []error
	if e.class != nil {
		errs = append(errs, e.class)
	}
	if e.cause != nil {
		errs = append(errs, e.cause)
	}
	return errs
}

// CommandExitError is returned, together with the result, when a command
// ends with a non-zero exit code or is killed by a signal. Use errors.As to
// reach the result.
type CommandExitError struct {
	CommandResult
}

func (e *CommandExitError) Error() string {
	msg := fmt.Sprintf("command exited with code %d", e.ExitCode)
	if e.CommandResult.Error != "" {
		msg += " (" + e.CommandResult.Error + ")"
	}
	if s := strings.TrimSpace(e.Stderr); s != "" {
		if len(s) > 512 {
			s = "…" + s[len(s)-512:]
		}
		msg += ": " + s
	}
	return msg
}

// IsNotFound reports whether err means the sandbox, process or path does not exist.
func IsNotFound(err error) bool { return errors.Is(err, errdefs.ErrNotFound) }

// IsAlreadyExists reports whether err means the thing to create exists already.
func IsAlreadyExists(err error) bool { return errors.Is(err, errdefs.ErrAlreadyExists) }

// IsInvalidArgument reports whether err means the request itself is wrong.
func IsInvalidArgument(err error) bool { return errors.Is(err, errdefs.ErrInvalidArgument) }

// IsPermissionDenied reports whether err means the caller may not do this.
func IsPermissionDenied(err error) bool { return errors.Is(err, errdefs.ErrPermissionDenied) }

// IsUnauthenticated reports whether err means the caller's identity (access
// token, user name, URL signature) was refused.
func IsUnauthenticated(err error) bool { return errors.Is(err, errdefs.ErrUnauthenticated) }

// IsResourceExhausted reports whether err means a limit was hit, such as a full disk.
func IsResourceExhausted(err error) bool { return errors.Is(err, errdefs.ErrResourceExhausted) }

// IsDiskFull reports whether err means the sandbox's disk is full: a write
// past its disk cap (CreateOptions.DiskMB), which /files answers with 507
// Insufficient Storage. Such an error is an *Error with that Status, and
// IsResourceExhausted reports it too. The file written keeps its old content.
func IsDiskFull(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.Status == http.StatusInsufficientStorage
}

// IsUnavailable reports whether err means the sandbox or Tupper could not be reached.
func IsUnavailable(err error) bool { return errors.Is(err, errdefs.ErrUnavailable) }

// IsDeadlineExceeded reports whether err means an operation ran out of time,
// such as a command reaching its timeout.
func IsDeadlineExceeded(err error) bool { return errors.Is(err, errdefs.ErrDeadlineExceeded) }

// IsCommandExit reports whether err is a *CommandExitError.
func IsCommandExit(err error) bool {
	var e *CommandExitError
	return errors.As(err, &e)
}

// classOfCode maps a Connect code to its errdefs class.
func classOfCode(c connect.Code) error {
	switch c {
	case connect.CodeNotFound:
		return errdefs.ErrNotFound
	case connect.CodeAlreadyExists:
		return errdefs.ErrAlreadyExists
	case connect.CodeInvalidArgument, connect.CodeOutOfRange:
		return errdefs.ErrInvalidArgument
	case connect.CodeFailedPrecondition:
		return errdefs.ErrFailedPrecondition
	case connect.CodePermissionDenied:
		return errdefs.ErrPermissionDenied
	case connect.CodeUnauthenticated:
		return errdefs.ErrUnauthenticated
	case connect.CodeResourceExhausted:
		return errdefs.ErrResourceExhausted
	case connect.CodeUnavailable:
		return errdefs.ErrUnavailable
	case connect.CodeDeadlineExceeded:
		return errdefs.ErrDeadlineExceeded
	case connect.CodeUnimplemented:
		return errdefs.ErrNotSupported
	}
	return nil
}

// classOfStatus maps an HTTP status to its errdefs class and to the Connect
// code name that says the same.
func classOfStatus(status int) (error, string) {
	switch status {
	case http.StatusBadRequest:
		return errdefs.ErrInvalidArgument, connect.CodeInvalidArgument.String()
	case http.StatusUnauthorized:
		return errdefs.ErrUnauthenticated, connect.CodeUnauthenticated.String()
	case http.StatusForbidden:
		return errdefs.ErrPermissionDenied, connect.CodePermissionDenied.String()
	case http.StatusNotFound:
		return errdefs.ErrNotFound, connect.CodeNotFound.String()
	case http.StatusConflict:
		return errdefs.ErrAlreadyExists, connect.CodeAlreadyExists.String()
	case http.StatusPreconditionFailed:
		return errdefs.ErrFailedPrecondition, connect.CodeFailedPrecondition.String()
	case http.StatusRequestEntityTooLarge, http.StatusTooManyRequests, http.StatusInsufficientStorage:
		return errdefs.ErrResourceExhausted, connect.CodeResourceExhausted.String()
	case http.StatusNotImplemented:
		return errdefs.ErrNotSupported, connect.CodeUnimplemented.String()
	case http.StatusBadGateway, http.StatusServiceUnavailable:
		return errdefs.ErrUnavailable, connect.CodeUnavailable.String()
	case http.StatusGatewayTimeout:
		return errdefs.ErrDeadlineExceeded, connect.CodeDeadlineExceeded.String()
	}
	return nil, connect.CodeUnknown.String()
}

// fromConnect turns an error of a Connect call into an *Error carrying its
// class. The connect error stays in the chain, and with it the caller's
// context error when that is what ended the call.
func fromConnect(err error) error {
	if err == nil {
		return nil
	}
	var ce *connect.Error
	if !errors.As(err, &ce) {
		return fromTransport(err)
	}
	return &Error{
		Code:    ce.Code().String(),
		Message: ce.Message(),
		class:   classOfCode(ce.Code()),
		cause:   ce,
	}
}

// fromResponse turns a failed HTTP response into an *Error. It reads (a
// bounded part of) the body, which is either the agent's JSON
// {"code","message"} or plain text; the caller still closes the body.
func fromResponse(resp *http.Response) error {
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	class, code := classOfStatus(resp.StatusCode)
	msg := strings.TrimSpace(string(body))
	var j struct {
		Code    json.RawMessage `json:"code"`
		Message string          `json:"message"`
	}
	if json.Unmarshal(body, &j) == nil && j.Message != "" {
		msg = j.Message
	}
	if msg == "" {
		msg = resp.Status
	}
	return &Error{Code: code, Status: resp.StatusCode, Message: msg, class: class}
}

// fromTransport classes an error of the HTTP client itself (connection
// refused, reset) as unavailable; errors of the caller's context stay what
// they are.
func fromTransport(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return &Error{
		Code:    connect.CodeUnavailable.String(),
		Message: err.Error(),
		class:   errdefs.ErrUnavailable,
		cause:   err,
	}
}
