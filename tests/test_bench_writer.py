"""scripts/bench_writer.py (writer throughput against insert and Reverb) still
runs: tiny sizes, every gearjax case reports a positive rate and was checked to
store what it wrote, and the Reverb case is reported as skipped, with its
reason, when there is no Reverb interpreter. Its numbers are not checked here.
With GEARJAX_REVERB_PYTHON naming a Python that has dm-reverb, the Reverb
worker is run too."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import pythonpath

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "bench_writer.py"
GEARJAX_CASES = {"insert", "writer", "writer_split", "writer_jax"}
TINY = ["--episodes", "2", "--length", "50", "--repeats", "2", "--min-seconds", "0"]


def check_gearjax_cases(result: dict) -> None:
    assert result["step_bytes"] == 4 * (17 + 6 + 1)
    assert GEARJAX_CASES <= set(result["cases"])
    for name in GEARJAX_CASES:
        case = result["cases"][name]
        assert case["steps"] == 2 * 50 * case["passes"]
        assert len(case["seconds"]) == 2
        assert case["steps_per_second"] > 0 and case["gb_per_second"] > 0
        assert case["check"]["verified"], case["check"]
    # 50 steps split into pieces of 5 that repeat 4 steps: 1 + 45 pieces.
    assert result["cases"]["writer_split"]["check"]["pieces_of_last_episode"] == 46
    assert len(result["load_average_start"]) == 3


def test_gearjax_cases_run_and_reverb_is_skipped_with_a_reason(tmp_path):
    out = tmp_path / "results" / "writer.json"
    # cwd is not the repository: the script must not depend on it.
    done = subprocess.run([sys.executable, str(SCRIPT), *TINY, "--out", str(out)],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path,
                          env={**os.environ, "PYTHONPATH": pythonpath()})  # not this tree
    assert done.returncode == 0, done.stderr
    result = json.loads(out.read_text())
    check_gearjax_cases(result)
    reverb = result["cases"]["reverb_trajectory_writer"]
    assert reverb["skipped"] is True and "--reverb-python" in reverb["reason"]
    assert out.with_suffix(".txt").read_text() == done.stdout
    assert "skipped" in done.stdout


def load_script():
    """The script as a module; its sibling modules (scripts/_machine.py) are
    found as when it runs as a script."""
    spec = importlib.util.spec_from_file_location("bench_writer", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(SCRIPT.parent))
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(SCRIPT.parent))
    return module


def test_a_missing_reverb_interpreter_is_skipped_not_faked(tmp_path):
    missing = tmp_path / "no-such-venv" / "bin" / "python"
    result = load_script().main([*TINY, "--out", str(tmp_path / "w.json"),
                                 "--reverb-python", str(missing)])
    reverb = result["cases"]["reverb_trajectory_writer"]
    assert reverb == {"skipped": True, "reason": reverb["reason"]}
    assert str(missing) in reverb["reason"]
    check_gearjax_cases(result)


@pytest.mark.skipif(not os.environ.get("GEARJAX_REVERB_PYTHON"),
                    reason="set GEARJAX_REVERB_PYTHON to a Python with dm-reverb and "
                           "tensorflow to run the Reverb worker")
def test_reverb_worker_writes_the_same_steps(tmp_path):
    result = load_script().main([*TINY, "--out", str(tmp_path / "w.json"),
                                 "--reverb-python", os.environ["GEARJAX_REVERB_PYTHON"]])
    reverb = result["cases"]["reverb_trajectory_writer"]
    assert "skipped" not in reverb, reverb
    assert reverb["check"] == {"verified": True, "table_size": 2, "item_steps": 50,
                               "item_matches_an_episode": True}
    assert reverb["steps_per_second"] > 0 and reverb["versions"]["dm-reverb"]
