"""Benchmark: what making many tables, each sampled eagerly once, leaves behind in
the process, and what eager sampling costs, under two ways of owning the
compiled sample.

    python scripts/bench_table_churn.py [--tables 2000] [--samples 2000]
        [--out benchmarks/results/bench_table_churn_cpu.json]

Schemes (gearjax/_sample.py):

* ``per-table`` (gearjax's): each table owns its jitted sample, so JAX's weakly
  keyed caches drop the table's compiled programs when the table goes;
* ``shared`` (gearjax before 0cccac4, rebuilt here over the same traced
  body): one module-level jitted sample taking the table's layout and handle
  as a static argument; JAX's caches keep every table's program until
  ``jax.clear_caches()``.

Sections, each scheme in a fresh Python process (so one scheme's caches do not
count against the other; speed first):

* ``churn``: ``--tables`` tables of one float32[4] column (capacity 8,
  max_length 4), one after another: make it, insert a trajectory, sample it
  eagerly once (stateless form, blocked on), then either drop it (``drop``:
  the last reference goes) or close it and keep the object (``close``: a list
  holds every closed table). Memory maps (lines of /proc/self/maps) and
  resident memory (VmRSS) are read before and after, after 20 warm-up tables
  and a ``gc.collect()``, then again after ``jax.clear_caches()``. Last, the
  same with one eager ``insert_batch`` of JAX arrays in place of the sample
  (``call`` ``insert_batch``, dropped, under gearjax's scheme: the table owns
  that program too; JAX's cache of single-primitive programs kept it before).
* ``compiles``: 20 tables, each with its own jitted training step that
  samples it (``jax.jit`` over a function closing over the table, state
  form), called 5 times, then 5 eager samples of each table: XLA backend
  compilations counted (JAX's ``/jax/core/compile/backend_compile_duration``
  event), per table.
* ``speed`` (one process, both schemes): ``--samples`` eager samples of 32
  windows of 8 steps from one table of 64 trajectories of 32 steps of
  float32[17], each blocked on, through the compiled sample directly (what
  ``Table.sample`` calls after its checks), in the state form (a state in
  and out) and the eager stateless one (what ``table.sample(key, ...)``
  passes eagerly: a fresh NumPy state in, the state out dropped; results
  committed before gearjax dropped the stateless compiled form timed its
  ordered-effects path here). The schemes take turns in rounds of 50 calls, in
  alternating order; medians per call and the paired ratio (median over
  rounds of per-table's time over shared's) are reported. ``Table.sample`` as
  a user calls it is timed beside them.

The report names the machine (scripts/_machine.py). CPU only: it reads Linux's
/proc and runs JAX's CPU backend (JAX_PLATFORMS=cpu for a machine with a GPU).
"""

from __future__ import annotations

import argparse
import functools
import gc
import json
import statistics
import subprocess
import sys
import time

from _machine import machine_info, write_results

ROUND = 50  # calls a scheme makes in one turn of the speed section


def memory_maps() -> int:
    """The process's memory maps now (lines of /proc/self/maps)."""
    with open("/proc/self/maps") as f:
        return sum(1 for _ in f)


