package cli

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/lightbearco/tupper/errdefs"
	"github.com/lightbearco/tupper/sdk"
)

func dfRun(cmd string, user ...string) sdk.TemplateStep {
	return sdk.TemplateStep{Type: "RUN", Args: append([]string{cmd}, user...)}
}

func dfStep(typ string, args ...string) sdk.TemplateStep {
	return sdk.TemplateStep{Type: typ, Args: args}
}

// TestParseDockerfile checks what each instruction becomes: Docker's
// rules where a template keeps them (RUN as root until USER, COPY's files
// root's unless --chown, variables of earlier ENV lines expanded), the
// exec forms quoted into shell commands, CMD and ENTRYPOINT as the start
// command and the ready comment as its check; and the line of each step.
func TestParseDockerfile(t *testing.T) {
	tests := []struct {
		name      string
		src       string
		want      sdk.TemplateSpec
		wantLines []int
	}{{
		name: "every instruction",
		src: `# syntax=docker/dockerfile:1
FROM tupper-test/debian:1 AS app

# install
RUN apt-get update && \
    apt-get install -y curl
ENV APP=/srv/app GREETING="hello world" PLAIN=a\ b
ENV OLD the old form
copy --chown=user --chmod=0755 bin/tool ${APP}/bin/
COPY ["with space.txt", "$APP/"]
ADD a.txt b.txt $APP/
WORKDIR $APP
EXPOSE 8000
USER user
RUN ["python3", "-c", "print('hi')"]
# tupper:ready curl -sf localhost:8000
CMD python3 -m http.server 8000
`,
		want: sdk.TemplateSpec{
			FromImage: "tupper-test/debian:1", StartCmd: "python3 -m http.server 8000", ReadyCmd: "curl -sf localhost:8000",
			Steps: []sdk.TemplateStep{
				dfRun("apt-get update &&     apt-get install -y curl", "root"),
				dfStep("ENV", "APP", "/srv/app", "GREETING", "hello world", "PLAIN", "a b"),
				dfStep("ENV", "OLD", "the old form"),
				dfStep("COPY", "bin/tool", "/srv/app/bin/", "user", "0755"),
				dfStep("COPY", "with space.txt", "/srv/app/", "root", ""),
				dfStep("COPY", "a.txt", "/srv/app/", "root", ""),
				dfStep("COPY", "b.txt", "/srv/app/", "root", ""),
				dfStep("WORKDIR", "/srv/app"),
				dfStep("USER", "user"),
				dfRun(`python3 -c 'print('\''hi'\'')'`),
			},
		},
		wantLines: []int{5, 7, 8, 9, 10, 11, 11, 12, 14, 15},
	}, {
		name: "entrypoint and cmd join in exec form",
		src:  "FROM base\nENTRYPOINT [\"/app/run\", \"--port\"]\nCMD [\"8000\"]\n",
		want: sdk.TemplateSpec{FromImage: "base", StartCmd: "/app/run --port 8000", Steps: []sdk.TemplateStep{}},
	}, {
		name: "the last CMD wins, a start command may have no ready check",
		src:  "FROM base\nCMD first\ncmd second\n",
		want: sdk.TemplateSpec{FromImage: "base", StartCmd: "second", Steps: []sdk.TemplateStep{}},
	}, {
		name: "single quotes keep a dollar, a lone dollar stays",
		src:  "FROM base\nENV A=1\nENV B='$A' C=\"$A\" D=5$ E=\\$A\n",
		want: sdk.TemplateSpec{FromImage: "base", Steps: []sdk.TemplateStep{
			dfStep("ENV", "A", "1"), dfStep("ENV", "B", "$A", "C", "1", "D", "5$", "E", "$A"),
		}},
		wantLines: []int{2, 3},
	}, {
		name:      "CRLF line ends and tabs",
		src:       "FROM\tbase\r\nRUN\techo a \\\r\n  b\r\n",
		want:      sdk.TemplateSpec{FromImage: "base", Steps: []sdk.TemplateStep{dfRun("echo a   b", "root")}},
		wantLines: []int{2},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			df, err := parseDockerfile(strings.NewReader(tt.src), "Dockerfile", t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			data, err := json.Marshal(df.tpl)
			if err != nil {
				t.Fatal(err)
			}
			var got sdk.TemplateSpec
			if err := json.Unmarshal(data, &got); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("template (-want +got):\n%s", diff)
			}
			if tt.wantLines != nil {
				if diff := cmp.Diff(tt.wantLines, df.lines); diff != "" {
					t.Errorf("lines (-want +got):\n%s", diff)
				}
			}
		})
	}
}

