"""Runs a test body in N local JAX processes joined by jax.distributed (CPU,
gloo collectives), each under a hard timeout, and returns what each process
returned.

A body is a function of ``multihost_bodies`` taking (process index, number of
processes, a scratch directory, **kwargs) and returning something JSON-able.
Every process prints its result as the last line of its output; a process
that fails, hangs past the timeout or dies by a signal fails the test with
every process's output attached. Nothing is left running: the whole process
group is killed on the way out.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from conftest import cpu_only_env, pythonpath

HERE = Path(__file__).resolve().parent
RESULT_MARK = "MULTIHOST-RESULT "


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ProcessesFailed(AssertionError):
    pass


def run(body: str, processes: int, tmp_path: Path, timeout: float = 120.0,
        expect_failure: frozenset[int] = frozenset(), env: dict[str, str] | None = None,
        **kwargs: Any) -> list[Any]:
    """Runs ``multihost_bodies.<body>`` in ``processes`` processes; returns
    each one's result (None for those in ``expect_failure``, which may end any
    way but must end within the timeout)."""
    port = free_port()
    # CPU processes on any machine (a GPU machine's one GPU cannot be shared
    # between NCCL ranks): gloo collectives, host tables.
    env = cpu_only_env(PYTHONPATH=pythonpath(str(HERE)),
                       XLA_FLAGS="--xla_force_host_platform_device_count=1", **(env or {}))
    procs = []
    logs = []
    for i in range(processes):
        log = open(tmp_path / f"process-{i}.log", "w+")
        logs.append(log)
        procs.append(subprocess.Popen(
            [sys.executable, "-m", "multihost_bodies", body, str(i), str(processes), str(port),
             str(tmp_path), json.dumps(kwargs)],
            stdout=log, stderr=subprocess.STDOUT, env=env, cwd=str(tmp_path),
            start_new_session=True))
    deadline = time.monotonic() + timeout
    # Wait for the processes expected to succeed; those expected to fail (a
    # killed or frozen one) get a short grace once the others are done.
    expected = [p for i, p in enumerate(procs) if i not in expect_failure] or procs
    try:
        for p in expected:
            p.wait(timeout=max(0.1, deadline - time.monotonic()))
        for p in procs:
            p.wait(timeout=max(0.1, min(deadline, time.monotonic() + 5) - time.monotonic()))
    except subprocess.TimeoutExpired:
        pass
    finally:
        hung = [i for i, p in enumerate(procs) if p.poll() is None]
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
    outputs = []
    for log in logs:
        log.seek(0)
        outputs.append(log.read())
        log.close()
    report = "\n".join(f"--- process {i} (exit {p.returncode}) ---\n{out[-4000:]}"
                       for i, (p, out) in enumerate(zip(procs, outputs)))
    if hung and not set(hung) <= expect_failure:
        raise ProcessesFailed(f"processes {hung} still ran after {timeout} s\n{report}")
    results = []
    for i, (p, out) in enumerate(zip(procs, outputs)):
        if i in expect_failure:
            results.append(None)
            continue
        if p.returncode != 0:
            raise ProcessesFailed(f"process {i} exited with {p.returncode}\n{report}")
        lines = [line for line in out.splitlines() if line.startswith(RESULT_MARK)]
        if not lines:
            raise ProcessesFailed(f"process {i} returned nothing\n{report}")
        results.append(json.loads(lines[-1][len(RESULT_MARK):]))
    return results
