"""Tupper's bridge to a Jupyter kernel (ipykernel), started by the code
interpreter (package agent/interpreter), one per Python context:
python3 python_bridge.py CWD SETUP_FILE.

It starts the kernel with jupyter_client, then runs one cell at a time:
commands arrive as JSON lines on stdin, events leave as JSON lines on
descriptor 3. Commands: {"op": "execute", "code": ..., "env": {...}} and
{"op": "interrupt"}. Events: ready, stream, result, error, count, done and
fatal (see kernel.go). End of stdin shuts the kernel down. If the kernel
dies, the bridge says so and exits: the interpreter starts a new one.
"""

import json
import os
import queue
import subprocess
import sys
import threading

events = os.fdopen(3, "w", buffering=1, encoding="utf-8")
events_lock = threading.Lock()


def emit(**event):
    line = json.dumps(event, default=str, ensure_ascii=False)
    with events_lock:
        events.write(line + "\n")
        events.flush()


# A stream event carries at most this much text: the interpreter refuses
# events past 64 MiB, and smaller ones keep output flowing.
STREAM_CHUNK = 1 << 20


def emit_stream(name, text):
    for i in range(0, len(text), STREAM_CHUNK):
        emit(ev="stream", name=name, text=text[i:i + STREAM_CHUNK])


try:
    from jupyter_client import KernelManager
except Exception as e:  # the image lacks Jupyter
    emit(ev="fatal", message="cannot import jupyter_client (%s): the image needs python3-jupyter-client and python3-ipykernel" % e)
    sys.exit(2)

# ipykernel's own launcher, but with no high-water mark on its PUB sockets:
# at ZeroMQ's default of 1000 queued messages, a cell that prints fast
# (print(..., flush=True) in a loop) would lose lines without a word.
LAUNCH = """import zmq
_socket = zmq.Context.socket
def _unbounded_pub(self, kind, *args, **kwargs):
    s = _socket(self, kind, *args, **kwargs)
    if kind == zmq.PUB:
        s.setsockopt(zmq.SNDHWM, 0)
    return s
zmq.Context.socket = _unbounded_pub
from ipykernel import kernelapp
kernelapp.launch_new_instance()
"""

cwd = sys.argv[1] if len(sys.argv) > 1 else os.getcwd()
km = KernelManager(kernel_name="python3")
try:
    from jupyter_client.kernelspec import KernelSpec
    km._kernel_spec = KernelSpec(
        argv=[sys.executable, "-c", LAUNCH, "-f", "{connection_file}"],
        display_name="Python 3", language="python")
except Exception as e:  # an older jupyter_client: its own launcher
    print("tupper: cannot set the kernel's launcher: %s" % e, file=sys.stderr)
try:
    # The kernel's own output goes to the bridge's stderr, which the
    # interpreter logs; what cells print comes through iopub.
    km.start_kernel(cwd=cwd, stdin=subprocess.DEVNULL, stdout=sys.stderr, stderr=sys.stderr)
    kc = km.client()
    # Nor on the bridge's side.
    import zmq
    kc.context.setsockopt(zmq.RCVHWM, 0)
    kc.start_channels()
    kc.wait_for_ready(timeout=120)
except Exception as e:
    emit(ev="fatal", message="the Python kernel did not start: %s" % e)
    try:
        km.shutdown_kernel(now=True)
    except Exception:
        pass
    sys.exit(2)


class KernelDied(Exception):
    pass


# iopub is read by a thread of its own, as fast as the kernel sends, into
# this queue; the worker takes from it.
iopub = queue.Queue()


def read_iopub():
    while True:
        try:
            iopub.put(kc.get_iopub_msg(timeout=1))
        except queue.Empty:
            continue
        except Exception:
            return


threading.Thread(target=read_iopub, daemon=True).start()


