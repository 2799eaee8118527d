"""Smoke test of scripts/bench_torchrl.py --quick (gearjax against TorchRL in
one process): it runs, checks every sampled window on both sides, times every
form of every row and writes its results.

It needs a Python where torchrl (with its C++ extension) and gearjax import:
this test's own, or the one BENCH_TORCHRL_PYTHON names, e.g.

    bash scripts/bench_torchrl_setup.sh
    BENCH_TORCHRL_PYTHON=.venv-torchrl/bin/python pytest tests/test_bench_torchrl.py

Elsewhere (CI's environment has no torchrl) it is skipped, saying why."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import cpu_only_env

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "bench_torchrl.py"
PROBE = "import torchrl, torchrl._torchrl, tensordict, gearjax"


def _bench_python(tmp_path: Path) -> tuple[str, dict[str, str]]:
    """The interpreter to run the benchmark with and its environment (JAX on
    the CPU, no GPU visible), or a skip saying why there is none."""
    named = os.environ.get("BENCH_TORCHRL_PYTHON")
    if named:
        python = os.path.abspath(named) if Path(named).exists() else named
        # Another interpreter: none of this one's packages on its path.
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        env |= {"JAX_PLATFORMS": "cpu", "CUDA_VISIBLE_DEVICES": ""}
    else:
        python, env = sys.executable, cpu_only_env()
    probe = subprocess.run([python, "-P", "-c", PROBE], capture_output=True, text=True,
                           env=env, cwd=tmp_path, timeout=300)
    if probe.returncode != 0:
        why = (probe.stderr.strip().splitlines() or ["no output"])[-1]
        pytest.skip(f"torchrl (with its C++ extension) and gearjax are not importable in "
                    f"{python} ({why}); bash scripts/bench_torchrl_setup.sh makes "
                    f".venv-torchrl, and BENCH_TORCHRL_PYTHON=.venv-torchrl/bin/python runs "
                    f"this test with it")
    return python, env


def test_bench_torchrl_quick_checks_windows_and_times_every_form(tmp_path):
    python, env = _bench_python(tmp_path)
    out = tmp_path / "torchrl.json"
    run = subprocess.run([python, str(SCRIPT), "--quick", "--out", str(out)],
                         capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["config"]["quick"] is True
    versions = result["machine"]["versions"]
    assert versions["torchrl"] and versions["torch"] and versions["gearjax"]

    windows = result["windows"]["10^5"]
    assert windows["checks"] and all(v == "ok" for v in windows["checks"].values())
    for row in ("uniform", "prioritized", "per_step"):
        timed = windows[row]
        assert set(timed["torchrl"]) == {"default", "cache_values"}
        # Timed twice: interleaved (the row's own figures) and in runs.
        assert timed["in_runs"]["run"] == result["config"]["run"] > 1
        for timing in (timed, timed["in_runs"]):
            assert timing["torchrl_best"] in timing["torchrl"]
            assert set(timing["gearjax"]) == {"eager", "eager-numpy", "jitted", "scan"}
            for form in timing["gearjax"].values():
                assert form["median_ms"] > 0 and form["torchrl_over_gearjax"] > 0
                assert form["calls"] == timed["rounds"]
        assert timed["scan_windows_checked"] > 0 and timed["scan_bad_windows"] == 0
    insert = windows["insert"]
    assert insert["torchrl"]["extend"]["median_ms"] > 0
    assert insert["gearjax"]["insert"]["median_ms"] > 0

    transitions = result["transitions"]["10^5"]
    assert all(v == "ok" for v in transitions["checks"].values())
    for timing in (transitions["prioritized"], transitions["prioritized"]["in_runs"]):
        assert set(timing["gearjax"]) == {"eager", "eager-numpy", "jitted", "scan"}

    assert result["gpu"]["status"] == "skipped" and result["gpu"]["reason"]
    text = out.with_suffix(".txt").read_text()
    assert text.startswith("bench_torchrl:") and "--quick" in text
    assert "per-step prioritized windows" in text and "GPU section:" in text
    assert f"In runs of {result['config']['run']} calls of one form" in text
