package cli

import (
	"os/exec"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestShellJoinRoundTripsThroughBash(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("bash not installed")
	}
	tests := []struct {
		name string
		argv []string
	}{
		{"plain", []string{"a", "b"}},
		{"spaces and quotes", []string{"it's", "a b", `"q"`}},
		{"shell metacharacters", []string{"$HOME", "`id`", "a;b", "*", "x|y"}},
		{"empty and unicode", []string{"", "ünï 文件", "-n"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// printf prints each argument bash received on its own line,
			// NUL-terminated so that empty ones show.
			line := "printf '%s\\0' " + shellJoin(tt.argv)
			out, err := exec.Command(bash, "-c", line).Output()
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			start := 0
			for i, b := range out {
				if b == 0 {
					got = append(got, string(out[start:i]))
					start = i + 1
				}
			}
			if d := cmp.Diff(tt.argv, got); d != "" {
				t.Errorf("arguments through bash (-want +got):\n%s", d)
			}
		})
	}
}

func TestParsePairs(t *testing.T) {
	got, err := parsePairs("--env", []string{"A=1", "B=x=y", "C="})
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(map[string]string{"A": "1", "B": "x=y", "C": ""}, got); d != "" {
		t.Errorf("pairs (-want +got):\n%s", d)
	}
	if _, err := parsePairs("--env", []string{"novalue"}); err == nil {
		t.Error("parsePairs(novalue) succeeded, want an error")
	}
}