def resident_mib() -> float:
    """The process's resident memory now (VmRSS), in MiB."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def use_scheme(scheme: str) -> None:
    """Makes Table.sample use the scheme's compiled sample (``per-table`` is
    gearjax's own; ``shared`` replaces gearjax._sample.sample, which
    Table.sample calls, with the scheme gearjax had before)."""
    if scheme == "per-table":
        return
    from gearjax import _sample
    _sample.sample = shared_sample


@functools.cache
def _shared_program():
    """The shared scheme's one jitted sample, its table a static argument
    (the layout and handle, as a hashable value: gearjax's former SampleSpec)."""
    import jax

    from gearjax import _sample

    @functools.partial(jax.jit, inline=True, static_argnames=("layout", "args"))
    def sample(rng_key, state, *, layout, args):
        handle, capacity, columns = layout
        return _sample._draw(rng_key, state, handle, capacity, columns, args)

    return sample


def shared_layout(spec) -> tuple:
    """The static argument the shared scheme compiles against: what a
    SampleSpec says of its table, as a hashable value."""
    return spec.handle, spec.capacity, spec.columns


def shared_sample(rng_key, state, *, spec, args):
    """gearjax._sample.sample under the shared scheme."""
    return _shared_program()(rng_key, state, layout=shared_layout(spec), args=args)


def small_table():
    import numpy as np

    import gearjax as gx
    table = gx.Table({"x": gx.Column((4,), "float32")}, capacity=8, max_length=4)
    table.insert({"x": np.ones((3, 4), np.float32)})
    return table


def churn(scheme: str, tables: int, ending: str, call: str = "sample") -> dict:
    """The churn section for one scheme, ending and eager call, in this process."""
    import jax
    import jax.numpy as jnp
    use_scheme(scheme)
    kept = []
    rows = jnp.ones((1, 2, 4), jnp.float32)
    lengths = jnp.asarray([2])

    def one(key):
        table = small_table()
        if call == "sample":
            jax.block_until_ready(table.sample(key, 2, window=2)["x"])
        else:
            jax.block_until_ready(table.insert_batch({"x": rows}, lengths))
        if ending == "close":
            table.close()
            kept.append(table)

    key = jax.random.key(0)
    for _ in range(20):
        one(key)
    gc.collect()
    maps, rss, start = memory_maps(), resident_mib(), time.perf_counter()
    for _ in range(tables):
        one(key)
    gc.collect()
    seconds = time.perf_counter() - start
    maps_after, rss_after = memory_maps(), resident_mib()
    jax.clear_caches()
    gc.collect()
    return {"scheme": scheme, "ending": ending, "call": call, "tables": tables,
            "maps_per_table": (maps_after - maps) / tables,
            "rss_kib_per_table": (rss_after - rss) * 1024 / tables,
            "maps_before": maps, "maps_after": maps_after,
            "maps_after_clear_caches": memory_maps(),
            "rss_mib_before": rss, "rss_mib_after": rss_after,
            "rss_mib_after_clear_caches": resident_mib(),
            "ms_per_table": seconds * 1e3 / tables}


def compiles(scheme: str, tables: int = 20, calls: int = 5) -> dict:
    """The compiles section for one scheme, in this process."""
    import jax
    from jax import monitoring
    use_scheme(scheme)
    counted = [0]

    def listen(event: str, _duration: float, **_kwargs) -> None:
        if event == "/jax/core/compile/backend_compile_duration":
            counted[0] += 1

    monitoring.register_event_duration_secs_listener(listen)

    def make_step(table):
        @jax.jit
        def step(state, key):
            state, batch = table.sample(state, key, 2, window=2)
            return state, batch["x"].sum()
        return step

    made = [small_table() for _ in range(tables)]
    steps = [make_step(t) for t in made]
    key = jax.random.key(0)
    jax.block_until_ready(made[0].state())  # the state's own program, compiled once
    before = counted[0]
    for table, step in zip(made, steps):
        for _ in range(calls):
            jax.block_until_ready(step(table.state(), key))
    in_steps = counted[0] - before
    before = counted[0]
    for table in made:
        for _ in range(calls):
            jax.block_until_ready(table.sample(key, 2, window=2)["x"])
    eager = counted[0] - before
    return {"scheme": scheme, "tables": tables, "calls_per_table": calls,
            "compiles_per_table_jitted_step": in_steps / tables,
            "compiles_per_table_eager": eager / tables}


def speed(samples: int) -> dict:
    """The speed section: both schemes in this process, taking turns."""
    import jax
    import numpy as np

    import gearjax as gx
    from gearjax import _sample, _sample_args
    from gearjax._call_forms import eager_state
    from gearjax.strategies import Uniform

    table = gx.Table({"obs": gx.Column((17,), "float32")}, capacity=64, max_length=32)
    rng = np.random.default_rng(0)
    for _ in range(64):
        table.insert({"obs": rng.standard_normal((32, 17), np.float32)})
    spec = table._spec
    args = _sample_args.normalise(32, 8, Uniform(), max_length=32)
    key = jax.random.key(0)
    layout = shared_layout(spec)
    EAGER_STATE = eager_state("table.sample(key, ...)", "")  # noqa: N806 (the eager calls' own)
    shared = _shared_program()
    # Each call takes the state and returns (the next state, what to block on).
    def threaded(call):
        return lambda s: (lambda state: (state, state))(call(s))

    # The stateless form passes the eager calls' own zero state and drops
    # the one returned, as Table.sample(key, ...) does eagerly.
    calls = {
        ("per-table", "threaded"): threaded(lambda s: _sample.sample(
            key, s, spec=spec, args=args)[0]),
        ("shared", "threaded"): threaded(lambda s: shared(
            key, s, layout=layout, args=args)[0]),
        ("Table.sample", "threaded"): threaded(lambda s: table.sample(s, key, 32, window=8)[0]),
        ("per-table", "stateless"): lambda s: (s, _sample.sample(
            key, EAGER_STATE, spec=spec, args=args)[1]["obs"]),
        ("shared", "stateless"): lambda s: (s, shared(
            key, EAGER_STATE, layout=layout, args=args)[1]["obs"]),
        ("Table.sample", "stateless"): lambda s: (s, table.sample(key, 32, window=8)["obs"]),
    }
    times: dict = {name: [] for name in calls}
    state = table.state()
    for call in calls.values():  # compile and warm up
        for _ in range(20):
            state, out = call(state)
            jax.block_until_ready(out)
    rounds = max(1, samples // ROUND)
    for r in range(rounds):
        order = list(calls) if r % 2 == 0 else list(reversed(list(calls)))
        for name in order:
            call = calls[name]
            start = time.perf_counter()
            for _ in range(ROUND):
                state, out = call(state)
                jax.block_until_ready(out)
            times[name].append((time.perf_counter() - start) / ROUND)
    table.close()
    result = {}
    for form in ("threaded", "stateless"):
        per, shared_t = times[("per-table", form)], times[("shared", form)]
        result[form] = {
            "per_table_us": statistics.median(per) * 1e6,
            "shared_us": statistics.median(shared_t) * 1e6,
            "table_sample_us": statistics.median(times[("Table.sample", form)]) * 1e6,
            "paired_ratio_per_table_over_shared": statistics.median(
                p / s for p, s in zip(per, shared_t)),
        }
    return {"samples_per_scheme": rounds * ROUND, "round": ROUND, **result}


def in_subprocess(*argv: str) -> dict:
    """Runs this script's one section in a fresh Python process; returns its JSON."""
    done = subprocess.run([sys.executable, __file__, *argv], capture_output=True, text=True,
                          check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.splitlines()[-1])


def report(result: dict) -> str:
    lines = [f"machine: {result['machine']['cpu_model']}, {result['machine']['cores']} cores, "
             f"JAX devices {result['machine']['jax_devices']} (CPU only)", "",
             f"churn: {result['tables']} tables, each called eagerly once",
             "call          scheme     ending  maps/table  RSS KiB/table  ms/table  maps before "
             "-> after -> after jax.clear_caches()"]
    for c in result["churn"]:
        lines.append(f"{c['call']:<13} {c['scheme']:<10} {c['ending']:<6} "
                     f"{c['maps_per_table']:>10.2f} "
                     f"{c['rss_kib_per_table']:>14.1f} {c['ms_per_table']:>9.1f}  "
                     f"{c['maps_before']} -> {c['maps_after']} -> "
                     f"{c['maps_after_clear_caches']}")
    lines += ["", "compiles: 20 tables, 5 calls each",
              "scheme     jitted step compiles/table  eager compiles/table"]
    for c in result["compiles"]:
        lines.append(f"{c['scheme']:<10} {c['compiles_per_table_jitted_step']:>28.2f} "
                     f"{c['compiles_per_table_eager']:>21.2f}")
    s = result["speed"]
    lines += ["", f"speed: {s['samples_per_scheme']} eager samples a scheme (32 x 8 x "
              f"float32[17]), rounds of {s['round']}, medians per call",
              "form       per-table us  shared us  paired ratio  Table.sample us"]
    for form in ("threaded", "stateless"):
        f = s[form]
        lines.append(f"{form:<10} {f['per_table_us']:>12.1f} {f['shared_us']:>10.1f} "
                     f"{f['paired_ratio_per_table_over_shared']:>13.3f} "
                     f"{f['table_sample_us']:>16.1f}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tables", type=int, default=2000)
    parser.add_argument("--samples", type=int, default=2000)
    parser.add_argument("--out", default="benchmarks/results/bench_table_churn_cpu.json")
    parser.add_argument("--section", help=argparse.SUPPRESS)  # one section, in a subprocess
    parser.add_argument("--scheme", help=argparse.SUPPRESS)
    parser.add_argument("--ending", help=argparse.SUPPRESS)
    parser.add_argument("--call", default="sample", help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.section:
        if options.section == "churn":
            out = churn(options.scheme, options.tables, options.ending, options.call)
        elif options.section == "compiles":
            out = compiles(options.scheme)
        else:
            out = speed(options.samples)
        print(json.dumps(out))
        return
    # The speed section first: the shortest, and the one a busy machine disturbs.
    speed_result = in_subprocess("--section", "speed", "--samples", str(options.samples))
    result = {"machine": machine_info(), "tables": options.tables,
              "churn": [in_subprocess("--section", "churn", "--scheme", scheme, "--ending",
                                      ending, "--tables", str(options.tables))
                        for ending in ("drop", "close") for scheme in ("per-table", "shared")]
              + [in_subprocess("--section", "churn", "--scheme", "per-table", "--ending", "drop",
                               "--call", "insert_batch", "--tables", str(options.tables))],
              "compiles": [in_subprocess("--section", "compiles", "--scheme", scheme)
                           for scheme in ("per-table", "shared")],
              "speed": speed_result}
    text = report(result)
    print(text)
    print(f"wrote {write_results(options.out, result, text)}")


if __name__ == "__main__":
    main()
