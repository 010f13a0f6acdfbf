package startcmd

import (
	"encoding/json"
	"net/http"
)

// healthBody is /health's answer while the sandbox is not ready: the
// {code, message} of the agent's other JSON errors, with the start
// command's exit code and output besides for those that read them.
type healthBody struct {
	Code     int    `json:"code"`
	Message  string `json:"message"`
	State    string `json:"state"`
	ExitCode *int32 `json:"exitCode,omitempty"`
	Output   string `json:"output,omitempty"`
}

// Health wraps next, the agent's /health. Until the sandbox is ready, GET
// and HEAD answer 503 while the check may still pass and 500 once it never
// will, with a JSON body whose message says what it waits for or why it
// failed; the engine's create reads it. Once ready, next answers.
func (r *Runner) Health(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.Method != http.MethodGet && req.Method != http.MethodHead {
			next.ServeHTTP(w, req)
			return
		}
		st := r.Status()
		if st.State == Ready {
			next.ServeHTTP(w, req)
			return
		}
		code := http.StatusServiceUnavailable
		if st.State == Failed {
			code = http.StatusInternalServerError
		}
		body := healthBody{Code: code, Message: st.Message, State: st.State.String(), Output: st.Output}
		if st.Exit != nil {
			c := st.Exit.GetExitCode()
			body.ExitCode = &c
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		w.WriteHeader(code)
		json.NewEncoder(w).Encode(body)
	})
}