// TestParseDockerfileErrors checks that what a template cannot do is
// refused, naming the file's line and saying why.
func TestParseDockerfileErrors(t *testing.T) {
	tests := []struct {
		name, src, want string
	}{
		{"no FROM", "# nothing\n", "Dockerfile: no FROM line"},
		{"before FROM", "RUN true\nFROM base\n", "Dockerfile:1: RUN before FROM"},
		{"ARG", "FROM base\n\nARG VERSION=1\n", "Dockerfile:3: ARG: build arguments are not supported"},
		{"LABEL", "FROM base\nLABEL a=b\n", "Dockerfile:2: LABEL"},
		{"multi-stage", "FROM base AS a\nFROM base\n", "Dockerfile:2: a second FROM: multi-stage builds are not supported"},
		{"COPY --from", "FROM base\nCOPY --from=a /x /y\n", "Dockerfile:2: COPY --from: multi-stage"},
		{"ADD of a URL", "FROM base\nADD https://example.com/x.tgz /x\n", "Dockerfile:2: ADD https://example.com/x.tgz: only files of the context directory"},
		{"ADD of an archive", "FROM base\nADD x.tar.gz /x/\n", "Dockerfile:2: ADD x.tar.gz: ADD would unpack the archive"},
		{"RUN --mount", "FROM base\nRUN --mount=type=cache,target=/x true\n", "Dockerfile:2: RUN --mount is not supported"},
		{"heredoc", "FROM base\nRUN <<EOF\necho\nEOF\n", "Dockerfile:2: here-documents"},
		{"unknown instruction", "FROM base\nFROB x\n", `Dockerfile:2: unknown instruction "FROB"`},
		{"unset variable", "FROM base\nENV PATH=/opt/bin:$PATH\n", "Dockerfile:2: ENV: $PATH is not set by an earlier ENV line"},
		{"variable form", "FROM base\nENV A=1\nWORKDIR ${A:-x}\n", "Dockerfile:3: WORKDIR: ${A:-x}"},
		{"COPY outside the context", "FROM base\nCOPY ../x /x\n", "Dockerfile:2: COPY ../x: the source path escapes"},
		{"several sources into a file", "FROM base\nCOPY a b /dest\n", "Dockerfile:2: COPY of several sources needs a destination directory"},
		{"chown with another group", "FROM base\nCOPY --chown=user:staff a /a\n", "Dockerfile:2: COPY --chown=user:staff"},
		{"chmod not octal", "FROM base\nCOPY --chmod=u+x a /a\n", "Dockerfile:2: COPY --chmod=u+x"},
		{"USER with a group", "FROM base\nUSER app:staff\n", "Dockerfile:2: USER app:staff"},
		{"ready without a start command", "FROM base\n# tupper:ready true\n", "Dockerfile:2: a ready check (# tupper:ready) needs a start command"},
		{"empty ready", "FROM base\n#tupper:ready\nCMD x\n", "Dockerfile:2: # tupper:ready needs a command"},
		{"unterminated quote", "FROM base\nENV A=\"x\n", `Dockerfile:2: ENV: unterminated " quote`},
		{"escape directive", "# escape=`\nFROM base\n", "Dockerfile:1: the escape directive is not supported"},
		{"ENV not a name", "FROM base\nENV 1A=x\n", `Dockerfile:2: ENV "1A"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := parseDockerfile(strings.NewReader(tt.src), "Dockerfile", t.TempDir())
			if err == nil || !strings.Contains(err.Error(), tt.want) || !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Errorf("got %v, want an invalid argument saying %q", err, tt.want)
			}
		})
	}
}

// TestDefaultTemplateName checks the name a directory gives a template.
func TestDefaultTemplateName(t *testing.T) {
	for dir, want := range map[string]string{"/src/My App_2": "my-app_2", "/x/.hidden.": "hidden", "/tmp/web.v2": "web.v2"} {
		if got, err := defaultTemplateName(dir); err != nil || got != want {
			t.Errorf("defaultTemplateName(%q) = %q, %v; want %q", dir, got, err, want)
		}
	}
	if _, err := defaultTemplateName("/"); err == nil {
		t.Error("the root directory gave a name")
	}
}
