"""The Reverb side of the benchmarks that compare with Reverb (bench_writer.py,
bench_dispatch.py): Reverb needs TensorFlow and numpy < 2, so it runs in its
own virtual environment, as a worker process running the benchmark script
itself with ``--reverb-worker``; this module is the parent's handle on that
process and the worker's way of replying (one JSON line per command)."""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

# Lines of the worker's stdout that carry a reply start with this (TensorFlow
# or Reverb may print other lines).
REPLY = "BENCH "


def reply(message: dict) -> None:
    sys.stdout.write(REPLY + json.dumps(message) + "\n")
    sys.stdout.flush()


class ReverbWorker:
    """The parent's handle on a worker process in Reverb's environment."""

    def __init__(self, python: str, script: str, data_path: str, timeout: float, log_path: str):
        self.timeout = timeout
        self.log_path = log_path
        env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
        env.pop("PYTHONPATH", None)  # the worker must not see this environment's packages
        self._log = open(log_path, "w")
        self.process = subprocess.Popen(
            [python, script, "--reverb-worker", "--data", data_path],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._log, text=True,
            env=env, cwd=tempfile.gettempdir())
        # A reader thread, so that a hung or dead worker is a timeout, not a hang.
        self._lines: queue.Queue = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        try:
            self.info = self._reply()
        except RuntimeError:
            self.close()
            raise

    def _read(self) -> None:
        for line in self.process.stdout:
            if line.startswith(REPLY):
                self._lines.put(json.loads(line[len(REPLY):]))
        self._lines.put(None)  # end of output: the worker exited

    def _reply(self) -> dict:
        try:
            message = self._lines.get(timeout=self.timeout)
        except queue.Empty:
            raise RuntimeError(f"no reply from the Reverb worker in {self.timeout:.0f} s; "
                               f"{self.log_tail()}") from None
        if message is None:
            raise RuntimeError(f"the Reverb worker exited (status {self.process.wait()}); "
                               f"{self.log_tail()}")
        if "error" in message:
            raise RuntimeError(f"the Reverb worker: {message['error']}")
        return message

    def log_tail(self, lines: int = 15) -> str:
        self._log.flush()
        text = Path(self.log_path).read_text(errors="replace").strip().splitlines()
        return "its stderr ends: " + " | ".join(text[-lines:]) if text else "no stderr"

    def ask(self, command: str) -> dict:
        self.process.stdin.write(command + "\n")
        self.process.stdin.flush()
        return self._reply()

    def run(self, passes: int) -> float:
        return self.ask(f"run {passes}")["seconds"]

    def close(self) -> None:
        if self.process.poll() is None:
            try:
                self.process.stdin.write("quit\n")
                self.process.stdin.close()
                self.process.wait(timeout=60)
            except (OSError, subprocess.TimeoutExpired):
                self.process.kill()  # this worker only, which we started
                self.process.wait()
        self._log.close()
