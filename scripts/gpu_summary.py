"""One screen of what scripts/gpu_check.sh found: each stage's outcome, and the
GPU goal figures from the benchmark results, each against its goal.

    python scripts/gpu_summary.py [RESULTS_DIR]     # default benchmarks/results

Reads, where present: gpu_check_stages.jsonl (a line when a stage starts and
one when it ends: its outcome, seconds and budget), each stage's JUnit reports
(gpu_check_<stage>*.xml), gpu_check_sanitize.log, the build's PROBLEM lines,
bench_gpu_*.json (the newest: the quick goal rows or the full run) and
bench_dt_step_gpu.json. A stage whose last line is "started" never finished
(the run was killed there): "cut". A figure whose result is missing or failed
reads "-". Prints the table; exits 0.
"""

from __future__ import annotations

import argparse
import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path

# (what, how it is read from the results, goal text, the test of the goal).
# The goals are the GPU speed goals the project set itself after the first GPU
# run (2026-11-26): a table call must cost about what a pure-JAX gather of the
# same bytes costs.
US = 1e6


def _ratio(r, a, b):
    return r[a] / r[b]


GOALS = [
    ("sample in scan, 32 x 1 KiB, device table", lambda b: b["per_step"]["device_B32"]
     ["scan_step_over_pure_jax"], "x pure JAX", "<= 1.2", lambda v: v <= 1.2),
    ("sample in scan, 1024 x 1 KiB, device table", lambda b: b["per_step"]["device_B1024"]
     ["scan_step_over_pure_jax"], "x pure JAX", "<= 1.2", lambda v: v <= 1.2),
    ("one jitted call, batch 32 (state form)", lambda b: b["per_step"]["device_B32"]
     ["call_over_pure_jax"], "x pure JAX", "<= 1.1", lambda v: v <= 1.1),
    ("select 1024 of 10^7 in scan, Uniform", lambda b: _selection(b, 10**7)
     ["select_uniform_seconds"] * US, "us", "<= 15", lambda v: v <= 15),
    ("select 1024 of 10^7 in scan, Prioritized", lambda b: _selection(b, 10**7)
     ["select_prioritized_seconds"] * US, "us", "<= 30", lambda v: v <= 30),
    ("priority update of 1024 at 10^7", lambda b: _selection(b, 10**7)["update_seconds"] * US,
     "us", "<= 20", lambda v: v <= 20),
    ("prioritized sample+update 256 at 10^6", lambda b: b["prioritized"]
     ["flashbax_over_gearjax"], "x faster than Flashbax", ">= 8", lambda v: v >= 8),
    ("device gather, 64 KiB+ windows, worst", lambda b: min(
        r["of_ceiling"] for r in b["gather_device"] if r["window_bytes"] >= 64 << 10),
     "of d2d copy", ">= 0.8", lambda v: v >= 0.8),
    ("host gather, 16 KiB+ windows, worst", lambda b: min(
        r["of_ceiling"] for r in b["gather_host"] if r["window_bytes"] >= 16 << 10),
     "of pinned copy", ">= 0.9", lambda v: v >= 0.9),
    ("host gather, 4 KiB x 1024", lambda b: next(
        r["of_ceiling"] for r in b["gather_host"]
        if r["window_bytes"] == 4 << 10 and r["batch"] == 1024), "of pinned copy", ">= 0.7",
     lambda v: v >= 0.7),
    ("host table larger than the card", lambda b: b["big"]["table_bytes"]
     / b["big"]["gpu_memory_bytes"], "x card memory", "> 1", lambda v: v > 1),
]


def _selection(bench: dict, n: int) -> dict:
    return next(r for r in bench["selection"] if r["n"] == n)


def newest(results: Path, pattern: str) -> Path | None:
    found = sorted(results.glob(pattern), key=lambda p: p.stat().st_mtime)
    return found[-1] if found else None


def stages(results: Path) -> list[dict]:
    path = results / "gpu_check_stages.jsonl"
    if not path.exists():
        return []
    last: dict[str, dict] = {}
    for line in path.read_text().splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue  # a line a killed run left half-written
        if isinstance(entry, dict) and "stage" in entry:
            last[entry["stage"]] = entry  # the latest run of each stage
    return list(last.values())


def outcome(entry: dict) -> str:
    """A stage's result as the table shows it (lines written before the
    outcome field had only the exit status)."""
    found = entry.get("outcome", "ok" if entry.get("exit", 1) == 0 else "fail")
    if found == "fail":
        return f"FAIL {entry.get('exit', '?')}"
    return {"started": "cut", "timeout": "TIMEOUT", "interrupted": "INTERRUPT"}.get(found, found)


def junit_counts(paths: list[Path]) -> str:
    """Test counts over a stage's JUnit reports, summed."""
    total = dict.fromkeys(("tests", "failures", "errors", "skipped"), 0)
    read = 0
    for path in paths:
        try:
            root = ET.parse(path).getroot()
        except ET.ParseError:
            continue  # a report a killed pytest left unfinished
        read += 1
        suites = [root] if root.tag == "testsuite" else list(root)
        for k in total:
            total[k] += sum(int(s.get(k, 0)) for s in suites)
    if not read:
        return ""
    passed = total["tests"] - total["failures"] - total["errors"] - total["skipped"]
    return (f"{passed} passed, {total['failures']} failed, {total['errors']} errors, "
            f"{total['skipped']} skipped")


