"""Benchmark: what an eager table call costs against the jitted call of the
same work (issue 49: eager use is how notebooks, host-side loops and tests
call a table, and how a TorchRL user first tries one).

    python scripts/bench_eager.py [--calls 2000] [--trajectories 1000]
        [--out benchmarks/results/bench_eager_cpu.json]

A host table of ``--trajectories`` trajectories of 1,000 steps (obs
float32[17], action float32[6]), the workloads of issue 49's table:

* ``sample``: 256 windows of 20 steps (Uniform, ``pad="left"``), the whole
  batch made and blocked on by every form; forms ``eager``
  (``table.sample(key, ...)``), ``eager-state`` (``state, batch =
  table.sample(state, key, ...)``, the taught form called eagerly, each call
  given the state the last returned),
  ``eager-numpy`` (``table.sample(key, ..., numpy=True)``: NumPy arrays, no
  XLA program), ``eager-numpy-device_put`` (that batch made into JAX arrays
  by ``jax.device_put``: what returning JAX arrays without a program would
  cost) and ``jitted`` (one jitted call, the state passed in and out);
* ``per``: a Prioritized(0.6) sample of 256 windows of 20 and an update of
  their keys' priorities; forms ``eager`` (two stateless calls),
  ``eager-state`` (the two state-form calls eagerly, the state passed from
  call to call), ``eager-numpy`` (the stateless calls, the sample with
  ``numpy=True``) and ``jitted`` (one jitted call doing both); the eager forms
  pass NumPy priorities.

Every form draws with typed keys (``jax.random.key``).

* ``insert``: ``insert_batch`` of 8 trajectories of 100 steps from NumPy
  arrays, forms ``eager``, ``eager-state``, ``jitted`` (taking the same NumPy
  arrays) and ``insert_many`` of the same trajectories (for scale); run last,
  as it evicts;
* ``call``: where the jitted sample's time goes: forms ``jitted`` (as in
  ``sample``), ``jitted-no-table`` (a jitted call returning arrays of the
  batch's shapes made in XLA, no table call: what any jitted call returning a
  batch pays) and ``scan`` (the sample inside a jitted ``lax.scan`` of 16,
  each batch read whole there, per sample).

Forms take turns in a shuffled order each round, so a noisy machine's slow
phases hit them alike, twice: ``interleaved``, call by call, so each call
follows another form's (on this 2-core machine a jitted call leaves XLA's
worker threads and the caches busy with its program, and the next call pays
for it); and ``in runs`` of RUN calls in a row, the first not timed, as a
loop calling one form over and over runs it (how issue 49 measured). Medians
are reported, with each form's paired time over ``jitted`` (the median over
rounds of the ratio in the same round): issue 49's goals are an eager sample
at most 1.3 times the jitted call, the state form eagerly no slower than the
stateless form, and an eager prioritized sample + update at most 0.25 ms.
"""

from __future__ import annotations

import argparse
import os

import numpy as np

from _machine import machine_info, write_results
from _turns import take_turns

LENGTH, OBS, ACT = 1000, 17, 6
BATCH, WINDOW = 256, 20


def filled_table(trajectories: int, seed: int = 0):
    import gearjax as gx
    table = gx.Table({"obs": gx.Column((OBS,), "float32"), "action": gx.Column((ACT,), "float32")},
                     capacity=trajectories, max_length=LENGTH, placement="host")
    rng = np.random.default_rng(seed)
    for _ in range(trajectories):
        table.insert({"obs": rng.standard_normal((LENGTH, OBS), dtype=np.float32),
                      "action": rng.standard_normal((LENGTH, ACT), dtype=np.float32)},
                     priority=float(rng.uniform(0.1, 2.0)))
    return table


def sample_forms(table, keys) -> dict:
    """name -> call(i) -> what to block on: the same sample each way."""
    import jax

    def sample(state, key):
        return table.sample(state, key, BATCH, WINDOW, pad="left")

    # Every form makes the whole batch (columns, keys, mask, ...), as an eager
    # call does: a jitted call returning one column would leave XLA less to do.
    jitted = jax.jit(sample)
    state = [table.state()]

    def call_jitted(i):
        state[0], batch = jitted(state[0], keys[i % len(keys)])
        return batch

    eager_state = [table.state()]

    def call_eager_state(i):
        eager_state[0], batch = sample(eager_state[0], keys[i % len(keys)])
        return batch

    return {"eager": lambda i: table.sample(keys[i % len(keys)], BATCH, WINDOW, pad="left"),
            "eager-state": call_eager_state,
            "eager-numpy": lambda i: table.sample(keys[i % len(keys)], BATCH, WINDOW, pad="left",
                                                  numpy=True),
            # What JAX arrays made from that NumPy batch outside a program
            # would cost: why an eager sample of JAX arrays runs a program.
            "eager-numpy-device_put": lambda i: jax.device_put(table.sample(
                keys[i % len(keys)], BATCH, WINDOW, pad="left", numpy=True)),
            "jitted": call_jitted}


