"""Benchmark: sampling the same batch shapes from gearjax, Flashbax, NumPy and memcpy.

Three sections (``--sections``, default all):

per-call     how long one call takes to produce a full, materialised batch
             (dispatch from Python included), for every case below;
in-scan      the cost of a sample inside a jitted ``lax.scan`` (how users train):
             each step samples a batch and sums it; the ceiling is a contiguous
             XLA ``dynamic_slice`` of the same bytes, summed the same way;
prioritized  prioritized replay as it runs in training: inside a jitted scan,
             each step samples 256 one-step windows of one float32 column by
             priority (alpha 0.6) and sets new priorities for them, in tables of
             10^3 and 10^6 trajectories, against Flashbax's prioritised buffer.

Per-call section. For each case (batch x window x per-step shape, dtype) the
script fills every system with the same random trajectories and times how long
one call takes to produce a full, materialised batch:

  gearjax        ``state, batch = table.sample(state, key, batch_size, window,
                 strategy=gx.Uniform(), pad="left")`` inside ``jax.jit`` (the
                 table state passed in and returned), returning
                 the payload column (as Flashbax's sample returns its
                 experience); skipped, with the import error recorded, when
                 ``import gearjax`` fails.
  gearjax-batch  the same, returning the whole gx.Batch (every array) to Python:
                 shows what handing every leaf back to the host costs.
  flashbax       ``flashbax.make_trajectory_buffer(...).sample`` inside ``jax.jit``
                 (buffer state passed as an argument, period=1).
  numpy          fancy indexing ``data[traj[:, None], start[:, None] + arange(W)]``;
                 the random trajectory indices and starts are drawn INSIDE the
                 timed region (as a sampler has to), starts in [0, L - W] so every
                 window lies inside the stored length.
  memcpy-warm    ``np.copyto(dst, src)`` of the payload bytes into a preallocated dst.
  memcpy-fresh   ``np.empty`` + ``np.copyto`` each call (sampling returns fresh buffers).

Each system is warmed up (first call, which compiles for the JAX systems, then
3 more calls) and then timed for ``--repeats`` calls, each followed by
``jax.block_until_ready`` on the whole output. The systems take turns call by
call (round-robin), so the slow phases of a noisy machine hit them alike. Reported: median, p10 and p90
seconds, GB/s of payload (batch * window * prod(step shape) * itemsize; padding
masks or other extra outputs are not counted) and, for gearjax, its payload rate
over Flashbax's and both memcpys' (> 1 means gearjax is faster). After timing,
a few sampled rows of each system are checked against the stored data.

In-scan section: gearjax (the table state in the scan's carry), Flashbax and
the ceiling, each a jitted scan of ``scan_steps`` steps (chosen per case so
that one dispatch takes tens of milliseconds and its cost is spread thin),
taking turns dispatch by dispatch; reported per step. The goal: gearjax at
least 0.8 of the ceiling's rate on every case.

Prioritized section: per-step times of sample + update (and of each alone)
for gearjax, and of sample + set_priorities for Flashbax, at 10^3 and 10^6
trajectories. Goals: at 10^6, gearjax at least 2x faster than Flashbax, and
its cost at 10^6 at most 3x its cost at 10^3.

Run (from the repository root):

    python scripts/bench_sample.py [--sections per-call,in-scan,prioritized]
        [--repeats 30] [--cases A,B,C,D] [--scale 1.0]
        [--out benchmarks/results/bench_sample_cpu.json]

Compact tables are printed at the end and the full results go to ``--out`` as JSON.

This file is the command; each section is a module of its own beside it
(``_sample_per_call.py``, ``_sample_in_scan.py``, ``_sample_prioritized.py``),
and the cases and measuring code they share are ``_sample_cases.py``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import resource
import time
from pathlib import Path

import _machine
from _sample_cases import CASES, GEARJAX_IMPORT_ERROR, gx, scaled
from _sample_in_scan import print_scan_tables, run_in_scan_case
from _sample_per_call import print_table, run_case
from _sample_prioritized import prioritized_goals, run_prioritized

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = REPO_ROOT / "benchmarks" / "results" / "bench_sample_cpu.json"
SECTIONS = ("per-call", "in-scan", "prioritized")


# ---------------------------------------------------------------------------
# Reporting
# ---------------------------------------------------------------------------


def machine_info() -> dict:
    return _machine.machine_info(
        ("flashbax",), processor=platform.processor(), nproc=len(os.sched_getaffinity(0)),
        gearjax_module=getattr(gx, "__file__", None),
        gearjax_version=getattr(gx, "__version__", None),
        gearjax_import_error=GEARJAX_IMPORT_ERROR)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=30, help="timed calls per system")
    parser.add_argument("--warmup", type=int, default=3,
                        help="untimed calls after the first (compiling) one")
    parser.add_argument("--cases", default="A,B,C,D", help="comma-separated subset of A,B,C,D")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="JSON results path")
    parser.add_argument("--scale", type=float, default=1.0,
                        help="multiply the number of stored trajectories (e.g. to exceed the LLC)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--sections", default=",".join(SECTIONS),
                        help=f"comma-separated subset of {','.join(SECTIONS)}")
    parser.add_argument("--scan-repeats", type=int, default=15,
                        help="timed dispatches per system in the in-scan and prioritized sections")
    parser.add_argument("--prioritized-sizes", default="1000,1000000",
                        help="table sizes of the prioritized section")
    args = parser.parse_args(argv)
    args.cases = [c.strip().upper() for c in args.cases.split(",") if c.strip()]
    unknown = sorted(set(args.cases) - set(CASES))
    if unknown:
        parser.error(f"unknown cases {unknown}; choose from {sorted(CASES)}")
    args.sections = [x.strip() for x in args.sections.split(",") if x.strip()]
    if sorted(set(args.sections) - set(SECTIONS)):
        parser.error(f"unknown sections; choose from {SECTIONS}")
    args.prioritized_sizes = [int(n) for n in args.prioritized_sizes.split(",") if n.strip()]
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    started = time.perf_counter()
    results = {
        "benchmark": "bench_sample",
        "timestamp": datetime.datetime.now(datetime.timezone.utc).isoformat(),
        "machine": machine_info(),
        "settings": {"repeats": args.repeats, "warmup": args.warmup, "scale": args.scale,
                     "seed": args.seed, "cases": args.cases, "sections": args.sections,
                     "scan_repeats": args.scan_repeats,
                     "prioritized_sizes": args.prioritized_sizes},
        "cases": {},
    }
    if "per-call" in args.sections:
        for name in args.cases:
            results["cases"][name] = run_case(scaled(CASES[name], args.scale), args)
    if "in-scan" in args.sections:
        results["in_scan"] = {name: run_in_scan_case(scaled(CASES[name], args.scale), args)
                              for name in args.cases}
    if "prioritized" in args.sections:
        results["prioritized"] = {str(n): run_prioritized(n, args) for n in args.prioritized_sizes}
        results["prioritized_goals"] = prioritized_goals(results["prioritized"])

    results["wall_time_s"] = time.perf_counter() - started
    results["peak_rss_bytes"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    if results["cases"]:
        print_table(results)
    print_scan_tables(results)
    print(f"\nwall time {results['wall_time_s']:.1f} s, peak RSS "
          f"{results['peak_rss_bytes'] / 2**30:.2f} GiB, results written to {args.out}")


if __name__ == "__main__":
    main()
