"""Writer throughput: steps/s and GB/s of appended data for gearjax's
streaming writer (one step at a time) against ``insert`` of whole trajectories
and against Reverb's TrajectoryWriter, all on the same steps.

    python scripts/bench_writer.py                                   # gearjax only
    python scripts/bench_writer.py --reverb-python path/to/reverb-venv/bin/python \\
        --out benchmarks/results/bench_writer_cpu.json

Steps are HalfCheetah-sized (obs float32[17], action float32[6], reward
float32, 96 bytes); ``--episodes`` distinct episodes of ``--length`` steps are
made once, and every step is its own set of arrays, made before any timing
(as an environment hands them out). Cases:

* ``insert``: each episode's columns already whole, ``table.insert`` per
  episode (the ceiling: one copy of whole columns);
* ``writer``: ``w.append`` per step, ``w.end_episode`` per episode;
* ``writer_split``: the same with ``max_length`` ``--split-length`` and
  ``max_length_overflow="split", overlap=--overlap`` (a piece inserted as
  soon as it is full);
* ``writer_jax``: the writer fed ``jax.Array`` steps (a DLPack import each);
* ``reverb_trajectory_writer``: Reverb's ``TrajectoryWriter``
  (``num_keep_alive_refs`` = the episode length) appending the same steps to
  a local ``reverb.Server`` (one table: Uniform sampler, Fifo remover,
  MinSize(1)), one item covering the whole episode per episode, then
  ``end_episode`` (which waits until the server has the item).

Reverb needs TensorFlow and numpy < 2, so it runs in its own virtual
environment: ``--reverb-python`` names that interpreter, which runs this same
file as a worker (``--reverb-worker``: numpy and reverb only, no gearjax).
The worker stays up for the whole run and is told over stdin to time a sample,
so that every system takes its turn in every round. The episodes go to it in
an .npz file, so both sides append identical steps. Without
``--reverb-python``, or when the worker cannot start, the Reverb case is
reported as skipped with the reason.

Timing: one sample of a case writes every episode ``passes`` times into a
fresh (empty) table that holds one pass, so passes after the first evict
(FIFO), as a full replay table does; the table is made before the clock
starts, the writer after. ``passes`` is chosen per case (from two warm-up
samples) so that one sample takes at least ``--min-seconds``: ``insert`` is
hundreds of times faster than a per-step writer, and equal step counts would
give it a sample of milliseconds. Then ``--repeats`` rounds, each timing every
case once in turn; the median is reported. steps/s counts appended steps;
GB/s is steps/s x 96 bytes (the split writer's overlap is stored twice but
appended once). Before timing, each case's table is checked to hold the last
episode exactly.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from _machine import machine_info, version_of
from _reverb import ReverbWorker, reply

# name -> (per-step shape, dtype); the Reverb worker uses the same table.
COLUMNS = {"obs": ((17,), "float32"), "action": ((6,), "float32"), "reward": ((), "float32")}
STEP_BYTES = sum(math.prod(shape) * np.dtype(dtype).itemsize
                 for shape, dtype in COLUMNS.values())
REVERB_CASE = "reverb_trajectory_writer"
REVERB_TABLE = "episodes"


# ---------------------------------------------------------------------------
# Data (shared by both sides: only numpy here)
# ---------------------------------------------------------------------------


def make_episodes(count: int, length: int, seed: int) -> dict[str, np.ndarray]:
    """``{column: [count, length, *shape]}`` of standard-normal float32."""
    rng = np.random.default_rng(seed)
    return {name: rng.standard_normal((count, length) + shape, dtype=np.float32)
            for name, (shape, dtype) in COLUMNS.items()}


def episode_list(data: dict[str, np.ndarray]) -> list[dict[str, np.ndarray]]:
    count = len(next(iter(data.values())))
    return [{name: np.ascontiguousarray(data[name][i]) for name in COLUMNS}
            for i in range(count)]


def step_lists(episodes: list[dict[str, np.ndarray]]) -> list[list[dict[str, np.ndarray]]]:
    """Every step as its own arrays (copies, reward 0-d), as an environment's
    step returns them; made before timing so neither side pays for it."""
    length = len(episodes[0]["reward"])
    return [[{name: np.array(e[name][t]) for name in COLUMNS} for t in range(length)]
            for e in episodes]


# ---------------------------------------------------------------------------
# The Reverb worker (runs in Reverb's virtual environment: numpy + reverb)
# ---------------------------------------------------------------------------


def reverb_worker(data_path: str) -> int:
    """Serves ``run <passes>``, ``verify`` and ``quit`` lines from stdin, one
    JSON reply each (see the module docstring)."""
    import reverb  # noqa: PLC0415 (only the worker's interpreter has it)

    with np.load(data_path) as npz:
        episodes = episode_list({name: npz[name] for name in COLUMNS})
    steps = step_lists(episodes)
    count, length = len(episodes), len(episodes[0]["reward"])
    server = reverb.Server(tables=[reverb.Table(
        name=REVERB_TABLE, sampler=reverb.selectors.Uniform(),
        remover=reverb.selectors.Fifo(), max_size=count,  # one pass, like gearjax's tables
        rate_limiter=reverb.rate_limiters.MinSize(1))])
    client = reverb.Client(f"localhost:{server.port}")

    def write(passes: int) -> float:
        client.reset(REVERB_TABLE)  # an empty table, untimed
        begin = time.perf_counter()
        with client.trajectory_writer(num_keep_alive_refs=length) as writer:
            for _ in range(passes):
                for episode in steps:
                    for step in episode:
                        writer.append(step)
                    writer.create_item(REVERB_TABLE, 1.0,
                                       {name: writer.history[name][:] for name in COLUMNS})
                    # Waits until the server has confirmed the item: the
                    # episode is in the table, as after gearjax's end_episode.
                    writer.end_episode()
        return time.perf_counter() - begin

    def verify() -> dict:
        write(1)
        size = client.server_info()[REVERB_TABLE].current_size
        sample = next(client.sample(REVERB_TABLE, num_samples=1, emit_timesteps=False))
        # The item's data come flattened in sorted column-name order.
        got = dict(zip(sorted(COLUMNS), sample.data))
        matches = any(all(np.array_equal(got[n], e[n]) for n in COLUMNS) for e in episodes)
        return {"verified": size == count and matches, "table_size": size,
                "item_steps": int(len(got["reward"])), "item_matches_an_episode": matches}

    reply({"ready": True, "python": platform.python_version(),
           "versions": {p: version_of(p) for p in ("dm-reverb", "tensorflow", "tensorflow-cpu",
                                                   "numpy") if version_of(p)}})
    try:
        for line in sys.stdin:
            command = line.split()
            if not command:
                continue
            if command[0] == "run":
                passes = int(command[1])
                reply({"seconds": write(passes), "steps": passes * count * length})
            elif command[0] == "verify":
                reply(verify())
            elif command[0] == "quit":
                break
            else:
                reply({"error": f"unknown command {line.strip()!r}"})
    finally:
        server.stop()
    return 0


# ---------------------------------------------------------------------------
# The gearjax side
# ---------------------------------------------------------------------------


def gearjax_cases(data: dict[str, np.ndarray], split_length: int, overlap: int) -> dict:
    """name -> (run(passes) -> seconds, verify() -> dict)."""
    import jax.numpy as jnp

    import gearjax as gx

    episodes = episode_list(data)
    steps = step_lists(episodes)
    jax_steps = [[{n: jnp.asarray(v) for n, v in s.items()} for s in ep] for ep in steps]
    count, length = len(episodes), len(episodes[0]["reward"])
    columns = {name: gx.Column(shape, dtype) for name, (shape, dtype) in COLUMNS.items()}
    assert sum(c.step_bytes for c in columns.values()) == STEP_BYTES
    # Pieces a split episode makes: the first holds split_length steps, each
    # further one split_length - overlap new ones.
    pieces = 1 + max(0, math.ceil((length - split_length) / (split_length - overlap)))

    def table(split: bool) -> gx.Table:
        # Holds one pass of episodes: later passes evict (FIFO), like
        # Reverb's table of max_size = episodes.
        return gx.Table(columns, capacity=count * (pieces if split else 1),
                        max_length=split_length if split else length, placement="host")

    def insert(t: gx.Table, passes: int) -> tuple[int, ...]:
        for _ in range(passes):
            for e in episodes:
                key = t.insert(e)
        return (key,)

    def write(t: gx.Table, passes: int, source, split: bool) -> tuple[int, ...]:
        with (t.writer(max_length_overflow="split", overlap=overlap) if split
              else t.writer()) as w:
            for _ in range(passes):
                for episode in source:
                    for step in episode:
                        w.append(step)
                    w.end_episode()
            return w.episode_keys

    writers = {"insert": (insert, False),
               "writer": (lambda t, p: write(t, p, steps, False), False),
               "writer_split": (lambda t, p: write(t, p, steps, True), True),
               "writer_jax": (lambda t, p: write(t, p, jax_steps, False), False)}

    def timed(fill, split: bool):
        def run(passes: int) -> float:
            t = table(split)  # made and freed untimed
            begin = time.perf_counter()
            fill(t, passes)
            seconds = time.perf_counter() - begin
            t.close()
            return seconds
        return run

    def checked(fill, split: bool):
        def verify() -> dict:
            with table(split) as t:
                keys = fill(t, 1)
                stored = [t.get(k) for k in keys]
                # The last episode, reassembled from its pieces (each later
                # piece starts with the previous one's last `overlap` steps).
                got = {n: np.concatenate([stored[0][n]] + [p[n][overlap:] for p in stored[1:]])
                       for n in COLUMNS}
                size = len(t)
            expected_size = count * (pieces if split else 1)
            matches = all(np.array_equal(got[n], episodes[-1][n]) for n in COLUMNS)
            return {"verified": matches and size == expected_size, "table_size": size,
                    "last_episode_matches": matches, "pieces_of_last_episode": len(keys)}
        return verify

    return {name: (timed(fill, split), checked(fill, split))
            for name, (fill, split) in writers.items()}


# ---------------------------------------------------------------------------
# Reporting
# ---------------------------------------------------------------------------


def report(result: dict) -> str:
    config, cases = result["config"], result["cases"]
    machine = result["machine"]
    lines = [f"writer throughput: {config['episodes']} episodes x {config['length']} steps, "
             f"{result['step_bytes']} B a step (obs float32[17], action float32[6], reward "
             f"float32); median of {config['repeats']} rounds, systems taking turns",
             f"{machine['cpu_model']}, {machine['cores']} cores, python {machine['python']}, "
             + ", ".join(f"{p} {v}" for p, v in machine["versions"].items()),
             "load average (1, 5, 15 min) at start: "
             + " ".join(f"{x:.2f}" for x in result["load_average_start"])
             + "; at end: " + " ".join(f"{x:.2f}" for x in result["load_average_end"])]
    reverb = cases.get(REVERB_CASE, {})
    if reverb.get("skipped"):
        lines.append(f"{REVERB_CASE}: skipped: {reverb['reason']}")
    else:
        lines.append(f"reverb worker: python {reverb['python']}, "
                     + ", ".join(f"{p} {v}" for p, v in reverb["versions"].items()))
    lines.append("")
    header = (f"{'case':26s} {'passes':>6s} {'steps/sample':>12s} {'median s':>9s} "
              f"{'min-max s':>15s} {'steps/s':>11s} {'GB/s':>7s} {'x insert':>8s} "
              f"{'x reverb':>8s}")
    lines += [header, "-" * len(header)]
    base = cases["insert"]["steps_per_second"]
    rev = None if reverb.get("skipped") else reverb["steps_per_second"]
    for name, case in cases.items():
        if case.get("skipped"):
            lines.append(f"{name:26s} skipped")
            continue
        rate = case["steps_per_second"]
        lines.append(f"{name:26s} {case['passes']:6d} {case['steps']:12,d} "
                     f"{case['median_seconds']:9.3f} "
                     f"{min(case['seconds']):7.3f}-{max(case['seconds']):<7.3f} "
                     f"{rate:11,.0f} {case['gb_per_second']:7.4f} {rate / base:8.3f} "
                     + (f"{rate / rev:8.2f}" if rev else f"{'-':>8s}"))
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------
# Main
# ---------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> dict | int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--episodes", type=int, default=20, help="distinct episodes")
    parser.add_argument("--length", type=int, default=1000, help="steps an episode")
    parser.add_argument("--split-length", type=int, default=None,
                        help="writer_split's max_length (default: a tenth of --length)")
    parser.add_argument("--overlap", type=int, default=4, help="writer_split's overlap")
    parser.add_argument("--repeats", type=int, default=5, help="rounds; the median is reported")
    parser.add_argument("--min-seconds", type=float, default=1.0,
                        help="each case repeats passes over the episodes until a sample "
                             "takes about this long (0: one pass)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--reverb-python", default=None,
                        help="the Python of a virtual environment with dm-reverb and tensorflow")
    parser.add_argument("--reverb-timeout", type=float, default=600.0,
                        help="seconds to wait for any one reply of the Reverb worker")
    parser.add_argument("--out", default="benchmarks/results/bench_writer_cpu.json",
                        help="JSON results; the printed table goes beside it as .txt")
    parser.add_argument("--reverb-worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--data", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.reverb_worker:
        return reverb_worker(args.data)

    load_start = os.getloadavg()
    split_length = args.split_length or max(2, args.length // 10)
    if not 0 <= args.overlap < split_length:
        parser.error("--overlap must be below --split-length")
    data = make_episodes(args.episodes, args.length, args.seed)
    cases = gearjax_cases(data, split_length, args.overlap)

    workdir = tempfile.TemporaryDirectory(prefix="bench_writer_")
    reverb, reverb_info, skipped = None, {}, None
    if args.reverb_python is None:
        skipped = "no --reverb-python given (Reverb needs its own virtual environment)"
    elif not os.access(args.reverb_python, os.X_OK):
        skipped = f"--reverb-python {args.reverb_python!r} is not an executable interpreter"
    else:
        data_path = os.path.join(workdir.name, "episodes.npz")
        np.savez(data_path, **data)
        try:
            reverb = ReverbWorker(args.reverb_python, str(Path(__file__).resolve()), data_path,
                                  args.reverb_timeout,
                                  os.path.join(workdir.name, "reverb_worker.log"))
            reverb_info = reverb.info
        except (OSError, RuntimeError) as error:
            skipped = f"the Reverb worker did not start: {error}"
            reverb = None
    if reverb is not None:
        cases[REVERB_CASE] = (reverb.run, lambda: reverb.ask("verify"))

    def attempt(name: str, action):
        """action(); a Reverb worker failing mid-run drops its case (reported
        as skipped with the reason) instead of the gearjax results."""
        nonlocal skipped
        try:
            return action()
        except RuntimeError as error:
            if name != REVERB_CASE:
                raise
            skipped = f"the Reverb worker failed during the run: {error}"
            del cases[REVERB_CASE]
            return None

    try:
        # Warm-up (first appends, allocations, Reverb's chunker tuning) and the
        # passes that make a sample last --min-seconds.
        passes, checks = {}, {}
        for name, (run, verify) in list(cases.items()):
            one = attempt(name, lambda: min(run(1) for _ in range(2)))
            check = attempt(name, verify) if one is not None else None
            if check is None:
                continue
            if not check["verified"]:
                raise RuntimeError(f"{name}: the table does not hold what was written: {check}")
            checks[name], passes[name] = check, 1
            if args.min_seconds:
                # A first guess from one pass, then a sample of that many
                # passes; the faster of the two per-pass times sets the passes
                # (a busy machine's slow phase must not shorten the samples),
                # with a tenth to spare.
                guess = max(1, math.ceil(args.min_seconds / one))
                taken = attempt(name, lambda: run(guess)) if guess > 1 else one
                if taken is None:
                    continue
                per_pass = min(one, taken / guess)
                passes[name] = max(1, math.ceil(1.1 * args.min_seconds / per_pass))
        seconds: dict[str, list[float]] = {name: [] for name in cases}
        for _ in range(args.repeats):
            for name, (run, _) in list(cases.items()):  # systems take turns
                if name in cases:
                    taken = attempt(name, lambda: run(passes[name]))
                    if taken is not None:
                        seconds[name].append(taken)
    finally:
        if reverb is not None:
            reverb.close()
        workdir.cleanup()

    config = {k: v for k, v in vars(args).items() if k not in ("reverb_worker", "data")}
    result = {"machine": machine_info(), "config": config | {"split_length": split_length},
              "step_bytes": STEP_BYTES, "load_average_start": list(load_start),
              "load_average_end": list(os.getloadavg()), "cases": {}}
    for name in cases:
        steps = passes[name] * args.episodes * args.length
        median = statistics.median(seconds[name])
        rate = steps / median
        result["cases"][name] = {"passes": passes[name], "steps": steps, "seconds": seconds[name],
                                 "median_seconds": median, "steps_per_second": rate,
                                 "gb_per_second": rate * STEP_BYTES / 1e9,
                                 "check": checks[name]}
    if skipped is not None:
        result["cases"][REVERB_CASE] = {"skipped": True, "reason": skipped}
    else:
        result["cases"][REVERB_CASE].update(
            python=reverb_info["python"], versions=reverb_info["versions"],
            server="reverb.Server in the worker, client over localhost gRPC",
            writer=f"client.trajectory_writer(num_keep_alive_refs={args.length}), one item "
                   f"of the whole episode each, default (auto-tuned) chunking")

    text = report(result)
    print(text, end="")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n")
    out.with_suffix(".txt").write_text(text)
    return result


if __name__ == "__main__":
    outcome = main()
    sys.exit(outcome if isinstance(outcome, int) else 0)
