"""The benchmark scripts still build and run (tiny sizes; their numbers are not
checked here, only that they produce results): scripts rot silently otherwise."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import cpu_only_env, pythonpath

ROOT = Path(__file__).resolve().parents[1]

# scripts/bench_core.cc is built and run by the C++ unit tests (ctest:
# BenchCore.BuildsAndRunsEveryStrategy), beside the Python install in CI.


def test_bench_sample_runs(tmp_path):
    out = tmp_path / "bench.json"
    subprocess.run([sys.executable, str(ROOT / "scripts" / "bench_sample.py"), "--repeats", "2",
                    "--cases", "A", "--scale", "0.1", "--scan-repeats", "2",
                    "--prioritized-sizes", "1000", "--out", str(out)], check=True,
                   capture_output=True, env=cpu_only_env())
    result = json.loads(out.read_text())
    assert result["settings"]["sections"] == ["per-call", "in-scan", "prioritized"]
    assert result["cases"]["A"]["systems"]["gearjax"]["status"] == "ok"
    in_scan = result["in_scan"]["A"]["systems"]
    assert in_scan["gearjax"]["status"] == in_scan["ceiling"]["status"] == "ok"
    assert result["in_scan"]["A"]["paired_ratios"]["gearjax/ceiling"] > 0
    prioritized = result["prioritized"]["1000"]["systems"]
    assert all(prioritized[name]["status"] == "ok" for name in
               ("gearjax sample+update", "gearjax sample", "gearjax update"))


def test_bench_sample_modes_times_every_mode(tmp_path):
    out = tmp_path / "modes.json"
    subprocess.run([sys.executable, str(ROOT / "scripts" / "bench_sample_modes.py"), "--sizes",
                    "200", "--batch", "16", "--repeats", "2", "--out", str(out)], check=True,
                   capture_output=True, cwd=tmp_path)
    rows = json.loads(out.read_text())["rows"]
    assert {(r["strategy"], r["mode"]) for r in rows} == {
        (s, m) for s in ("Uniform", "Timestep", "Prioritized(0.6)")
        for m in ("start", "end", "full", "no-replace", "max-times")}
    assert all(r["median_s"] > 0 for r in rows)


GPU_CHECK = ROOT / "scripts" / "gpu_check.sh"
QUICK_PLAN = ["build", "gpu_tests", "sanitize", "goal_bench", "dt_step", "summary"]


def gpu_check(*args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(GPU_CHECK), *args], capture_output=True, text=True,
                          env={**os.environ, **env})


def planned(text: str) -> list[tuple[str, int]]:
    """(stage, budget) in the order a dry run lists them."""
    return [(m[1], int(m[2])) for m in re.finditer(r"^ ?\d+\. (\w+) +(\d+) s  ", text, re.M)]


def test_gpu_check_refuses_bad_stages_and_machines_without_a_gpu(tmp_path):
    """scripts/gpu_check.sh (the one command for a lent GPU): checked here as
    far as a machine without a GPU allows: its arguments, the old stage names
    refused naming the new ones, and that a real run stops, saying why, where
    there is no GPU (on a GPU machine it would run)."""
    bad = gpu_check("--stage", "deploy", "--dry-run", str(tmp_path))
    assert bad.returncode == 2 and "unknown stage 'deploy'" in bad.stderr
    assert gpu_check("--fast").returncode == 2
    old = {"check": "full", "test": "suite", "bench": "full_bench", "bench-all": "goal_bench"}
    for stage, named in old.items():
        refused = gpu_check("--stage", stage, "--dry-run")
        assert refused.returncode == 2 and named in refused.stderr, (stage, refused.stderr)
    usage = gpu_check("--help").stdout
    assert "--stage full" in usage and "--dry-run" in usage
    if shutil.which("nvidia-smi") is None:
        none = gpu_check(str(tmp_path))
        assert none.returncode == 3 and "no NVIDIA GPU here" in none.stderr
        assert not any(tmp_path.iterdir())


def test_gpu_check_dry_run_prints_the_plan_its_commands_and_budgets(tmp_path):
    """The dry run works without a GPU and writes nothing: the default plan in
    the issue's order, each stage's budget (the header states the same) and
    commands, within 420 s; --stage full runs the whole suite and the
    full-size benchmark within one command's 600 s."""
    quick = gpu_check("--dry-run", str(tmp_path))
    assert quick.returncode == 0, quick.stderr
    plan = planned(quick.stdout)
    assert [stage for stage, _ in plan] == QUICK_PLAN
    total = sum(budget for _, budget in plan)
    assert total <= 420 and f"total budget: {total} s of 420 s" in quick.stdout
    assert not any(tmp_path.iterdir())
    text = quick.stdout
    assert "GEARJAX_CUDA_ARCHITECTURES=" in text and "pip wheel" in text
    # The two tests that crashed the first GPU run come before the rest of test_gpu.py.
    tests = [line for line in text.splitlines() if "-m pytest" in line]
    assert "test_min_size_times_out_with_a_clear_error" in tests[0]
    assert "test_samples_whose_results_are_unused_still_feed_the_rate_limiter" in tests[0]
    assert "test_every_cuda_error_path" in tests[0] and tests[1].endswith(" tests/test_gpu.py")
    assert "--tool memcheck" in tests[2] and "--tool racecheck" in tests[3]
    assert "bench_gpu.py --quick" in text and "bench_dt_step.py --sizes reference" in text
    assert text.index("bench_gpu.py --quick") < text.index("gpu_summary.py")
    usage = gpu_check("--help").stdout
    for stage, budget in plan:
        assert re.search(rf"^  {stage} +{budget}  ", usage, re.M), stage
    assert re.search(rf"^  total +{total}  of 420", usage, re.M)

    full = gpu_check("--stage", "full", "--dry-run")
    plan = planned(full.stdout)
    assert [stage for stage, _ in plan] == ["build", "suite", "full_bench", "summary"]
    assert sum(budget for _, budget in plan) <= 600
    suite = [line for line in full.stdout.splitlines() if "-m pytest" in line]
    assert suite[0].endswith(" tests") and "-n 12" in suite[0]  # the whole suite
    assert "bench_gpu.py --with-1e7" in full.stdout

    plugin = gpu_check("--plugin", "dist", "--stage", "build", "--dry-run").stdout
    assert "gearjax_cuda13_plugin-" in plugin and "pip wheel" not in plugin
    longer = gpu_check("--stage", "full_bench", "--dry-run", GPU_CHECK_BUDGET_FULL_BENCH="540")
    assert planned(longer.stdout) == [("full_bench", 540), ("summary", 10)]

    # TorchRL's GPU comparison: in no plan, a command of its own after a build.
    torchrl = gpu_check("--stage", "build", "--stage", "torchrl", "--dry-run")
    plan = planned(torchrl.stdout)
    assert [stage for stage, _ in plan] == ["build", "torchrl", "summary"]
    assert sum(budget for _, budget in plan) <= 600
    assert "torchrl" not in [stage for stage, _ in planned(full.stdout)]
    assert "torch_extension.py torchrl torchrl._torchrl" in torchrl.stdout
    assert "cuda_segment_tree.cu --cuda --check CudaSumSegmentTreeFp32" in torchrl.stdout
    assert "bench_torchrl.py --gpu-only" in torchrl.stdout
    assert re.search(r"^  torchrl +300  ", usage, re.M)


