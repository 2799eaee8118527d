"""Ctrl-C during a blocked table call: a call held back by a rate limiter (an
insert, insert_step, a writer's insert, insert_batch, an eager sample, with
numpy=True too, a sample in a jitted function or in lax.scan, a sample held
back by SampleToInsertRatio or waiting for items it may draw) gives way
to SIGINT within a moment, raising KeyboardInterrupt (it once waited out the
limiter's whole timeout: 19 s of 20), and the table works afterwards. A SIGINT
handler that does not raise lets an eager call wait on; a compiled call then
fails its program as "interrupted". Each case runs in a subprocess, whose main
thread is the one Python runs signal handlers on."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

TIMEOUT = 20  # the limiter's: far beyond the 1 s a blocked call may take to give way

PROGRAM = """
import json, os, signal, sys, threading, time
# What an interactive Python has: a process started in the background by a
# shell without job control inherits SIGINT ignored, and Python then installs
# no handler (nor does gearjax: it leaves an ignored signal alone).
signal.signal(signal.SIGINT, signal.default_int_handler)
import jax, numpy as np
import gearjax as gx

TIMEOUT = float(sys.argv[2])
mode, sender = sys.argv[1].split(":")
columns = {"x": gx.Column((), "float32")}
one = {"x": np.ones(1, np.float32)}
INSERTS = ("insert", "insert_step", "writer", "insert_batch")
if mode in INSERTS:  # two inserts, then the ratio wants samples first
    table = gx.Table(columns, 8, 2,
                     rate_limiter=gx.SampleToInsertRatio(1.0, 1, 1.0, timeout=TIMEOUT))
    table.insert(one)
    table.insert(one)
elif mode == "ratio":  # one trajectory; 4 rows exceed what the ratio allows for it
    table = gx.Table(columns, 8, 2,
                     rate_limiter=gx.SampleToInsertRatio(1.0, 1, 3.0, timeout=TIMEOUT))
    table.insert(one)
elif mode == "items":  # sampling allowed, but 4 distinct rows need 4 trajectories
    table = gx.Table(columns, 8, 2, rate_limiter=gx.MinSize(1, timeout=TIMEOUT))
    table.insert(one)
else:  # one trajectory; sampling needs two
    table = gx.Table(columns, 8, 2, rate_limiter=gx.MinSize(2, timeout=TIMEOUT))
    table.insert(one)
key = jax.random.key(0)

def scanned(state, keys):
    def body(state, k):
        state, batch = table.sample(state, k, 4)
        return state, batch.keys
    return jax.lax.scan(body, state, keys)

def blocked_call():
    if mode == "insert":
        table.insert(one)
    elif mode == "insert_step":
        table.insert_step({"x": np.float32(1)})
    elif mode == "writer":
        with table.writer() as w:
            w.append({"x": np.float32(1)})
            w.end_episode()
    elif mode == "insert_batch":  # its first row already waits: nothing goes in
        table.insert_batch({"x": np.ones((2, 1), np.float32)}, np.array([1, 1]))
    elif mode == "ratio":
        table.sample(key, 4, numpy=True)
    elif mode == "items":
        table.sample(key, 4, replace=False)
    elif mode == "eager":
        table.sample(key, 4)
    elif mode == "numpy":  # no XLA program: the native call waits itself
        table.sample(key, 4, numpy=True)
    elif mode == "jit":
        state, batch = jax.jit(lambda s, k: table.sample(s, k, 4))(table.state(), key)
        jax.block_until_ready(batch.keys)
    elif mode == "scan":
        state, keys = jax.jit(scanned)(table.state(), jax.random.split(key, 3))
        jax.block_until_ready(keys)

hits = []
if sender == "noted":  # a handler that only takes note
    signal.signal(signal.SIGINT, lambda *_: hits.append(time.monotonic()))

def send():
    while table._native.waiting == 0:
        time.sleep(0.005)
    result["sent"] = time.monotonic()
    if sender == "raise_signal":
        signal.raise_signal(signal.SIGINT)
    else:
        os.kill(os.getpid(), signal.SIGINT)

result = {}
threading.Thread(target=send, daemon=True).start()
try:
    blocked_call()
    result["outcome"] = "returned"
except KeyboardInterrupt:
    result["outcome"] = "KeyboardInterrupt"
except Exception as e:
    result["outcome"] = type(e).__name__
    result["kind"] = gx.table_error(e)
result["seconds"] = time.monotonic() - result["sent"]
result["handler_ran"] = bool(hits)
# The table is as it was: the call that gave way changed nothing, and works now.
stats = table.stats()
result["consistent"] = (stats["size"] == (2 if mode in INSERTS else 1)
                        and stats["writers_in_flight"] == 0 and stats["samples"] == 0
                        and table._native.waiting == 0)
if mode in INSERTS:
    table.sample(key, 1)  # lets one more insert in
    table.insert(one)
elif mode in ("ratio", "items"):
    for _ in range(3):
        table.insert(one)
    blocked_call()
else:
    table.insert(one)
    blocked_call()
result["usable"] = True
print(json.dumps(result))
"""


def _run(tmp_path, mode: str, sender: str, timeout: float = TIMEOUT) -> dict:
    script = tmp_path / "blocked.py"
    script.write_text(textwrap.dedent(PROGRAM))
    done = subprocess.run([sys.executable, str(script), f"{mode}:{sender}", str(timeout)],
                          capture_output=True, text=True, timeout=timeout + 60)
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("mode, sender", [("insert", "kill"), ("eager", "raise_signal"),
                                          ("numpy", "kill"), ("jit", "kill"),
                                          ("scan", "raise_signal"), ("insert_step", "kill"),
                                          ("writer", "raise_signal"), ("insert_batch", "kill"),
                                          ("ratio", "kill"), ("items", "raise_signal")])
def test_ctrl_c_ends_a_blocked_call_within_a_second(tmp_path, mode, sender):
    result = _run(tmp_path, mode, sender)
    assert result["outcome"] == "KeyboardInterrupt", result
    assert result["seconds"] < 1.0, result
    assert result["consistent"] and result["usable"], result


def test_a_handler_that_does_not_raise_lets_an_eager_call_wait_on(tmp_path):
    result = _run(tmp_path, "insert", "noted", timeout=2)
    assert result["handler_ran"], result
    assert result["outcome"] == "TableTimeoutError" and result["kind"] == "timeout", result
    assert result["seconds"] > 1.0, result  # waited on, to the limiter's 2 s
    assert result["consistent"] and result["usable"], result


def test_a_handler_that_does_not_raise_fails_a_compiled_call_as_interrupted(tmp_path):
    result = _run(tmp_path, "jit", "noted")
    assert result["handler_ran"], result
    assert result["kind"] == "interrupted", result
    assert result["seconds"] < 1.0, result
    assert result["consistent"] and result["usable"], result
