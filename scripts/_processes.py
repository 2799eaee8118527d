"""Runs one benchmark script as several local ``jax.distributed`` processes
(shared by scripts/bench_*.py, which import it as a sibling module): each
child gets its index and a free coordinator port, runs on the CPU backend,
and prints its result as JSON on its last stdout line."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from typing import Callable


def free_port() -> int:
    """A TCP port on 127.0.0.1 free at the time of asking."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def run_processes(script: str, processes: int, argv: Callable[[int, int], list[str]],
                  timeout: float) -> list[dict]:
    """Starts `processes` copies of `script` with the arguments argv(index,
    port), all at once, and returns each one's last stdout line as JSON, in
    index order; exits naming the exit status if one fails."""
    port = free_port()
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    children = [subprocess.Popen([sys.executable, "-P", script, *argv(i, port)], env=env,
                                 stdout=subprocess.PIPE, text=True) for i in range(processes)]
    results = []
    for child in children:
        out, _ = child.communicate(timeout=timeout)
        if child.returncode != 0:
            raise SystemExit(f"a benchmark process failed (exit {child.returncode})")
        results.append(json.loads(out.strip().splitlines()[-1]))
    return results