def test_gpu_diagnose_tells_where_rate_limiter_timeouts_crash(tmp_path):
    """gpu_diagnose.py --only timeouts (gpu_check.sh's first GPU test): each
    case in a child process; on the CPU every case raises its timeout or is
    served, as the tests say it must."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("gpu_diagnose",
                                                  ROOT / "scripts" / "gpu_diagnose.py")
    diagnose = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(diagnose)
    # Each case ends as it should, and the served one waited for its insert.
    rc, out = diagnose.timeout_case("cpu", "host", "wait, served", seconds=90)
    assert rc == 0 and re.search(r"^served after [2-9]\.\d s$", out, re.M), out
    for case in ("no wait, timeout", "wait, timeout"):
        rc, out = diagnose.timeout_case("cpu", "host", case, seconds=90)
        assert rc == 0 and "raised timeout" in out.splitlines(), (case, out)
    # A case that runs past its limit says so, with what it wrote by then.
    rc, out = diagnose.timeout_case("cpu", "host", "wait, served", seconds=0.5)
    assert rc == -999 and out.startswith("did not end in 0.5 s"), out
    # The script, --only timeouts: that check alone, a line per case.
    run = subprocess.run([sys.executable, "-P", str(ROOT / "scripts" / "gpu_diagnose.py"),
                          "--only", "timeouts"], capture_output=True, text=True, timeout=120,
                         env=cpu_only_env())
    assert run.returncode == 0, run.stdout + run.stderr
    lines = sorted(line for line in run.stdout.splitlines() if "rate-limited sample" in line)
    assert len(lines) == 3 and all(line.endswith(": ok") for line in lines), run.stdout
    assert lines[2].startswith("a rate-limited sample on cpu, a host table, wait, timeout")
    assert "discarded results" not in run.stdout


def test_the_crash_report_prints_native_frames_then_python_s(native_testing):
    """The test-only crash report (xla_ffi/testing/crash_report.cc), which
    gpu_diagnose.py installs in its children: a SIGSEGV prints the signal and
    the native frames, then faulthandler's Python frames, and the process
    still dies of the signal."""
    crash = ("import faulthandler, ctypes\n"
             "faulthandler.enable()\n"
             "from gearjax import _gearjax\n"
             "assert _gearjax.testing.install_crash_report()\n"
             "assert not _gearjax.testing.install_crash_report()  # once\n"
             "ctypes.string_at(0)\n")
    # -P: the source tree (no compiled extension) stays off sys.path.
    run = subprocess.run([sys.executable, "-P", "-c", crash], capture_output=True, text=True,
                         timeout=120, env={**os.environ, "PYTHONPATH": pythonpath()})
    assert run.returncode == -11, run.stderr
    report = run.stderr.index("gearjax crash report: signal 11 at address (nil)")
    frames = re.findall(r"\(.*\+0x[0-9a-f]+\)\[0x[0-9a-f]+\]", run.stderr[report:])
    assert len(frames) >= 3, run.stderr  # native frames: module(symbol+offset)[address]
    assert run.stderr.index("Fatal Python error: Segmentation fault") > report
    assert "in string_at" in run.stderr


def test_gearjax_crash_report_1_installs_it_in_each_pytest_process(native_testing, tmp_path):
    """GEARJAX_CRASH_REPORT=1, which gpu_check.sh's test stages set: conftest.py
    installs the crash report in the pytest process (and in each xdist worker)."""
    (tmp_path / "test_installed.py").write_text(
        "from gearjax import _gearjax\n\n"
        "def test_installed():\n"
        "    assert not _gearjax.testing.install_crash_report()  # conftest did\n")
    shutil.copy(ROOT / "tests" / "conftest.py", tmp_path)
    shutil.copy(ROOT / "tests" / "reference.py", tmp_path)
    env = {**os.environ, "PYTHONPATH": pythonpath(str(tmp_path))}
    args = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
            str(tmp_path / "test_installed.py")]
    on = subprocess.run(args, capture_output=True, text=True, timeout=120, cwd=tmp_path,
                        env={**env, "GEARJAX_CRASH_REPORT": "1"})
    assert on.returncode == 0, on.stdout + on.stderr
    off = subprocess.run(args, capture_output=True, text=True, timeout=120, cwd=tmp_path,
                         env={k: v for k, v in env.items() if k != "GEARJAX_CRASH_REPORT"})
    assert off.returncode == 1 and "assert not True" in off.stdout, off.stdout


def test_gpu_check_names_tests_that_exist(tmp_path):
    """The tests the plan names (the first ones by id, the sanitizer's subsets
    by -k) are collected here: a renamed test would make a stage on the GPU
    select nothing."""
    text = gpu_check("--dry-run").stdout
    ids = sorted(set(re.findall(r"tests/test_\w+\.py::\w+", text)))
    subsets = re.findall(r" -k '([^']+)' ", text)
    assert len(ids) == 3 and len(subsets) == 2

    def collected(*selections: list[str]) -> list[int]:
        """How many tests pytest collects for each selection (its arguments):
        one interpreter runs them all, pytest.main once a selection (so -k is
        pytest's own), importing jax and the test modules once, not once each."""
        script = (
            "import json, sys, pytest\n"
            "class Count:\n"
            "    def pytest_collection_finish(self, session):\n"
            "        self.n = len(session.items)  # after -k deselected\n"
            "counts = []\n"
            "for args in json.loads(sys.argv[1]):\n"
            "    count = Count()\n"
            "    code = pytest.main(['--collect-only', '-q', '-p', 'no:cacheprovider',\n"
            "                        '--rootdir', sys.argv[2], *args], plugins=[count])\n"
            "    counts.append(count.n if code in (0, 5) else f'exit {int(code)}')\n"
            "print(json.dumps(counts))\n")
        done = subprocess.run([sys.executable, "-c", script, json.dumps(selections), str(ROOT)],
                              capture_output=True, text=True, cwd=tmp_path)
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
        counts = json.loads(done.stdout.strip().splitlines()[-1])
        assert all(isinstance(n, int) for n in counts), done.stdout[-4000:] + str(counts)
        return counts

    first, *by_subset = collected(
        [str(ROOT / i.split("::")[0]) + "::" + i.split("::")[1] for i in ids],
        *(["-k", subset, str(ROOT / "tests" / "test_gpu.py")] for subset in subsets))
    assert first == 3
    for subset, n in zip(subsets, by_subset, strict=True):
        assert n >= 4, subset


def test_gpu_check_records_each_stage_and_always_ends_with_the_summary(tmp_path):
    """A run on a made-up GPU (nvidia-smi and python stand-ins): each stage's
    start and end in gpu_check_stages.jsonl, a stage that outlives its budget
    stopped and recorded as a timeout, a machine without compute-sanitizer
    recorded as refusing it, and the summary at the end; after a failed build
    nothing else runs."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "nvidia-smi").write_text(
        '#!/bin/bash\ncase "$*" in\n  *compute_cap*noheader*) echo 9.0 ;;\n'
        '  *) echo "NVIDIA H100 80GB HBM3, 580.159.04, 81559 MiB, 9.0" ;;\nesac\n')
    (bin_dir / "python").write_text(
        f'#!/bin/bash\ncase "$*" in\n  *gpu_summary.py*) exec {sys.executable} "$@" ;;\n'
        '  *bench_dt_step.py*) sleep 60 ;;\n'
        '  *"pip wheel"*) [ -z "${FAIL_BUILD:-}" ] || exit 1 ;;\nesac\necho "ran: $*"\n')
    for tool in bin_dir.iterdir():
        tool.chmod(0o755)
    env = {"PATH": f"{bin_dir}:{os.environ['PATH']}", "PYTHON": "python",
           "TMPDIR": str(tmp_path), "GPU_CHECK_BUDGET_DT_STEP": "10"}
    results = tmp_path / "results"
    run = gpu_check(str(results), **env)
    assert run.returncode == 1, run.stdout + run.stderr
    lines = [json.loads(line) for line in (results / "gpu_check_stages.jsonl").open()]
    ends = {e["stage"]: e for e in lines if e["outcome"] != "started"}
    assert [e["stage"] for e in lines if e["outcome"] == "started"] == QUICK_PLAN[:-1]
    assert {name: e["outcome"] for name, e in ends.items()} == {
        "build": "ok", "gpu_tests": "ok", "sanitize": "refused", "goal_bench": "ok",
        "dt_step": "timeout"}
    assert 4 <= ends["dt_step"]["seconds"] <= 9 and ends["dt_step"]["budget"] == 10
    assert "tests/test_gpu.py" in (results / "gpu_check_gpu_tests.log").read_text()
    summary = (results / "gpu_check_summary.txt").read_text()
    assert "dt_step    TIMEOUT" in summary and "NVIDIA H100" in summary

    failed = gpu_check(str(results), FAIL_BUILD="1", **env)
    assert failed.returncode == 1
    lines = [json.loads(line) for line in (results / "gpu_check_stages.jsonl").open()]
    assert [e["outcome"] for e in lines[-6:]] == ["started", "fail"] + ["skipped"] * 4


def test_gpu_summary_shows_stages_and_goal_figures_on_one_screen(tmp_path):
    """scripts/gpu_summary.py over a made-up results folder: each stage's
    outcome against its budget with its test and sanitizer counts (a stage a
    killed run left "started" reads "cut"), every goal figure against its
    goal, "-" for what was not measured; smoke results are not figures."""
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import gpu_summary
    finally:
        sys.path.pop(0)
    stage = '{{"stage": "{}", "outcome": "{}", "exit": {}, "seconds": {}, "budget": {}}}\n'
    (tmp_path / "gpu_check_stages.jsonl").write_text(
        '{"stage": "test", "exit": 1, "seconds": 240}\n'  # before the outcome field
        + stage.format("build", "started", 0, 0, 60) + stage.format("build", "ok", 0, 21, 60)
        + stage.format("gpu_tests", "fail", 1, 80, 115)
        + stage.format("sanitize", "ok", 0, 70, 90)
        + stage.format("goal_bench", "timeout", 124, 85, 85)
        + stage.format("dt_step", "started", 0, 0, 50) + '{"stage": "dt_st')  # killed here
    (tmp_path / "gpu_check_gpu_tests_first.xml").write_text(
        '<testsuites><testsuite tests="3" failures="1" errors="0" skipped="0"/></testsuites>')
    (tmp_path / "gpu_check_gpu_tests.xml").write_text(
        '<testsuites><testsuite tests="10" failures="1" errors="0" skipped="2"/></testsuites>')
    (tmp_path / "gpu_check_test.xml").write_text(
        '<testsuites><testsuite tests="4" failures="0" errors="0" skipped="0"/></testsuites>')
    (tmp_path / "gpu_check_sanitize.log").write_text(
        "--- compute-sanitizer --tool memcheck\n========= ERROR SUMMARY: 0 errors\n"
        "--- compute-sanitizer --tool racecheck\n========= RACECHECK SUMMARY: 0 hazards\n")
    bench = {"smoke": False, "per_step": {
        "device_B32": {"scan_step_over_pure_jax": 1.1, "call_over_pure_jax": 1.3},
        "device_B1024": {"scan_step_over_pure_jax": 1.5}},
        "gather_host": [{"window_bytes": 4096, "batch": 1024, "of_ceiling": 0.8}],
        "big": {"table_bytes": 100, "gpu_memory_bytes": 80},
        "host_selected": {"placement": "device",
                          "Uniform (GPU-selected)": {"scan_step_s": 1e-5, "over_gpu_selected": 1},
                          "TopK(64)": {"scan_step_s": 3e-5, "over_gpu_selected": 3.0},
                          "Uniform, cut='full'": {"scan_step_s": 2e-5, "over_gpu_selected": 2.0}}}
    (tmp_path / "bench_gpu_NVIDIA_H100.json").write_text(json.dumps(bench))
    text = gpu_summary.report(tmp_path)
    lines = text.splitlines()
    assert len(lines) <= 25 and max(map(len, lines)) <= 100  # one screen
    stage = {line.split()[0]: " ".join(line.split()[1:]) for line in lines[2:8]}
    assert stage["gpu_tests"].startswith("FAIL 1 80/115 9 passed, 2 failed"), text
    assert stage["test"].startswith("FAIL 1 240 4 passed, 0 failed"), text
    assert stage["build"] == "ok 21/60" and stage["goal_bench"] == "TIMEOUT 85/85", text
    assert stage["dt_step"] == "cut 0/50", text
    assert "memcheck 0, racecheck 0" in text
    row = {line[:44].strip(): line[44:].split() for line in lines}
    assert row["sample in scan, 32 x 1 KiB, device table"][0] == "1.1"
    assert row["sample in scan, 32 x 1 KiB, device table"][-1] == "yes"
    assert row["sample in scan, 1024 x 1 KiB, device table"][-1] == "NO"
    assert row["one jitted call, batch 32 (state form)"][-1] == "NO"
    assert row["host gather, 4 KiB x 1024"][-1] == "yes"
    assert row["host table larger than the card"][0] == "1.25"
    assert row["select 1024 of 10^7 in scan, Uniform"][0] == "-"  # not measured
    assert "host-selected x GPU-selected, 32 x 1 KiB: TopK 3.00, cut='full' 2.00" in lines
    bench.update(smoke=False, quick=True)
    (tmp_path / "bench_gpu_NVIDIA_H100.json").write_text(json.dumps(bench))
    assert "(benchmark: bench_gpu_NVIDIA_H100.json, --quick" in gpu_summary.report(tmp_path)
    bench["smoke"] = True
    (tmp_path / "bench_gpu_NVIDIA_H100.json").write_text(json.dumps(bench))
    assert "yes" not in gpu_summary.report(tmp_path).split("goal figure")[1]
    (tmp_path / "bench_gpu_NVIDIA_H100.json").write_text(json.dumps(bench)[:50])  # killed
    assert "yes" not in gpu_summary.report(tmp_path).split("goal figure")[1]


def test_fetch_gpu_wheels_keeps_only_what_the_gpu_image_lacks():
    """scripts/fetch_gpu_wheels.py's choice, without the network: wheels of
    projects the image has are dropped (names compared as PEP 503 normalises
    them), the rest kept, and two versions of one project refused."""
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import fetch_gpu_wheels as fetch
    finally:
        sys.path.pop(0)
    wheels = ["flashbax-0.1.3-py3-none-any.whl", "jax-0.11.0-py3-none-any.whl",
              "typing_extensions-4.16.0-py3-none-any.whl",
              "jupyter_client-8.10.0-py3-none-any.whl",
              "Jupyter.Core-5.9.1-py3-none-any.whl"]
    assert fetch.select(wheels) == ["Jupyter.Core-5.9.1-py3-none-any.whl",
                                    "flashbax-0.1.3-py3-none-any.whl",
                                    "jupyter_client-8.10.0-py3-none-any.whl"]
    with pytest.raises(ValueError, match="two wheels of flashbax"):
        fetch.select(wheels + ["flashbax-0.1.2-py3-none-any.whl"])
    with pytest.raises(ValueError, match="not a wheel"):
        fetch.project_of("flashbax.tar.gz")
    assert {"flax", "jax", "chex", "cupy-cuda13x"} <= fetch.DEVICE_PACKAGES


def test_bench_gpu_smoke_runs_every_section_it_can_without_a_gpu(tmp_path):
    out = tmp_path / "bench_gpu.json"
    # -P, as the first GPU run called it: the script finds its helpers itself.
    subprocess.run([sys.executable, "-P", str(ROOT / "scripts" / "bench_gpu.py"), "--smoke",
                    "--repeats", "1", "--steps", "2", "--sections",
                    "per_step,gather,pure_jax,selection,prioritized,big", "--out", str(out)],
                   check=True, capture_output=True, cwd=tmp_path, env=cpu_only_env())
    result = json.loads(out.read_text())
    assert result["smoke"] and len(result["gather_host"]) == len(result["pure_jax"]) == 4
    assert "update_seconds" in result["selection"][0]
    assert result["selection"][0]["fill_seconds"] > 0  # insert_batch, not one insert each
    for row in result["per_step"].values():
        assert row["scan_step_over_pure_jax"] > 0 and row["call_over_pure_jax"] > 0
    assert result["prioritized"]["gearjax_seconds"] > 0
    assert result["big"]["sized_by"] == "smoke"
    assert set(result["section_seconds"]) >= {"per_step", "gather_host", "big"}


def test_bench_gpu_quick_runs_the_goal_rows_and_leaves_the_full_run_as_it_was():
    """bench_gpu.py --quick (gpu_check.sh's goal_bench): the sections every goal
    row but the big table reads, with their references, at 10^7 only, the
    device table's per-step rows; without --quick the defaults of the full run."""
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import bench_gpu
        import gpu_summary
    finally:
        sys.path.pop(0)
    quick = bench_gpu.parse_args(["--quick"])
    sections = set(quick.sections.split(","))
    assert sections == {"ceilings", "per_step", "gather", "pure_jax", "selection", "prioritized"}
    assert quick.table_gb == 1.0 and bench_gpu.selection_sizes(quick) == [10**7]
    assert bench_gpu.per_step_placements(True, gpu=True) == ["device"]
    assert bench_gpu.per_step_placements(True, gpu=False) == ["host"]  # runs without a GPU
    cases = bench_gpu.gather_cases(quick)
    assert (4 << 10, 1024) in cases and {w for w, _ in cases} >= {16 << 10, 64 << 10}
    assert len(cases) < len(bench_gpu.gather_cases(bench_gpu.parse_args([])))
    full = bench_gpu.parse_args([])
    assert full.table_gb == 2.0 and full.sections == bench_gpu.ALL_SECTIONS and not full.quick
    assert bench_gpu.per_step_placements(False, gpu=True) == ["host", "device"]
    assert bench_gpu.selection_sizes(full) == [10**5, 10**6]
    # Every goal row but the big table's reads a result --quick makes.
    class Reads(dict):
        def __getitem__(self, key):
            read.add(key)
            raise KeyError(key)

    read: set[str] = set()
    for goal in gpu_summary.GOALS:
        with pytest.raises(KeyError):
            goal[1](Reads())
    section = {"gather_host": "gather", "gather_device": "gather"}
    assert {section.get(name, name) for name in read} - sections == {"big"}, read


def test_the_big_table_is_larger_than_the_card_where_host_memory_allows():
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import bench_gpu
    finally:
        sys.path.pop(0)
    gib = 1 << 30
    # The first GPU run: 80 GB card, 125 GiB of host memory (75 GB was chosen).
    size, why = bench_gpu.big_table_bytes(85_017_493_504, 135_148_564_480)
    assert size > 85_017_493_504 and "0.75 x host memory (more than GPU memory" in why
    assert bench_gpu.big_table_bytes(80 * gib, 1024 * gib) == (100 * gib, "1.25 x GPU memory")
    size, why = bench_gpu.big_table_bytes(80 * gib, 64 * gib)
    assert size == 48 * gib and "not larger than the card" in why


def test_bench_one_sided_strategies_smoke_times_every_strategy_and_compares(tmp_path):
    from conftest import nixl_missing
    if nixl_missing() is not None:
        pytest.skip(nixl_missing())
    script = str(ROOT / "scripts" / "bench_one_sided_strategies.py")
    first, second = tmp_path / "first.json", tmp_path / "second.json"
    subprocess.run([sys.executable, "-P", script, "--smoke", "--repeats", "2", "--out",
                    str(first)], check=True, capture_output=True, timeout=600)
    result = json.loads(first.read_text())
    assert list(result["strategies"]) == ["Uniform()", "Prioritized(0.6)", "TopK(1000)",
                                          "Recent(1000)"]
    for r in result["strategies"].values():
        assert r["eager"] > 0 and r["in_jit"] > 0
    assert result["strategies"]["Uniform()"]["shards_sampled"] == [0, 1]  # both shards read
    subprocess.run([sys.executable, "-P", script, "--smoke", "--repeats", "2", "--baseline",
                    str(first), "--out", str(second)], check=True, capture_output=True,
                   timeout=600)
    compared = json.loads(second.read_text())
    assert compared["baseline"]["strategies"] == result["strategies"]
    ratio = compared["this_over_baseline"]["TopK(1000)"]["in_jit"]
    assert ratio == pytest.approx(compared["strategies"]["TopK(1000)"]["in_jit"] /
                                  result["strategies"]["TopK(1000)"]["in_jit"])
    assert "this / baseline" in second.with_suffix(".txt").read_text()


def test_bench_nixl_reader_smoke_reads_and_samples(tmp_path):
    from conftest import nixl_missing
    if nixl_missing() is not None:
        pytest.skip(nixl_missing())
    out = tmp_path / "bench_nixl_reader.json"
    subprocess.run([sys.executable, str(ROOT / "scripts" / "bench_nixl_reader.py"), "--smoke",
                    "--repeats", "3", "--out", str(out)], check=True, capture_output=True,
                   timeout=600)
    result = json.loads(out.read_text())
    assert set(result["reads"]) == {"4MiB", "64x4KiB"}
    assert result["snapshot"]["spans"] == 5 and result["snapshot"]["made_over_kept"] > 0
    sample = result["samples"]["32x1360B"]
    assert sample["round_trips"] == 3  # snapshot, windows, records
    assert set(sample["in_jit_seconds_per_sample"]) == {"compiled_state", "io_callback"}
    assert "nixl-cu12" in result["machine"]["versions"]
    assert (out.with_suffix(".txt")).read_text().count("sample") >= 1


# scripts/bench_dt_step.py runs in notebooks/03_performance.ipynb, which
# tests/test_notebooks.py executes (tiny size, every mode, its results plotted):
# a second, smaller run here would only add CI time.


def test_sharded_demo_runs_two_processes_on_one_global_table():
    out = subprocess.run([sys.executable, str(ROOT / "scripts" / "sharded_demo.py"),
                          "--timeout", "120"], check=True, capture_output=True, text=True,
                         timeout=180, env=cpu_only_env()).stdout
    lines = [line for line in out.splitlines() if line.startswith("process ")]
    assert len(lines) == 4, out
    assert sum("200 trajectories in 2 shards" in line for line in lines) == 2
    applied = [int(line.split("this shard applied ")[1].split()[0])
               for line in lines if "this shard applied" in line]
    assert sum(applied) == 2 * 20 * 256  # every routed update applied once, by its owner


def test_bench_exchange_runs_and_models(tmp_path):
    out = tmp_path / "exchange.json"
    subprocess.run([sys.executable, str(ROOT / "scripts" / "bench_exchange.py"), "--processes",
                    "1", "2", "--cases", "A", "--steps", "2", "--repeats", "1", "--out", str(out)],
                   check=True, capture_output=True, timeout=300, cwd=tmp_path,
                   env=cpu_only_env())
    result = json.loads(out.read_text())
    assert set(result["runs"]) == {"1", "2"} and len(result["runs"]["2"]) == 2
    rates = result["runs"]["2"][0]["A"]["gb_per_s_per_process"]
    assert set(rates) == {"global", "local", "all_to_all", "all_to_all_ideal"}
    assert all(rate > 0 for rate in rates.values())
    assert result["summary"]["A"]["2"]["scaling_efficiency"] > 0
    # Two tiny timings may be too noisy to fit; then the model says so.
    assert result["model"].get("beta_bytes_per_second", 1) > 0 or "error" in result["model"]


def test_bench_exchange_models_the_bucketed_blocks():
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import bench_exchange
    finally:
        sys.path.pop(0)
    # One shard: one block of B. Eight of equal mass: the mean of compiled
    # sizes above B/P = 32 (the largest of 64 pair counts always exceeds it),
    # far below B.
    assert bench_exchange.expected_block(256, 1) == 256
    sizes = exchange_blocks(256, 8)
    block = bench_exchange.expected_block(256, 8)
    assert sizes[1] <= block <= sizes[5] < 256


def exchange_blocks(batch, shards):
    from gearjax.sharded.exchange import block_sizes
    return block_sizes(batch, shards)


def test_bench_exchange_scaling_measures_both_policies(tmp_path):
    out = tmp_path / "scaling.json"
    # The second round's worker loads the programs the first compiled
    # (compiling was most of a worker's time).
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "bench_exchange_scaling.py"),
                           "--shards", "2", "--batches", "16", "--calls", "2", "--repeats", "2",
                           "--trajectories", "8", "--compilation-cache", str(tmp_path / "jax"),
                           "--out", str(out)], capture_output=True,
                          text=True, timeout=300, cwd=tmp_path, env=cpu_only_env())
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    result = json.loads(out.read_text())
    cases = [c for c in result["runs"] if c["batch"] == 16]
    assert {(c["mass"], c["policy"]) for c in cases} == {
        (m, p) for m in ("equal", "10:1") for p in ("bucketed", "full")}
    for c in cases:
        # Two workers ran each case; the case's time is the median of theirs.
        assert len(c["repeat_median_seconds"]) == 2 and len(c["compile_seconds"]) == 2
        assert c["median_seconds"] == pytest.approx(np.median(c["repeat_median_seconds"]))
        assert 0 < c["p10_seconds"] <= c["p90_seconds"]
        assert c["temp_bytes_per_device"] > 0  # from the first round's worker
        if c["policy"] == "full":  # every block B rows: P x B moved for B
            assert c["moved_per_useful"] == 2.0 and c["calls_by_block"] == {"16": 2}
        else:
            assert 1.0 <= c["moved_per_useful"] <= 2.0
            assert set(c["calls_by_block"]) <= {str(b) for b in exchange_blocks(16, 2)}
    assert all(c["measured_over_model"] > 0 for c in cases)
    assert result["model"]["bucketed_cases"] == 2
    assert (tmp_path / "scaling.txt").read_text().startswith("bench_exchange_scaling:")


