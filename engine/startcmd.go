package engine

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/lightbearco/tupper/errdefs"
	"github.com/lightbearco/tupper/image"
)

// maxStartCmd bounds each of a template's start command labels: the agent
// takes them as arguments, and Linux takes none of 128 KiB or more.
const maxStartCmd = 64 << 10

// setStartCommand copies img's start command, ready check, user and
// directory (image.LabelStartCmd and the others) into sb's record, whence
// agentArgs hands them to the agent.
func setStartCommand(sb *Sandbox, img *image.Image) error {
	l := img.Config.Labels
	sb.StartCmd, sb.ReadyCmd = l[image.LabelStartCmd], l[image.LabelReadyCmd]
	sb.StartUser, sb.StartDir = l[image.LabelStartUser], l[image.LabelStartWorkdir]
	for label, v := range map[string]string{
		image.LabelStartCmd: sb.StartCmd, image.LabelReadyCmd: sb.ReadyCmd,
		image.LabelStartUser: sb.StartUser, image.LabelStartWorkdir: sb.StartDir,
	} {
		if len(v) > maxStartCmd || strings.ContainsRune(v, 0) {
			return fmt.Errorf("image %s: label %s is longer than %d bytes or holds a NUL byte: %w", img.ID, label, maxStartCmd, errdefs.ErrFailedPrecondition)
		}
	}
	return nil
}

// startArgs are the agent's arguments for sb's start command, if any.
func startArgs(sb *Sandbox) []string {
	var args []string
	for _, a := range []struct{ flag, v string }{
		{"--start-cmd", sb.StartCmd}, {"--ready-cmd", sb.ReadyCmd},
		{"--start-user", sb.StartUser}, {"--start-dir", sb.StartDir},
	} {
		if a.v != "" {
			args = append(args, a.flag, a.v)
		}
	}
	return args
}

// healthMessage reads the message of a /health answer that is not 204:
// the agent says there, as JSON {code, message}, what a sandbox whose
// template has a start command waits for (503) or why it will never be
// ready (500). It returns "" for any other body.
func healthMessage(resp *http.Response) string {
	var body struct {
		Message string `json:"message"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 64<<10)).Decode(&body); err != nil {
		return ""
	}
	return body.Message
}
