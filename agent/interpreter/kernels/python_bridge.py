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


try:
    from jupyter_client import KernelManager
except Exception as e:  # the image lacks Jupyter
    emit(ev="fatal", message="cannot import jupyter_client (%s): the image needs python3-jupyter-client and python3-ipykernel" % e)
    sys.exit(2)

cwd = sys.argv[1] if len(sys.argv) > 1 else os.getcwd()
km = KernelManager(kernel_name="python3")
try:
    # The kernel's own output goes to the bridge's stderr, which the
    # interpreter logs; what cells print comes through iopub.
    km.start_kernel(cwd=cwd, stdin=subprocess.DEVNULL, stdout=sys.stderr, stderr=sys.stderr)
    kc = km.client()
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


def wait_idle(msg_id, forward):
    """Reads iopub until the kernel is idle after msg_id, forwarding the
    cell's output when forward is true."""
    while True:
        try:
            msg = kc.get_iopub_msg(timeout=1)
        except queue.Empty:
            if not km.is_alive():
                raise KernelDied()
            continue
        if msg.get("parent_header", {}).get("msg_id") != msg_id:
            continue
        kind, content = msg["msg_type"], msg["content"]
        if kind == "status":
            if content.get("execution_state") == "idle":
                break
        elif not forward:
            if kind == "error":
                print("tupper: setup cell failed: %s: %s" % (content.get("ename"), content.get("evalue")), file=sys.stderr)
        elif kind == "stream":
            emit(ev="stream", name=content.get("name", "stdout"), text=content.get("text", ""))
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
