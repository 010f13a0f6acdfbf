package server

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/lightbearco/tupper/errdefs"
)

// This file is the one place where error classes become HTTP statuses, and
// where the two error bodies of the wire are written: the control plane's
// {"code": <int>, "message"} and, on the data plane, Connect's
// {"code": "<name>", "message"} for RPC paths.

// apiError is the control plane's error body. The JS SDK reads code from
// it (404 on kill means "already gone", 409 on pause "not running"); the
// Python SDK parses both fields strictly.
type apiError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

// statusOf maps an error's class to an HTTP status.
func statusOf(err error) int {
	switch {
	case errors.Is(err, errdefs.ErrNotFound):
		return http.StatusNotFound
	case errors.Is(err, errdefs.ErrAlreadyExists), errors.Is(err, errdefs.ErrFailedPrecondition):
		return http.StatusConflict
	case errors.Is(err, errdefs.ErrInvalidArgument):
		return http.StatusBadRequest
	case errors.Is(err, errdefs.ErrNotSupported):
		return http.StatusNotImplemented
	case errors.Is(err, errdefs.ErrResourceExhausted):
		// 429 rather than 507: the SDKs treat 429 as "try again later",
		// which is what a full host or a sandbox quota calls for.
		return http.StatusTooManyRequests
	case errors.Is(err, errdefs.ErrUnavailable):
		return http.StatusServiceUnavailable
	case errors.Is(err, errdefs.ErrUnauthenticated):
		return http.StatusUnauthorized
	case errors.Is(err, errdefs.ErrPermissionDenied):
		return http.StatusForbidden
	case errors.Is(err, errdefs.ErrDeadlineExceeded), errors.Is(err, context.DeadlineExceeded):
		return http.StatusGatewayTimeout
	default:
		return http.StatusInternalServerError
	}
}

// defaultRetryAfter is the Retry-After of a 429 whose error names none.
const defaultRetryAfter = 5 * time.Second

// writeError answers a control-plane request with err's status and body.
func (s *Server) writeError(w http.ResponseWriter, r *http.Request, err error) {
	status := statusOf(err)
	if status == http.StatusInternalServerError {
		s.log.Error("request failed", "method", r.Method, "path", r.URL.Path, "err", err)
	} else {
		s.log.Debug("request refused", "method", r.Method, "path", r.URL.Path, "status", status, "err", err)
	}
	if status == http.StatusTooManyRequests {
		// Every 429 says when to come back, in whole seconds and at least
		// one: the E2B SDKs wait that long and retry, and read a 429
		// without it as a RateLimitError at once. A limit that says
		// nothing (the host's process budget, the address pool) frees up
		// as sandboxes end.
		after, ok := errdefs.RetryAfter(err)
		if !ok {
			after = defaultRetryAfter
		}
		w.Header().Set("Retry-After", strconv.Itoa(max(1, int(math.Ceil(after.Seconds())))))
	}
	writeStatus(w, status, err.Error())
}

// writeStatus writes a control-plane error body with status.
func writeStatus(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, apiError{Code: status, Message: msg})
}

// writeJSON writes v as the JSON body of a response with status.
func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

// connectCodes names, for the statuses the data plane answers itself, the
// Connect error code a Connect client should see. Connect clients read the
// code from the body and fall back to the HTTP status.
var connectCodes = map[int]string{
	http.StatusBadRequest:          "invalid_argument",
	http.StatusUnauthorized:        "unauthenticated",
	http.StatusForbidden:           "permission_denied",
	http.StatusNotFound:            "not_found",
	http.StatusConflict:            "failed_precondition",
	http.StatusTooManyRequests:     "resource_exhausted",
	http.StatusNotImplemented:      "unimplemented",
	http.StatusBadGateway:          "unavailable",
	http.StatusServiceUnavailable:  "unavailable",
	http.StatusGatewayTimeout:      "deadline_exceeded",
	http.StatusInternalServerError: "internal",
}

// writeDataError answers a data-plane request that never reached the
// sandbox. RPC paths get a Connect error body, so that the SDKs' Connect
// clients report the right code (502 becomes "unavailable", which the E2B
// SDKs read as "the sandbox is not running"); other paths get the control
// plane's body, which the SDKs' envd HTTP clients read.
func writeDataError(w http.ResponseWriter, r *http.Request, status int, msg string) {
	if isRPCPath(r.URL.Path) {
		code, ok := connectCodes[status]
		if !ok {
			code = "unknown"
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		json.NewEncoder(w).Encode(struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		}{code, msg})
		return
	}
	writeStatus(w, status, msg)
}

// isRPCPath reports whether path names a Connect procedure,
// "/<package>.<Service>/<Method>".
func isRPCPath(path string) bool {
	svc, method, ok := strings.Cut(strings.TrimPrefix(path, "/"), "/")
	return ok && strings.Contains(svc, ".") && method != "" && !strings.Contains(method, "/")
}
