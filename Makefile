# The two commands of the README: `make run` and `make test`. Everything
# else is set up by scripts/setup.sh, which both call.
ADDR ?= 127.0.0.1:3000
CMD ?= python3 -c 'import platform; print("hello from", platform.uname().system, "in a gVisor sandbox")'

.PHONY: setup build base run demo test test-backend bench proto dist

setup build:
	scripts/setup.sh

# base builds the default template and the code interpreter's the first
# time (a few minutes: Debian bookworm with python3, node, git…, then
# Jupyter, numpy, pandas and matplotlib); later runs find them and return.
base: setup
	bin/tupper image ls --quiet | grep -qx base || bin/tupper image build base
	bin/tupper image ls --quiet | grep -qx code-interpreter || bin/tupper image build code-interpreter

# run starts the daemon: the E2B-compatible API on $(ADDR). The first start
# prints an API key and the three E2B_* variables to export.
run: base
	bin/tupper serve --addr $(ADDR)

# demo runs CMD in a fresh sandbox: through the daemon when one runs (make
# run), else in an engine of its own.
demo: base
	bin/tupper run -- bash -lc "$$CMD"

test:
	scripts/test.sh

# test-backend runs the conformance suite (and, for firecracker, the
# checkpoint test) of one backend on this host's real platform
# (BACKEND=gvisor, runc, firecracker, apple or wsl): on a Mac for apple, on
# Windows for wsl, on a Linux host with KVM and Firecracker for
# firecracker. A missing platform fails rather than skips; checks a
# platform cannot do at all (Apple's disk cap) say NOT SUPPORTED. Linux
# backends are set up by scripts/setup.sh; apple and wsl need what
# docs/design/backends.md lists (a Linux root for the guest's
# architecture, the linux agent).
BACKEND ?= gvisor
test-backend:
	@case "$(BACKEND)" in apple|wsl) ;; *) scripts/setup.sh ;; esac
	TUPPER_TEST_BACKEND=$(BACKEND) TUPPER_REQUIRE_ALL=1 go test -count=1 -v -run 'Conformance|Real' ./backend/$(BACKEND)/

bench: setup
	TUPPER_AGENT=$(CURDIR)/bin/tupper-agent go test -run '^$$' -bench . -benchtime 20x ./local/

proto:
	scripts/gen-proto.sh

# dist writes the release archives (tupper for linux/amd64, linux/arm64,
# darwin/arm64 and windows/amd64, each with its sandboxes' tupper-agent)
# and their SHA256SUMS to dist/.
dist:
	scripts/dist.sh dist