def problems(path: Path) -> str:
    """The PROBLEM lines a stage's log has (the build's: wheels, FFI stages)."""
    if not path.exists():
        return ""
    count = sum(line.startswith("PROBLEM") for line in
                path.read_text(errors="replace").splitlines())
    return f"{count} PROBLEM line(s) in its log" if count else ""


def stage_details(results: Path, name: str) -> str:
    if name == "sanitize":
        return sanitizer_counts(results / "gpu_check_sanitize.log")
    if name == "build":
        return problems(results / "gpu_check_build.log")
    return junit_counts(sorted(results.glob(f"gpu_check_{name}*.xml")))


def sanitizer_counts(path: Path) -> str:
    if not path.exists():
        return ""
    text = path.read_text(errors="replace")
    found = []
    for tool in ("memcheck", "racecheck", "synccheck"):
        section = text.split(f"--- compute-sanitizer --tool {tool}")[-1] \
            if f"--tool {tool}" in text else ""
        summary = re.findall(r"ERROR SUMMARY: (\d+) error|RACECHECK SUMMARY: (\d+) hazard",
                             section.split("--- compute-sanitizer")[0])
        counts = [int(a or b) for a, b in summary]
        if counts:
            found.append(f"{tool} {sum(counts)}")
    return "errors: " + ", ".join(found) if found else ""


def figure(read, bench: dict | None) -> float | None:
    if bench is None:
        return None
    try:
        return float(read(bench))
    except (KeyError, TypeError, StopIteration, ValueError, ZeroDivisionError):
        return None


def load_bench(path: Path | None) -> dict | None:
    """A benchmark's results; None for none, a smoke run (its numbers are not
    results) or a file a killed run left half-written."""
    if path is None:
        return None
    try:
        bench = json.loads(path.read_text())
    except ValueError:
        return None
    return None if not isinstance(bench, dict) or bench.get("smoke") else bench


def report(results: Path) -> str:
    lines = [f"gearjax GPU check: {results}"]
    facts = results / "gpu_check_facts.txt"
    if facts.exists():
        gpu = re.search(r"^(NVIDIA [^,\n]+|[^,\n]*(H100|H200|A100)[^,\n]*),", facts.read_text(),
                        re.M)
        if gpu:
            lines.append(f"device: {gpu.group(1).strip()}")
    lines.append(f"{'stage':10s} {'result':9s} {'s/budget':>8s}  details")
    for entry in stages(results):
        name = entry["stage"]
        seconds = f"{entry.get('seconds', 0)}" + (f"/{entry['budget']}" if "budget" in entry
                                                  else "")
        lines.append(f"{name:10s} {outcome(entry):9s} {seconds:>8s}  "
                     f"{stage_details(results, name)}".rstrip())
    bench_path = newest(results, "bench_gpu_*.json")
    bench = load_bench(bench_path)
    lines.append("")
    lines.append(f"{'goal figure':44s} {'measured':>9s} {'unit':22s} {'goal':>7s} met")
    for what, read, unit, goal, met in GOALS:
        value = figure(read, bench)
        shown = "-" if value is None else f"{value:9.3g}"
        verdict = "-" if value is None else ("yes" if met(value) else "NO")
        lines.append(f"{what:44s} {shown:>9s} {unit:22s} {goal:>7s} {verdict}")
    # What selecting on the host costs (no goal: the docs state it): one line,
    # each host-selected case's scan step over the GPU-selected one's.
    selected = {name.split(",")[-1].split("(")[0].strip(): row["over_gpu_selected"]
                for name, row in (bench or {}).get("host_selected", {}).items()
                if isinstance(row, dict) and "over_gpu_selected" in row
                and "GPU-selected" not in name}
    if selected:
        lines.append("host-selected x GPU-selected, 32 x 1 KiB: " + ", ".join(
            f"{name} {ratio:.2f}" for name, ratio in selected.items()))
    dt = results / "bench_dt_step_gpu.json"
    share = None
    if dt.exists():
        try:
            reference = json.loads(dt.read_text())["sizes"]["reference"]
            share = reference["in_jit_cost_vs_device_batch"]
        except (KeyError, TypeError, ValueError):
            share = None
    shown = "-" if share is None else f"{100 * share:9.3g}"
    verdict = "-" if share is None else ("yes" if share <= 0.03 else "NO")
    lines.append(f"{'in-jit sampling share of a DT step (ref.)':44s} {shown:>9s} {'%':22s} "
                 f"{'<= 3':>7s} {verdict}")
    if bench_path:
        quick = ", --quick: the goal rows at a quick size" if bench and bench.get("quick") else ""
        lines.append(f"(benchmark: {bench_path.name}{quick})")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("results", nargs="?", type=Path,
                        default=Path(__file__).resolve().parents[1] / "benchmarks" / "results")
    print(report(parser.parse_args(argv).results))


if __name__ == "__main__":
    main()