def test_the_scaling_model_recovers_known_costs_and_shows_a_slow_case():
    import importlib.util
    spec = importlib.util.spec_from_file_location(
        "bench_exchange_scaling", ROOT / "scripts" / "bench_exchange_scaling.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    truth = {"t_call": 3e-4, "t_dev": 5e-4, "t_pair": 7e-6, "t_draw": 2e-8, "rate": 5e9}
    rng = np.random.default_rng(0)
    cases = []
    for batch in (256, 1024):
        for shards in (2, 4, 8, 16, 32, 64):
            for policy in ("bucketed", "full"):
                moved = rng.uniform(1, 3) * shards * batch * 1360 if policy == "bucketed" \
                    else shards * shards * batch * 1360
                seconds = (truth["t_call"] + shards * truth["t_dev"] + shards ** 2 *
                           truth["t_pair"] + shards ** 2 * batch * truth["t_draw"]
                           + moved / truth["rate"])
                cases.append({"shards": shards, "batch": batch, "policy": policy,
                              "bytes_moved_per_sample": moved, "median_seconds": seconds})
    fit = bench.fit_model(cases)
    for name in ("t_call", "t_dev", "t_pair", "t_draw"):
        assert fit[f"{name}_seconds"] == pytest.approx(truth[name], rel=1e-6)
    assert fit["rate_gb_per_s"] == pytest.approx(truth["rate"] / 1e9, rel=1e-6)
    assert np.allclose(fit["measured_over_model"], 1.0)  # the full cases too, unfitted
    cases[0]["median_seconds"] *= 1.5  # one slow case stands out
    ratios = bench.fit_model(cases)["measured_over_model"]
    assert ratios[0] == max(ratios) and ratios[0] > 1.15


def test_bench_actors_measures_the_learner_and_its_actors(tmp_path):
    pytest.importorskip("ray", reason="bench_actors needs Ray (the actors extra)")
    out = tmp_path / "actors.json"
    subprocess.run([sys.executable, str(ROOT / "scripts" / "bench_actors.py"), "--actors", "1",
                    "2", "--seconds", "1", "--out", str(out)],
                   check=True, capture_output=True, timeout=300, cwd=tmp_path)
    result = json.loads(out.read_text())
    assert result["learner_alone_rows_per_second"] > 0
    assert [p["actors"] for p in result["points"]] == [1, 2]
    for point in result["points"]:
        assert point["env_steps_per_second"] > 0 and point["learner_rows_per_second"] > 0
        # The rate limiter lets the learner sample samples_per_insert rows per
        # inserted episode, give or take its error buffer (the two rates are
        # measured over windows a little apart, hence the slack: four error
        # buffers' rows over the timed window).
        slack = 4 * result["error_buffer"] / result["config"]["seconds"]
        assert point["learner_rows_per_second"] <= 1.2 * point["episodes_per_second"] * \
            result["config"]["samples_per_insert"] + slack
    assert (tmp_path / "actors.png").stat().st_size > 0


def test_tune_dt_sweeps_with_asha_and_reports_every_trial(tmp_path):
    pytest.importorskip("ray.tune", reason="tune_dt needs Ray Tune (the tune extra)")
    out = tmp_path / "tune.json"
    # Two rungs of two steps each: all ASHA needs to stop a trial after its
    # first (a reference-size step takes about 0.2 s on 2 cores; compiling is
    # most of a trial).
    eval_every = 2
    subprocess.run([sys.executable, str(ROOT / "scripts" / "tune_dt.py"), "--samples", "2",
                    "--steps", str(2 * eval_every), "--eval-every", str(eval_every),
                    "--episodes", "1", "--eval-max-steps", "20", "--out", str(out)],
                   check=True, capture_output=True, timeout=600, cwd=tmp_path)
    result = json.loads(out.read_text())
    assert len(result["trials"]) == 2
    for trial in result["trials"]:
        assert 1 <= trial["evaluations"] <= 2  # ASHA may stop a trial after its first
        assert trial["last"]["step"] == eval_every * trial["evaluations"]
        assert trial["config"]["size"] in ("tiny", "reference")
        assert 3e-4 <= trial["config"]["learning_rate"] <= 3e-3
    assert result["best"]["eval_score"] == max(t["last"]["eval_score"] for t in result["trials"])


def test_bench_dispatch_runs_every_form(tmp_path):
    out = tmp_path / "dispatch.json"
    subprocess.run([sys.executable, str(ROOT / "scripts" / "bench_dispatch.py"), "--calls", "5",
                    "--steps", "3", "--widths", "8", "--out", str(out)],
                   check=True, capture_output=True, timeout=600, cwd=ROOT)
    result = json.loads(out.read_text())
    assert set(result["per_call"]["forms"]) == {"threaded", "threaded-fresh", "jax-pure",
                                                 "jax-pure+scalar"}
    assert result["per_call"]["jax_extra_scalar_calls_per_second_paired"] > 0
    assert "reverb" not in result["per_call"]  # only with --reverb-python
    step = result["train_step"]["8"]
    assert {"threaded", "threaded-fresh", "pre-staged"} <= set(step)
    assert all(s["median_us"] > 0 for s in step.values() if "median_us" in s)
    assert (tmp_path / "dispatch.txt").read_text().startswith("bench_dispatch:")


def test_bench_eager_times_every_form_against_the_jitted_call(tmp_path):
    out = tmp_path / "eager.json"
    subprocess.run([sys.executable, str(ROOT / "scripts" / "bench_eager.py"), "--calls", "5",
                    "--trajectories", "30", "--out", str(out)],
                   check=True, capture_output=True, timeout=600, cwd=ROOT)
    result = json.loads(out.read_text())
    for runs in ("", "_runs"):  # interleaved, and in runs of calls of one form
        assert set(result["call" + runs]) == {"jitted", "jitted-where", "jitted-no-table",
                                              "scan"}
        assert set(result["insert" + runs]) == {"eager", "eager-state", "jitted", "insert_many"}
        for section in ("sample" + runs, "per" + runs):
            assert {"eager", "eager-state", "eager-numpy", "jitted"} <= set(result[section])
            assert result[section]["jitted"]["time_over_jitted_paired"] == 1.0
            assert all(f["median_us"] > 0 for f in result[section].values())
    # The sample alone is under XLA's CPU client's 1,000-flop bound for
    # running on the calling thread; with the per-step update's where, over.
    flops = result["program_flops"]
    assert flops["jitted"] < 1000 <= flops["jitted-where"]
    assert (tmp_path / "eager.txt").read_text().startswith("bench_eager:")


def test_bench_dqn_runs_and_learns_something(tmp_path):
    pytest.importorskip("gymnasium", reason="bench_dqn needs gymnasium (the rl extra)")
    out = tmp_path / "dqn.json"
    subprocess.run([sys.executable, str(ROOT / "scripts" / "bench_dqn.py"), "--steps", "1500",
                    "--seeds", "0", "--systems", "gearjax,numpy", "--out", str(out)],
                   check=True, capture_output=True, timeout=600, cwd=ROOT)
    result = json.loads(out.read_text())
    runs = {r["system"]: r for r in result["runs"]}
    assert set(runs) == {"gearjax", "numpy"}
    # one update of batch 128 every 10 steps from step 1000 on, each sampling inside
    assert runs["gearjax"]["rows_sampled"] == ((1500 - 1000 - 1) // 10 + 1) * 128
    assert all(r["env_steps_per_second"] > 0 and r["episodes"] > 0 for r in runs.values())


def test_bench_against_compares_two_builds_figure_by_figure(tmp_path):
    import gearjax
    here = Path(gearjax.__file__).resolve().parent.parent  # the gearjax this test imports
    out = tmp_path / "against.json"
    subprocess.run([sys.executable, str(ROOT / "scripts" / "bench_against.py"), "--smoke",
                    "--rounds", "1", "--benches", "dispatch", "--current", str(here),
                    "--baseline", str(here), "--baseline-name", "same", "--out", str(out)],
                   check=True, capture_output=True, timeout=600, cwd=ROOT)
    result = json.loads(out.read_text())
    assert result["baseline"] == "same"
    figures = result["summary"]
    assert {"per-call threaded (us)", "train step w48 threaded (us)"} <= set(figures)
    assert "train step w256 threaded (us)" not in figures  # not run at --smoke's size
    for f in figures.values():
        assert f["current"] > 0 and f["baseline"] > 0
        assert f["best_ratio"] == pytest.approx(f["current"] / f["baseline"])
        assert f["ratio"] == pytest.approx(f["paired_ratios"][0])  # one round
    assert (tmp_path / "against.txt").read_text().startswith("bench_against:")


def test_count_against_drives_its_workloads_and_reports_per_build(tmp_path):
    import gearjax
    here = Path(gearjax.__file__).resolve().parent.parent  # the gearjax this test imports
    out = tmp_path / "count.json"
    subprocess.run([sys.executable, str(ROOT / "scripts" / "count_against.py"), "--smoke",
                    "--workloads", "insert_step,prioritized,eager_sample,step_update",
                    "--current", str(here), "--baseline", str(here), "--baseline-name", "same",
                    "--out", str(out)],
                   check=True, capture_output=True, timeout=600, cwd=ROOT)
    result = json.loads(out.read_text())
    assert result["smoke"] is True
    assert set(result["workloads"]) == {"insert_step", "prioritized", "eager_sample",
                                        "step_update"}
    for workload in result["workloads"].values():
        assert "same" in workload["per_call"] and len(workload["per_call"]) == 2
    assert (tmp_path / "count.txt").read_text().startswith("count_against:")
    # --report-from reports saved counts again, with the sums judged by.
    saved = json.loads(out.read_text())
    saved["workloads"]["insert_step"]["per_call"] = {
        name: {"gearjax": 10.0, "python": 20.0, "runtime": 5.0, "idle threads": 99.0}
        for name in saved["builds"]}
    (tmp_path / "saved.json").write_text(json.dumps(saved))
    again = tmp_path / "again.json"
    subprocess.run([sys.executable, str(ROOT / "scripts" / "count_against.py"), "--report-from",
                    str(tmp_path / "saved.json"), "--out", str(again)],
                   check=True, capture_output=True, timeout=120, cwd=ROOT)
    sums = json.loads(again.read_text())["workloads"]["insert_step"]["per_call"]["same"]
    assert (sums["ours"], sums["caller"]) == (30.0, 35.0)


@pytest.mark.skipif(shutil.which("callgrind_annotate") is None,
                    reason="valgrind's callgrind_annotate is not installed")
def test_count_against_splits_instructions_by_where_they_ran(tmp_path):
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import count_against
    finally:
        sys.path.remove(str(ROOT / "scripts"))
    profile = tmp_path / "callgrind.out"
    functions = [("/x/gearjax/_gearjax.cpython-311-x86_64-linux-gnu.so", "gearjax::Table::Select", 100),
                 ("/lib/libpython3.11.so.1.0", "_PyEval_EvalFrameDefault", 50),
                 ("/lib/libscipy_openblas64_.so", "blas_thread_server", 7),
                 ("/lib/libjax_common.so", "Eigen::ThreadPoolTempl<X>::WorkerLoop(int)", 11),
                 ("/lib/libc.so.6", "__memcpy_avx_unaligned_erms", 3)]
    lines = ["version: 1", "creator: test", "positions: line", "events: Ir", ""]
    for i, (library, function, n) in enumerate(functions, 1):
        lines += [f"ob=({i}) {library}", f"fl=({i}) f{i}.c", f"fn=({i}) {function}", f"0 {n}"]
    profile.write_text("\n".join(lines) + "\n")
    assert count_against.counts(profile) == {"gearjax": 100, "python": 50, "idle threads": 18,
                                             "runtime": 3}


def test_callgrind_instructions_reads_self_costs_instruction_by_instruction(tmp_path):
    """Callgrind's compressed names (first given in a cfn= line), positions
    "instr line" relative to the line before, and a call's inclusive cost
    (the line after calls=, not the caller's own)."""
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import callgrind_instructions as ci
    finally:
        sys.path.remove(str(ROOT / "scripts"))
    profile = tmp_path / "callgrind.out"
    profile.write_text("\n".join([
        "version: 1", "positions: instr line", "events: Ir", "",
        "fn=(1) main", "0x1000 3 7", "cfn=(2) gearjax::GatherRows(x)", "calls=1 0x5000 9",
        "+4 * 500",  # main's call: GatherRows' inclusive cost, not main's
        "fn=(2)", "0x5000 10 2", "+3 * 40", "+2 +1 40", "-5 * 1", "* * 2",
        "fn=(3) other", "0x9000 1 99", ""]))
    assert ci.self_costs(str(profile), "GatherRows") == {0x5000: 5, 0x5003: 40, 0x5005: 40}
    assert ci.self_costs(str(profile), "main") == {0x1000: 7}
    # End to end against a real library: run-time addresses are the library's
    # shifted by where it was loaded, tied by the function's entry.
    if shutil.which("objdump") is None:
        pytest.skip("objdump (binutils) is not installed")
    from gearjax import _gearjax
    entry, instructions = ci.disassembly(_gearjax.__file__, "gearjax::GatherRows")
    following = sorted(a for a in instructions if a > entry)[:2]
    loaded = 0x4000000
    profile.write_text("\n".join([
        "version: 1", "positions: instr line", "events: Ir", "",
        "fn=(1) gearjax::GatherRows(x)", f"{hex(loaded + entry)} 0 6",
        f"{hex(loaded + following[0])} 0 6", f"{hex(loaded + following[1])} 0 30", ""]))
    out = subprocess.run([sys.executable, str(ROOT / "scripts" / "callgrind_instructions.py"),
                          str(profile), _gearjax.__file__, "GatherRows"],
                         capture_output=True, text=True, check=True).stdout
    assert out.startswith("GatherRows: entered 6 times, 42 instructions")
    assert f"  {entry:x}           6 {instructions[entry]}" in out
    assert "          6:    2 instructions, 12" in out


def test_bench_insert_step_times_every_case(tmp_path):
    out = tmp_path / "insert.json"
    subprocess.run([sys.executable, str(ROOT / "scripts" / "bench_insert_step.py"), "--calls",
                    "300", "--rounds", "1", "--out", str(out)],
                   check=True, capture_output=True, timeout=300, cwd=ROOT)
    result = json.loads(out.read_text())
    assert set(result["us_per_call"]) == {"numpy-ring", "insert_step", "insert",
                                          "writer-append"}
