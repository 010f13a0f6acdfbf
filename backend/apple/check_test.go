package apple

import (
	"context"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/lightbearco/tupper/backend"
)

func TestMacFinding(t *testing.T) {
	tests := []struct {
		name string
		h    host
		ok   bool
	}{
		{name: "macOS 26 on Apple silicon", h: host{goos: "darwin", goarch: "arm64", macOS: "26.1"}, ok: true},
		{name: "macOS 27", h: host{goos: "darwin", goarch: "arm64", macOS: "27.0.1"}, ok: true},
		{name: "macOS 15", h: host{goos: "darwin", goarch: "arm64", macOS: "15.6"}},
		{name: "an Intel Mac", h: host{goos: "darwin", goarch: "amd64", macOS: "26.0"}},
		{name: "version unknown", h: host{goos: "darwin", goarch: "arm64", macOSErr: errors.New("sw_vers: not found")}},
		{name: "Linux", h: host{goos: "linux", goarch: "amd64"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := macFinding(tt.h)
			if f.OK != tt.ok || f.Optional || (f.Fix == "") == !tt.ok {
				t.Errorf("macFinding = %+v; want OK %v, and a fix when not", f, tt.ok)
			}
		})
	}
}

func TestCheckHost(t *testing.T) {
	mac := host{goos: "darwin", goarch: "arm64", macOS: "26.1"}
	s := newStandin(t)
	tests := []struct {
		name string
		cli  string
		want []backend.Finding // What, OK and Fix of each
	}{
		{name: "all well", cli: s.path, want: []backend.Finding{
			{What: "macOS", OK: true}, {What: "container CLI", OK: true}, {What: "container services", OK: true},
			{What: "disk limit", Optional: true, Fix: "x"}, {What: "egress policy", Optional: true, Fix: "x"}}},
		{name: "too old", cli: s.with(t, "TUPPER_CONTAINER_STANDIN_VERSION=0.12.3").path, want: []backend.Finding{
			{What: "macOS", OK: true}, {What: "container CLI", Fix: "upgrade: " + fixInstall}, {What: "container services", OK: true},
			{What: "disk limit", Optional: true, Fix: "x"}, {What: "egress policy", Optional: true, Fix: "x"}}},
		{name: "services down", cli: s.with(t, "TUPPER_CONTAINER_STANDIN_SYSTEM=not running").path, want: []backend.Finding{
			{What: "macOS", OK: true}, {What: "container CLI", OK: true}, {What: "container services", Fix: fixStart},
			{What: "disk limit", Optional: true, Fix: "x"}, {What: "egress policy", Optional: true, Fix: "x"}}},
		{name: "services never started", cli: s.with(t, "TUPPER_CONTAINER_STANDIN_SYSTEM=unregistered").path, want: []backend.Finding{
			{What: "macOS", OK: true}, {What: "container CLI", OK: true}, {What: "container services", Fix: fixStart},
			{What: "disk limit", Optional: true, Fix: "x"}, {What: "egress policy", Optional: true, Fix: "x"}}},
		{name: "no CLI", cli: "no-such-container-cli", want: []backend.Finding{
			{What: "macOS", OK: true}, {What: "container CLI", Fix: fixInstall},
			{What: "disk limit", Optional: true, Fix: "x"}, {What: "egress policy", Optional: true, Fix: "x"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := checkHost(context.Background(), tt.cli, mac)
			var brief []backend.Finding
			for _, f := range got {
				if f.Detail == "" {
					t.Errorf("finding %q has no detail", f.What)
				}
				if f.Optional && f.Fix != "" {
					f.Fix = "x"
				}
				brief = append(brief, backend.Finding{What: f.What, OK: f.OK, Fix: f.Fix, Optional: f.Optional})
			}
			if diff := cmp.Diff(tt.want, brief); diff != "" {
				t.Errorf("findings (-want +got):\n%s\nall: %+v", diff, got)
			}
		})
	}
}