def wait_idle(msg_id, forward):
    """Reads iopub until the kernel is idle after msg_id, forwarding the
    cell's output when forward is true. Stream messages waiting together
    leave as one event."""
    stream_name, stream_text = None, []

    def flush_stream():
        nonlocal stream_name, stream_text
        if stream_text:
            emit_stream(stream_name, "".join(stream_text))
        stream_name, stream_text = None, []

    while True:
        try:
            msg = iopub.get(timeout=1)
        except queue.Empty:
            if not km.is_alive():
                raise KernelDied()
            continue
        if msg.get("parent_header", {}).get("msg_id") != msg_id:
            continue
        kind, content = msg["msg_type"], msg["content"]
        if forward and kind == "stream":
            name = content.get("name", "stdout")
            if name != stream_name:
                flush_stream()
                stream_name = name
            stream_text.append(content.get("text", ""))
            if iopub.empty() or sum(map(len, stream_text)) >= STREAM_CHUNK:
                flush_stream()
            continue
        flush_stream()
        if kind == "status":
            if content.get("execution_state") == "idle":
                break
        elif not forward:
            if kind == "error":
                print("tupper: setup cell failed: %s: %s" % (content.get("ename"), content.get("evalue")), file=sys.stderr)
        elif kind == "execute_input":
            emit(ev="count", n=content.get("execution_count", 0))
        elif kind == "execute_result":
            emit(ev="result", data=content.get("data", {}), main=True)
        elif kind == "display_data":
            emit(ev="result", data=content.get("data", {}), main=False)
        elif kind == "error":
            emit(ev="error", name=content.get("ename", ""), value=content.get("evalue", ""),
                 traceback="\n".join(content.get("traceback", [])))
    # Drain the matching reply so that the shell channel does not fill.
    while True:
        try:
            reply = kc.get_shell_msg(timeout=5)
        except queue.Empty:
            return
        if reply.get("parent_header", {}).get("msg_id") == msg_id:
            return


# Every execute says stop_on_error=False: after a failing cell ipykernel
# would otherwise abort what comes next for a moment, and that could be the
# next cell or the silent one that puts the environment back.


def run_silent(code):
    wait_idle(kc.execute(code, silent=True, store_history=False, allow_stdin=False, stop_on_error=False), forward=False)


SET_ENV = """import os as _tupper_os
_tupper_saved_env = {_k: _tupper_os.environ.get(_k) for _k in %r}
_tupper_os.environ.update(%r)
del _tupper_os"""

RESTORE_ENV = """import os as _tupper_os
for _k, _v in _tupper_saved_env.items():
    if _v is None:
        _tupper_os.environ.pop(_k, None)
    else:
        _tupper_os.environ[_k] = _v
del _tupper_os, _tupper_saved_env
"""

jobs = queue.Queue()


def worker():
    try:
        while True:
            job = jobs.get()
            if job is None:
                return
            env = {str(k): str(v) for k, v in (job.get("env") or {}).items()}
            if env:
                run_silent(SET_ENV % (list(env), env))
            try:
                msg_id = kc.execute(job.get("code", ""), silent=False, store_history=True, allow_stdin=False, stop_on_error=False)
                wait_idle(msg_id, forward=True)
            finally:
                if env:
                    run_silent(RESTORE_ENV)
            emit(ev="done")
    except KernelDied:
        emit(ev="died", message="the Python kernel died (out of memory, or the cell ended the process)")
        os._exit(3)


# The kernel's setup (python_setup.py, whose path the interpreter passes as
# the second argument) runs before the first cell: it adds the chart
# formatter.
if len(sys.argv) > 2 and sys.argv[2]:
    with open(sys.argv[2], encoding="utf-8") as f:
        run_silent(f.read())

threading.Thread(target=worker, daemon=True).start()
emit(ev="ready")
for line in sys.stdin:
    try:
        cmd = json.loads(line)
    except ValueError:
        continue
    op = cmd.get("op")
    if op == "execute":
        jobs.put(cmd)
    elif op == "interrupt":
        try:
            km.interrupt_kernel()
        except Exception as e:
            print("tupper: interrupt failed: %s" % e, file=sys.stderr)
try:
    km.shutdown_kernel(now=True)
except Exception:
    pass
