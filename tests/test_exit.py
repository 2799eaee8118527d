"""Interpreter exit with table calls blocked on a rate limiter: exit is prompt (it once
waited out the limiter's whole timeout, or aborted the process), the blocked calls fail
with the "is closed" error, and tables without blocked calls are left alone."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import time

import jax
import numpy as np
import pytest

import gearjax as gx
from gearjax import _exit

LIMITER_TIMEOUT = 60  # far beyond the exit budget below

PROGRAM = """
import atexit, sys, threading, time
import jax, numpy as np
import gearjax as gx

mode = sys.argv[1]
columns = {"x": gx.Column((), "float32")}
if mode == "insert":  # an insert held back until something is sampled
    table = gx.Table(columns, capacity=8, max_length=2,
                     rate_limiter=gx.SampleToInsertRatio(1.0, 1, 1.0, timeout=TIMEOUT))
    table.insert({"x": np.ones(1, np.float32)})
    table.insert({"x": np.ones(1, np.float32)})
else:  # a sample of an empty table
    table = gx.Table(columns, capacity=8, max_length=2, rate_limiter=gx.MinSize(1, timeout=TIMEOUT))
idle = gx.Table(columns, capacity=2, max_length=2)  # no blocked calls: left open
idle.insert({"x": np.ones(1, np.float32)})
atexit.register(lambda: print("idle table open at exit:", not idle.closed, flush=True))

def blocked():
    try:
        if mode == "insert":
            table.insert({"x": np.ones(1, np.float32)})
        elif mode == "jit":  # a GPU raises where the result is read
            jax.block_until_ready(jax.jit(lambda s, k: table.sample(s, k, 2, 1)[1]["x"])(
                table.state(), jax.random.key(0)))
        else:
            table.sample(jax.random.key(0), 2, 1)
    except Exception as e:
        print("woken:", type(e).__name__, str(e).splitlines()[0][:200], flush=True)

threading.Thread(target=blocked, daemon=True).start()
while table._native.waiting == 0:
    time.sleep(0.01)
print("exiting", flush=True)
""".replace("TIMEOUT", str(LIMITER_TIMEOUT))


@pytest.mark.parametrize("mode", ["eager", "jit", "insert"])
def test_exit_is_prompt_with_a_call_blocked_on_the_rate_limiter(tmp_path, mode):
    script = tmp_path / "blocked.py"
    script.write_text(textwrap.dedent(PROGRAM))
    begin = time.monotonic()
    done = subprocess.run([sys.executable, str(script), mode], capture_output=True, text=True,
                          timeout=LIMITER_TIMEOUT - 10)
    seconds = time.monotonic() - begin
    out = done.stdout + done.stderr
    assert done.returncode == 0, out
    assert "exiting" in out and "woken:" in out and "is closed" in out, out
    assert "idle table open at exit: True" in out, out
    for bad in ("terminate called", "Fatal Python error", "leaked", "Aborted"):
        assert bad not in out, out
    assert seconds < 20, f"exit took {seconds:.1f} s\n{out}"  # start-up included


def test_wake_blocked_calls_closes_only_tables_with_blocked_calls():
    blocked = gx.Table({"x": gx.Column((), "float32")}, capacity=4, max_length=2,
                       rate_limiter=gx.MinSize(1, timeout=LIMITER_TIMEOUT))
    idle = gx.Table({"x": gx.Column((), "float32")}, capacity=4, max_length=2)
    errors = []

    def sample():
        try:
            blocked.sample(jax.random.key(0), 1, 1)
        except Exception as e:  # noqa: BLE001 - the error is what is checked
            errors.append(str(e))

    thread = threading.Thread(target=sample)
    thread.start()
    deadline = time.monotonic() + 30
    while blocked._native.waiting == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert _exit.wake_blocked_calls() == 1
    thread.join(10)
    assert not thread.is_alive() and len(errors) == 1 and "is closed" in errors[0]
    assert blocked.closed and not idle.closed
    assert _exit.wake_blocked_calls() == 0
    idle.insert({"x": np.ones(1, np.float32)})
    idle.close()


BUSY_PROGRAM = """
import sys, threading, time
import jax, numpy as np
import gearjax as gx

table = gx.Table({"x": gx.Column((4,), "float32")}, capacity=1000, max_length=16)
table.insert({"x": np.ones((3, 4), np.float32)})
started = []

def loop(kind):
    started.append(kind)
    if kind == "insert":
        while True:
            table.insert({"x": np.ones((8, 4), np.float32)})
    elif kind == "insert_step":
        while True:
            table.insert_step({"x": np.ones(4, np.float32)})
    elif kind == "writer":
        w = table.writer()
        while True:
            for _ in range(5):
                w.append({"x": np.ones(4, np.float32)})
            w.end_episode()
    elif kind == "contents":
        while True:
            table.contents()
    elif kind == "sample":
        key = jax.random.key(0)
        while True:
            table.sample(key, 8, 2)

kinds = sys.argv[1].split(",")
for kind in kinds:
    threading.Thread(target=loop, args=(kind,), daemon=True).start()
while len(started) < len(kinds):
    time.sleep(0.01)
time.sleep(0.2)
print("exiting", flush=True)
sys.exit(0)
"""

# Not "sample": an eager sample runs a JAX program, and a daemon thread inside
# any JAX call at exit aborts the process in jaxlib itself (a jitted function
# of plain jax.numpy, no gearjax: 6 of 6 exits on jax 0.10.2, Python 3.11);
# docs/concepts/tables.md says so.
BUSY_KINDS = "insert,insert_step,writer,contents"


@pytest.mark.parametrize("run", range(6))
def test_exit_with_daemon_threads_inside_table_calls_is_clean(tmp_path, run):
    """Daemon threads looping in table calls when the program exits: the exit is
    normal. It once aborted ("terminate called without an active exception":
    Python ended each thread that took the GIL back during finalisation by
    unwinding through the call's C++ frames) in 4-6 of 6 runs of each kind."""
    script = tmp_path / "busy.py"
    script.write_text(textwrap.dedent(BUSY_PROGRAM))
    done = subprocess.run([sys.executable, str(script), BUSY_KINDS], capture_output=True,
                          text=True, timeout=120)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out
    assert "exiting" in out, out
    for bad in ("terminate called", "Fatal Python error", "Aborted", "leaked"):
        assert bad not in out, out