def per_forms(table, keys) -> dict:
    """name -> call(i): a Prioritized sample and the update of its keys."""
    import gearjax as gx
    import jax
    import jax.numpy as jnp
    strategy = gx.Prioritized(0.6)
    ones = np.ones(BATCH, np.float32)

    def step(state, key):
        state, batch = table.sample(state, key, BATCH, WINDOW, strategy)
        state, count = table.update_priorities(state, batch.keys, jnp.ones(BATCH, jnp.float32))
        return state, (batch, count)

    jitted = jax.jit(step)
    state, eager_state = [table.state()], [table.state()]

    def call_eager(i):
        batch = table.sample(keys[i % len(keys)], BATCH, WINDOW, strategy)
        return batch, table.update_priorities(batch.keys, ones)

    def call_eager_state(i):
        s, batch = table.sample(eager_state[0], keys[i % len(keys)], BATCH, WINDOW, strategy)
        eager_state[0], count = table.update_priorities(s, batch.keys, ones)
        return batch, count

    def call_eager_numpy(i):
        batch = table.sample(keys[i % len(keys)], BATCH, WINDOW, strategy, numpy=True)
        return batch, table.update_priorities(batch.keys, ones)

    def call_jitted(i):
        state[0], out = jitted(state[0], keys[i % len(keys)])
        return out

    return {"eager": call_eager, "eager-state": call_eager_state,
            "eager-numpy": call_eager_numpy, "jitted": call_jitted}


SCAN_STEPS = 16
RUN = 20  # calls in a row per turn, for the "in runs" figures (_turns.take_turns)
INSERT_ROWS, INSERT_STEPS = 8, 100


def insert_forms(table) -> dict:
    """name -> call(i): insert_batch of 8 trajectories of 100 steps given as
    NumPy arrays (a host-side loop's rollouts): ``eager`` and ``eager-state``
    (both forms called eagerly: the rows go straight to the native core),
    ``jitted`` (one jitted call taking the same NumPy arrays) and
    ``insert_many`` (the host insert of the same trajectories, for scale)."""
    import jax
    rng = np.random.default_rng(1)
    columns = {"obs": rng.standard_normal((INSERT_ROWS, INSERT_STEPS, OBS), dtype=np.float32),
               "action": rng.standard_normal((INSERT_ROWS, INSERT_STEPS, ACT), dtype=np.float32)}
    lengths = np.full(INSERT_ROWS, INSERT_STEPS)
    jitted = jax.jit(lambda state, c, n: table.insert_batch(state, c, n))
    states = {"jitted": [table.state()], "eager-state": [table.state()]}
    trajectories = [{n: c[i] for n, c in columns.items()} for i in range(INSERT_ROWS)]

    def call_jitted(i):
        states["jitted"][0], keys = jitted(states["jitted"][0], columns, lengths)
        return keys

    def call_eager_state(i):
        states["eager-state"][0], keys = table.insert_batch(states["eager-state"][0], columns,
                                                            lengths)
        return keys

    return {"eager": lambda i: table.insert_batch(columns, lengths),
            "eager-state": call_eager_state, "jitted": call_jitted,
            "insert_many": lambda i: table.insert_many(trajectories)}


def call_forms(table, keys) -> dict:
    """name -> call(i): where a jitted call's time goes (issue 49, item 3:
    the jitted call within 1.5x of the same sample inside lax.scan). ``jitted``
    samples and returns the whole batch; ``jitted-no-table`` returns arrays of
    the batch's shapes and dtypes made in XLA (filled with a word of the key,
    so the program has an input) with no table call, what any jitted call
    returning a batch pays; ``scan`` is a jitted lax.scan of SCAN_STEPS
    samples, each read whole inside it (summed), timed per sample;
    ``jitted-where`` is ``jitted`` that also returns
    ``jnp.where(batch.mask, batch.timestep, -1)`` (the ``steps`` a per-step
    priority update is given): 5,120 selects, which take XLA's CPU client past
    its bound for running a program on the calling thread (a program of fewer
    than 1,000 flops by XLA's cost analysis runs there, a larger one on a
    worker thread of its own: PjRt's cpu_client.cc, ``cheap_computation_``),
    so the pair measures that hand-over (``program_flops`` in the results)."""
    import jax
    import jax.numpy as jnp

    def sample(state, key):
        return table.sample(state, key, BATCH, WINDOW, pad="left")

    jitted = jax.jit(sample)
    _, shapes = jax.eval_shape(sample, table.state(), keys[0])

    @jax.jit
    def with_where(state, key):
        state, batch = sample(state, key)
        return state, (batch, jnp.where(batch.mask, batch.timestep, -1))

    @jax.jit
    def no_table(state, key):
        word = jax.random.key_data(key)[0]
        return state, jax.tree.map(lambda s: jnp.full(s.shape, word, s.dtype), shapes)

    @jax.jit
    def scanned(state, key):
        # Each sample read whole (a sum of every array, so nothing is left
        # out), as a training step inside the scan would read it.
        def body(carry, k):
            state, total = carry
            state, batch = sample(state, k)
            read = sum(jnp.sum(x.astype(jnp.float32)) for x in jax.tree.leaves(batch))
            return (state, total + read), None
        (state, total), _ = jax.lax.scan(body, (state, jnp.float32(0)),
                                         jax.random.split(key, SCAN_STEPS))
        return state, total

    states = {name: [table.state()] for name in ("jitted", "where", "no-table", "scan")}

    def threaded(name, program):
        def call(i):
            states[name][0], out = program(states[name][0], keys[i % len(keys)])
            return out
        call.program = program
        return call

    return {"jitted": threaded("jitted", jitted),
            "jitted-where": threaded("where", with_where),
            "jitted-no-table": threaded("no-table", no_table),
            "scan": threaded("scan", scanned)}


