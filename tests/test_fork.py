"""A forked child and the tables it inherits: every call on an inherited table
fails at once with a RuntimeError that names the fork (it once waited forever
in 25 of 30 children forked while other threads were inside the table: their
locks stay held in the child); close() and dropping it are fine, tables the
child makes work, and the child exits normally. Runs in a subprocess, which
forks while its threads insert."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

PROGRAM = """
import json, os, sys, threading, time
import numpy as np
import gearjax as gx

exit_how, forks = sys.argv[1], int(sys.argv[2])
table = gx.Table({"x": gx.Column((4,), "float32")}, capacity=64, max_length=16)
stop = threading.Event()

def insert():
    while not stop.is_set():
        table.insert({"x": np.ones((8, 4), np.float32)})

threads = [threading.Thread(target=insert, daemon=True) for _ in range(3)]
for t in threads:
    t.start()
time.sleep(0.2)
outcomes = []
for _ in range(forks):
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child
        os.close(read)
        began = time.monotonic()
        result = {}
        for name, call in [("insert", lambda: table.insert({"x": np.ones((2, 4), np.float32)})),
                           ("stats", table.stats), ("contents", table.contents),
                           ("state", table.state),
                           # No XLA program (a forked child cannot run JAX's), a NumPy key.
                           ("sample", lambda: table.sample(np.zeros(2, np.uint32), 2, 1,
                                                           numpy=True))]:
            try:
                call()
                result[name] = "returned"
            except RuntimeError as e:
                result[name] = "refused" if "is a fork of it" in str(e) else str(e)
        result["seconds"] = time.monotonic() - began
        own = gx.Table({"x": gx.Column((4,), "float32")}, capacity=8, max_length=4)
        own.insert({"x": np.ones((2, 4), np.float32)})
        result["own_table"] = len(own)
        table.close()
        result["closed"] = table.closed
        os.write(write, json.dumps(result).encode())
        os.close(write)
        if exit_how == "exit":
            sys.exit(0)  # atexit handlers run in the child too
        os._exit(0)
    os.close(write)
    _, status = os.waitpid(pid, 0)
    with os.fdopen(read) as f:
        outcome = json.loads(f.read() or "{}")
    outcome["code"] = os.waitstatus_to_exitcode(status)
    outcomes.append(outcome)
stop.set()
for t in threads:
    t.join()
table.insert({"x": np.ones((2, 4), np.float32)})  # the parent's table is untouched
print(json.dumps(outcomes))
"""


def _run(tmp_path, exit_how: str, forks: int = 30) -> list[dict]:
    script = tmp_path / "fork.py"
    script.write_text(textwrap.dedent(PROGRAM))
    done = subprocess.run([sys.executable, "-W", "ignore", str(script), exit_how, str(forks)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "leaked" not in done.stderr, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_an_inherited_table_refuses_every_call_at_once(tmp_path):
    for outcome in _run(tmp_path, "_exit"):
        assert outcome["code"] == 0, outcome
        assert [outcome[c] for c in ("insert", "stats", "contents", "state", "sample")] == \
            ["refused"] * 5, outcome
        assert outcome["seconds"] < 1.0, outcome
        assert outcome["own_table"] == 1 and outcome["closed"], outcome


def test_a_child_that_exits_normally_exits_cleanly(tmp_path):
    for outcome in _run(tmp_path, "exit", forks=5):
        assert outcome["code"] == 0, outcome
        assert outcome["insert"] == "refused", outcome
