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


def _bench_module():
    """scripts/bench_torchrl.py imported here (its helpers need no torchrl),
    sys.path left as it was (the module puts its folder there too)."""
    path = list(sys.path)
    sys.path.insert(0, str(SCRIPT.parent))
    try:
        import bench_torchrl
    finally:
        sys.path[:] = path
    return bench_torchrl


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
        assert set(timed["torchrl"]) == {"default", "cache_values", "cache_values (1 thread)"}
        # Timed twice: interleaved (the row's own figures) and in runs.
        assert timed["in_runs"]["run"] == result["config"]["run"] > 1
        for timing in (timed, timed["in_runs"]):
            assert timing["torchrl_best"] in timing["torchrl"]
            assert set(timing["gearjax"]) == {"eager", "eager-numpy", "jitted",
                                              "jitted-no-table", "scan"}
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
        assert set(timing["torchrl"]) == {"default", "default (1 thread)"}
        assert set(timing["gearjax"]) == {"eager", "eager-numpy", "jitted",
                                          "jitted-no-table", "scan"}

    assert result["gpu"]["status"] == "skipped" and result["gpu"]["reason"]
    text = out.with_suffix(".txt").read_text()
    assert text.startswith("bench_torchrl:") and "--quick" in text
    assert "per-step prioritized windows" in text and "GPU section:" in text
    assert "| jitted, no table (the floor) |" in text
    assert f"In runs of {result['config']['run']} calls of one form" in text


def test_bench_torchrl_gpu_only_runs_the_gpu_section_alone(tmp_path):
    """--gpu-only (scripts/gpu_check.sh --stage torchrl): no CPU section; the
    GPU section runs, or the script fails saying why (here: no GPU), its
    results written either way."""
    python, env = _bench_python(tmp_path)
    out = tmp_path / "gpu.json"
    run = subprocess.run([python, "-P", str(SCRIPT), "--gpu-only", "--quick", "--out", str(out)],
                         capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600)
    result = json.loads(out.read_text())
    assert result["config"]["gpu_only"] and result["windows"] == {} == result["transitions"]
    gpu = result["gpu"]
    assert "GPU section" in out.with_suffix(".txt").read_text()
    if gpu["status"] == "ok":
        assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    else:
        assert run.returncode == 1 and "the GPU section did not run" in run.stderr
        assert gpu["reason"] in run.stderr


ONE_THREAD_CHECK = """
import sys
sys.path.insert(0, sys.argv[1])
import torch
import bench_torchrl
torch.set_num_threads(2)
seen = []
assert bench_torchrl.one_thread(lambda i: seen.append(torch.get_num_threads()) or i)(7) == 7
assert seen == [1] and torch.get_num_threads() == 2, (seen, torch.get_num_threads())

def fails(i):
    raise KeyError(i)
try:
    bench_torchrl.one_thread(fails)(3)
    raise AssertionError("the failure was not raised")
except KeyError:
    pass
assert torch.get_num_threads() == 2
print("one_thread ok")
"""


def test_a_one_thread_form_runs_with_one_torch_thread_and_restores_the_setting(tmp_path):
    """one_thread (TorchRL's one-thread configurations), in the benchmark's
    Python: the call sees one torch thread; the process's setting is back
    after it, also after a failure."""
    python, env = _bench_python(tmp_path)
    check = tmp_path / "one_thread.py"
    check.write_text(ONE_THREAD_CHECK)
    run = subprocess.run([python, "-P", str(check), str(SCRIPT.parent)], capture_output=True,
                         text=True, env=env, cwd=tmp_path, timeout=300)
    assert run.returncode == 0 and "one_thread ok" in run.stdout, run.stdout + run.stderr


def test_the_report_of_a_gpu_section_that_ran_shows_both_timings():
    """The report's GPU part, from a made-up result (no GPU runs it here)."""
    bench_torchrl = _bench_module()
    timed = {"median_ms": 0.5, "torchrl_over_gearjax": 2.0}
    timing = {"torchrl": {"cuda trees": {"median_ms": 1.0}}, "torchrl_best": "cuda trees",
              "gearjax": {f: timed for f in bench_torchrl.GJ_FORMS}}
    result = {"machine": {"cpu_model": "cpu", "cores": 16, "total_memory_bytes": 2**37,
                          "python": "3.12", "versions": {"torchrl": "0.14.1"}},
              "config": {"scan_steps": 100, "quick": False, "run": 20},
              "windows": {}, "transitions": {}, "load_average_start": (0, 0, 0),
              "load_average_end": (0, 0, 0),
              "gpu": {"status": "ok", "devices": ["cuda:0"], "torch_device": "H200",
                      "transitions": 10**7,
                      "prioritized": {**timing, "in_runs": {"run": 20, **timing}}}}
    text = bench_torchrl.report(result)
    assert "GPU section (cuda:0; torch: H200; 10,000,000 transitions):" in text
    assert "prioritized transitions + update, interleaved: TorchRL cuda trees 1.000*" in text
    assert "the same in runs of 20: TorchRL cuda trees 1.000*" in text
    assert text.count("jitted 0.500 ms (x2.0)") == 2 and "| workload |" not in text


def test_the_no_table_form_returns_what_the_jitted_form_returns():
    """The floor form (outputs_like) makes arrays of the jitted step's shapes,
    in its tree, with dtypes JAX can make, and no table call."""
    import jax
    import numpy as np

    import gearjax as gx
    bench_torchrl = _bench_module()
    table = gx.Table({"obs": gx.Column((3,), "float32")}, capacity=4, max_length=8,
                     placement="host")
    try:
        table.insert({"obs": np.ones((8, 3), np.float32)}, priority=1.0)
        step = bench_torchrl.prioritized_step(table, np.ones(bench_torchrl.BATCH, np.float32), 2)
        key = jax.random.key(3)
        _, shapes = jax.eval_shape(step, table.state(), key)
        def no_table(k):
            return bench_torchrl.outputs_like(shapes, k)

        out = jax.jit(no_table)(key)
        assert jax.tree.structure(out) == jax.tree.structure(shapes)
        for got, want in zip(jax.tree.leaves(out), jax.tree.leaves(shapes)):
            assert got.shape == want.shape
            assert got.dtype == jax.dtypes.canonicalize_dtype(want.dtype)
        word = np.asarray(jax.random.key_data(key)).ravel()[-1]
        assert word != 0  # a fill that tells itself from zeros
        assert np.asarray(out["batch"].start).ravel()[0] == word.astype(np.int32)
        # No table call in its program: only the sample has gearjax's custom call.
        assert "gearjax" in str(jax.make_jaxpr(step)(table.state(), key))
        assert "gearjax" not in str(jax.make_jaxpr(no_table)(key))
    finally:
        table.close()
