# The two commands of the README: `make run` and `make test`. Everything
# else is set up by scripts/setup.sh, which both call.
CMD ?= python3 -c 'import platform; print("hello from", platform.uname().system, "in a gVisor sandbox")'

.PHONY: setup build run test bench proto

setup build:
	scripts/setup.sh

# run builds the base template the first time, then runs CMD in a fresh sandbox.
run: setup
	bin/tupper image ls --quiet | grep -qx base || bin/tupper image build base
	bin/tupper run --template base -- bash -lc "$$CMD"

test:
	scripts/test.sh

bench: setup
	TUPPER_AGENT=$(CURDIR)/bin/tupper-agent go test -run '^$$' -bench . -benchtime 20x ./backend/gvisor/ ./engine/

proto:
	scripts/gen-proto.sh