def program_flops(table, keys) -> dict[str, float]:
    """The flops XLA's cost analysis gives each jitted program of
    call_forms (what XLA's CPU client compares with 1,000 to run a program on
    the calling thread or on a worker)."""
    flops = {}
    for name, call in call_forms(table, keys).items():
        cost = call.program.lower(table.state(), keys[0]).compile().cost_analysis()
        if isinstance(cost, list):  # older JAX: one dict per device
            cost = cost[0] if cost else {}
        flops[name] = float(cost.get("flops", float("nan")))
    return flops


def summary(times: dict[str, list[float]]) -> dict:
    reference = np.asarray(times["jitted"])
    return {name: {"median_us": float(np.median(t) * 1e6),
                   "p10_us": float(np.quantile(t, 0.1) * 1e6),
                   "p90_us": float(np.quantile(t, 0.9) * 1e6),
                   "time_over_jitted_paired": float(np.median(np.asarray(t) / reference))}
            for name, t in times.items()}


def report(result: dict) -> str:
    m, c = result["machine"], result["config"]
    lines = [f"bench_eager: {m['cpu_model']}, {m['cores']} cores, python {m['python']}, "
             + ", ".join(f"{p} {v}" for p, v in m["versions"].items()),
             f"host table of {c['trajectories']} trajectories of {LENGTH} steps; "
             f"{BATCH} windows of {WINDOW}; median of {c['calls']} calls each (us; time over "
             f"jitted, paired)"]
    lines.append("flops of each jitted program of the call section (XLA's cost analysis; the "
                 "CPU client runs one below 1,000 on the calling thread): "
                 + ", ".join(f"{n} {f:g}" for n, f in result.get("program_flops", {}).items()))
    for section, title in (("sample", "sample (Uniform)"),
                           ("per", "Prioritized(0.6) sample + update_priorities"),
                           ("call", f"the jitted call (scan: per sample, of {SCAN_STEPS})"),
                           ("insert", f"insert_batch of {INSERT_ROWS} x {INSERT_STEPS} steps "
                                      f"from NumPy")):
        lines.append(f"{title}:")
        lines.append(f"  {'':24s} {'interleaved':>20s}   {f'in runs of {RUN}':>20s}")
        for name, s in result[section].items():
            r = result[section + "_runs"][name]
            lines.append(f"  {name:24s} {s['median_us']:9.1f} us x{s['time_over_jitted_paired']:.3f}"
                         f"   {r['median_us']:9.1f} us x{r['time_over_jitted_paired']:.3f} jitted")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=2000, help="timed rounds per section")
    parser.add_argument("--trajectories", type=int, default=1000)
    parser.add_argument("--out", default="benchmarks/results/bench_eager_cpu.json")
    args = parser.parse_args(argv)

    import jax
    table = filled_table(args.trajectories)
    keys = [jax.random.key(k) for k in range(64)]
    result = {"config": {"calls": args.calls, "trajectories": args.trajectories,
                         "length": LENGTH, "batch": BATCH, "window": WINDOW},
              "machine": machine_info(), "load_average_start": os.getloadavg()}
    sections = {"sample": lambda: sample_forms(table, keys), "per": lambda: per_forms(table, keys),
                "call": lambda: call_forms(table, keys),
                "insert": lambda: insert_forms(table)}  # evicts: last
    result["program_flops"] = program_flops(table, keys)
    for section, forms in sections.items():
        for suffix, run in (("", 1), ("_runs", RUN)):
            times = take_turns(forms(), args.calls, run=run)
            if section == "call":
                times["scan"] = [t / SCAN_STEPS for t in times["scan"]]
            result[section + suffix] = summary(times)
    table.close()
    result["load_average_end"] = os.getloadavg()
    text = report(result)
    print(text)
    write_results(args.out, result, text)
    return result


if __name__ == "__main__":
    main()
