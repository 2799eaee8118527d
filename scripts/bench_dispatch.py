"""Benchmark: what a table call costs when Python dispatches it, with the table
state passed in and out or made inside the program, against pure JAX, Reverb,
Flashbax and a pre-staged batch.

    python scripts/bench_dispatch.py [--reverb-python path/to/reverb-venv/bin/python]
        [--calls 3000] [--steps 1500] [--out benchmarks/results/bench_dispatch_cpu.json]

Section ``per-call``: one jitted sample of 256 windows of 20 steps of one
float32[17] column (Uniform, ``pad="left"``), from a host table of 1000
trajectories of 200 steps, returning the column; one call at a time, each
blocked on. Forms:

* ``threaded``: the table state passed in and returned (``state, batch =
  table.sample(state, key, ...)``);
* ``threaded-fresh``: the same call starting from ``table.state()`` inside
  the program (nothing passed in or out; programs on one device run in
  dispatch order);
* ``jax-pure``: a control without gearjax, a jitted function returning an
  array of the batch's shape; ``jax-pure+scalar`` the same with one more
  uint32 scalar argument and result (what ``threaded`` adds), to show what
  JAX's dispatch itself charges for it;
* ``reverb`` (with ``--reverb-python``): Reverb's ``TrajectoryDataset``
  batching 256 items of the same 20-step windows (items inserted with a
  ``TrajectoryWriter``, one per window start, from 200 of the trajectories),
  in-process (no gRPC), in its own virtual environment; per batch, as its
  iterator delivers them.

Section ``train-step``: a training step that samples a 64 x 20 batch of
obs float32[17] and action float32[6] and takes an SGD step of a two-layer MLP
(widths 48 and 256) on the masked squared error, one dispatch per step,
blocked on: the two gearjax forms above, ``pre-staged`` (the same step taking a batch
already on the device, one of 64 sampled before timing) and ``flashbax``
(``make_trajectory_buffer`` holding the same trajectories, its state an
argument of the step, sampled inside it).

Forms take turns call by call, in a shuffled order each round, so a noisy
machine's slow phases hit them alike; medians are reported, with the paired
ratio (the median over rounds of one form's time over another's in the same
round) for the goals.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from _machine import machine_info, version_of, write_results
from _reverb import ReverbWorker, reply
from _turns import take_turns

TRAJECTORIES, LENGTH, OBS, ACT = 1000, 200, 17, 6
BATCH, WINDOW = 256, 20
REVERB_TRAJECTORIES = 200  # 36,200 window items


def make_data(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {"obs": rng.standard_normal((TRAJECTORIES, LENGTH, OBS), dtype=np.float32),
            "action": rng.standard_normal((TRAJECTORIES, LENGTH, ACT), dtype=np.float32)}


# ---------------------------------------------------------------------------
# The Reverb worker (runs in Reverb's virtual environment: numpy + reverb)
# ---------------------------------------------------------------------------


def reverb_worker(data_path: str) -> int:
    """Serves ``run <batches>`` (seconds for that many batches) and ``quit``."""
    import reverb  # noqa: PLC0415 (only the worker's interpreter has it)
    import tensorflow as tf  # noqa: PLC0415

    with np.load(data_path) as npz:
        obs = npz["obs"][:REVERB_TRAJECTORIES]
    items = REVERB_TRAJECTORIES * (LENGTH - WINDOW + 1)
    server = reverb.Server(tables=[reverb.Table(
        name="windows", sampler=reverb.selectors.Uniform(), remover=reverb.selectors.Fifo(),
        max_size=items, rate_limiter=reverb.rate_limiters.MinSize(1))])
    client = reverb.Client(f"localhost:{server.port}")
    with client.trajectory_writer(num_keep_alive_refs=WINDOW) as writer:
        for trajectory in obs:
            for t, step in enumerate(trajectory):
                writer.append({"obs": step})
                if t >= WINDOW - 1:
                    writer.create_item("windows", 1.0, {"obs": writer.history["obs"][-WINDOW:]})
            writer.end_episode()
    dataset = reverb.TrajectoryDataset(
        server_address=f"localhost:{server.port}", table="windows",
        max_in_flight_samples_per_worker=2 * BATCH, dtypes={"obs": tf.float32},
        shapes={"obs": tf.TensorShape([WINDOW, OBS])}).batch(BATCH)
    batches = dataset.as_numpy_iterator()
    first = next(batches).data["obs"]
    reply({"ready": True, "python": platform.python_version(), "items": items,
           "batch_shape": list(first.shape),
           "versions": {p: version_of(p) for p in ("dm-reverb", "tensorflow", "tensorflow-cpu",
                                                   "numpy") if version_of(p)}})
    try:
        for line in sys.stdin:
            command = line.split()
            if command and command[0] == "run":
                begin = time.perf_counter()
                for _ in range(int(command[1])):
                    next(batches)
                reply({"seconds": time.perf_counter() - begin})
            elif command and command[0] == "quit":
                break
    finally:
        server.stop()
    return 0


# ---------------------------------------------------------------------------
# The gearjax side
# ---------------------------------------------------------------------------


def filled_table(data: dict[str, np.ndarray]):
    import gearjax as gx
    table = gx.Table({"obs": gx.Column((OBS,), "float32"), "action": gx.Column((ACT,), "float32")},
                     capacity=TRAJECTORIES, max_length=LENGTH, placement="host")
    table.insert_many([{"obs": o, "action": a} for o, a in zip(data["obs"], data["action"])])
    return table


def per_call_forms(table) -> dict:
    """name -> call(i) -> the output to block on."""
    import jax

    def sample(state, key):
        return table.sample(state, key, BATCH, WINDOW, pad="left")

    threaded = jax.jit(lambda s, k: (lambda r: (r[0], r[1]["obs"]))(sample(s, k)))
    fresh = jax.jit(lambda k: sample(table.state(), k)[1]["obs"])
    keys = [jax.random.key_data(k) for k in jax.random.split(jax.random.key(1), 64)]
    state = [table.state()]
    # A control without gearjax: the same pure jitted function with and without one more
    # uint32 scalar argument and result (what the threaded form adds), to show what JAX's
    # dispatch itself charges for it.
    import jax.numpy as jnp
    base = jnp.ones((BATCH, WINDOW, OBS), jnp.float32)
    pure = jax.jit(lambda k: base * k[0].astype(jnp.float32))
    pure_scalar = jax.jit(lambda s, k: (s + 1, base * k[0].astype(jnp.float32)))
    scalar = [jnp.uint32(0)]

    def call_pure_scalar(i):
        scalar[0], out = pure_scalar(scalar[0], keys[i % 64])
        return out

    def call_threaded(i):
        state[0], out = threaded(state[0], keys[i % 64])
        return out

    return {"threaded": call_threaded, "threaded-fresh": lambda i: fresh(keys[i % 64]),
            "jax-pure": lambda i: pure(keys[i % 64]), "jax-pure+scalar": call_pure_scalar}


def mlp_init(width: int, seed: int = 0) -> dict:
    import jax
    import jax.numpy as jnp
    k1, k2, k3 = jax.random.split(jax.random.key(seed), 3)
    scale = lambda n: 1 / np.sqrt(n)  # noqa: E731
    return {"w1": jax.random.normal(k1, (OBS, width)) * scale(OBS), "b1": jnp.zeros(width),
            "w2": jax.random.normal(k2, (width, width)) * scale(width), "b2": jnp.zeros(width),
            "w3": jax.random.normal(k3, (width, ACT)) * scale(width), "b3": jnp.zeros(ACT)}


def sgd_step(params: dict, obs, action, mask) -> tuple[dict, object]:
    import jax
    import jax.numpy as jnp

    def loss_fn(p):
        h = jax.nn.relu(obs @ p["w1"] + p["b1"])
        h = jax.nn.relu(h @ p["w2"] + p["b2"])
        error = jnp.square(h @ p["w3"] + p["b3"] - action).sum(-1) * mask
        return error.sum() / jnp.maximum(mask.sum(), 1)

    loss, grads = jax.value_and_grad(loss_fn)(params)
    return jax.tree.map(lambda p, g: p - 1e-3 * g, params, grads), loss


def train_forms(table, data: dict[str, np.ndarray], width: int) -> dict:
    """name -> step(i) -> the loss to block on, each keeping its own params."""
    import jax
    import jax.numpy as jnp
    B = 64

    def from_table(params, state, key):
        state, batch = table.sample(state, key, B, WINDOW, pad="left")
        params, loss = sgd_step(params, batch["obs"], batch["action"], batch.mask)
        return params, state, loss

    threaded = jax.jit(from_table)
    fresh = jax.jit(lambda p, k: from_table(p, table.state(), k)[::2])
    staged_step = jax.jit(lambda p, o, a, m: sgd_step(p, o, a, m))
    staged = [table.sample(jax.random.key(1000 + i), B, WINDOW, pad="left") for i in range(64)]
    staged = [jax.device_put((b["obs"], b["action"], b.mask)) for b in staged]
    keys = [jax.random.key_data(k) for k in jax.random.split(jax.random.key(2), 64)]
    params = {name: mlp_init(width) for name in
              ("threaded", "threaded-fresh", "pre-staged", "flashbax")}
    state = [table.state()]

    def run_threaded(i):
        params["threaded"], state[0], loss = threaded(params["threaded"], state[0],
                                                      keys[i % 64])
        return loss

    def simple(name, fn):
        def run(i):
            params[name], loss = fn(params[name], keys[i % 64])
            return loss
        return run

    def run_staged(i):
        params["pre-staged"], loss = staged_step(params["pre-staged"], *staged[i % 64])
        return loss

    forms = {"threaded": run_threaded, "threaded-fresh": simple("threaded-fresh", fresh),
             "pre-staged": run_staged}
    try:
        import flashbax as fbx
    except ImportError as error:
        forms["flashbax"] = error
        return forms
    buffer = fbx.make_trajectory_buffer(
        add_batch_size=TRAJECTORIES, sample_batch_size=B, sample_sequence_length=WINDOW,
        period=1, min_length_time_axis=WINDOW, max_length_time_axis=LENGTH)
    bstate = buffer.init({"obs": data["obs"][0, 0], "action": data["action"][0, 0]})
    bstate = jax.jit(buffer.add, donate_argnums=0)(bstate, {"obs": data["obs"],
                                                             "action": data["action"]})
    mask = jnp.ones((B, WINDOW))

    @jax.jit
    def flashbax_step(p, bs, key):
        exp = buffer.sample(bs, jax.random.wrap_key_data(key)).experience
        return sgd_step(p, exp["obs"], exp["action"], mask)

    def run_flashbax(i):
        params["flashbax"], loss = flashbax_step(params["flashbax"], bstate, keys[i % 64])
        return loss

    forms["flashbax"] = run_flashbax
    return forms


# ---------------------------------------------------------------------------
# Timing
# ---------------------------------------------------------------------------


def summary(times: dict[str, list[float]], reference: str) -> dict:
    out = {}
    for name, t in times.items():
        t = np.asarray(t)
        paired = np.median(np.asarray(times[reference]) / t) if reference in times else None
        out[name] = {"median_us": float(np.median(t) * 1e6), "p10_us": float(np.quantile(t, 0.1) * 1e6),
                     "p90_us": float(np.quantile(t, 0.9) * 1e6),
                     f"calls_per_second_over_{reference}_paired": None if paired is None
                     else float(paired)}
    return out


def report(result: dict) -> str:
    m = result["machine"]
    lines = [f"bench_dispatch: {m['cpu_model']}, {m['cores']} cores, python {m['python']}, "
             + ", ".join(f"{p} {v}" for p, v in m["versions"].items()), ""]
    pc = result["per_call"]
    lines.append(f"per call: {BATCH} x {WINDOW} x float32[{OBS}] (Uniform), median of "
                 f"{result['config']['calls']} calls each, blocked on (us; calls/s over "
                 f"jax-pure, paired)")
    for name, s in pc["forms"].items():
        ratio = s.get("calls_per_second_over_jax-pure_paired")
        lines.append(f"  {name:16s} {s['median_us']:9.1f} us   "
                     + (f"x{ratio:.3f} jax-pure" if ratio is not None else ""))
    lines.append("  JAX alone, one more uint32 scalar argument and result: "
                 f"x{pc['jax_extra_scalar_calls_per_second_paired']:.3f} the calls/s (paired)")
    if "reverb" in pc:
        r = pc["reverb"]
        lines.append(f"  {'reverb':16s} " + (f"{r['median_us']:9.1f} us per batch "
                     f"(TrajectoryDataset; threaded is x{r['median_us'] / pc['forms']['threaded']['median_us']:.1f} faster)"
                     if "median_us" in r else f"skipped: {r['skipped']}"))
    for width, section in result["train_step"].items():
        lines += ["", f"train step, MLP width {width}: sample 64 x {WINDOW} + SGD, one dispatch a "
                  f"step, blocked on; median of {result['config']['steps']} steps (us; time over "
                  f"pre-staged, paired)"]
        for name, s in section.items():
            if "skipped" in s:
                lines.append(f"  {name:16s} skipped: {s['skipped']}")
                continue
            over = s.get("time_over_pre-staged_paired")
            lines.append(f"  {name:16s} {s['median_us']:9.1f} us   x{over:.3f} pre-staged"
                         + (f", x{s['time_over_flashbax_paired']:.3f} flashbax"
                            if s.get("time_over_flashbax_paired") else ""))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict | int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=3000, help="timed rounds, per-call")
    parser.add_argument("--steps", type=int, default=1500, help="timed rounds, train-step")
    parser.add_argument("--widths", default="48,256", help="MLP widths of the train step")
    parser.add_argument("--reverb-python", default=None,
                        help="the Python of a virtual environment with dm-reverb and tensorflow")
    parser.add_argument("--reverb-timeout", type=float, default=900.0)
    parser.add_argument("--out", default="benchmarks/results/bench_dispatch_cpu.json")
    parser.add_argument("--reverb-worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--data", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.reverb_worker:
        return reverb_worker(args.data)

    data = make_data()
    table = filled_table(data)
    result = {"config": {"calls": args.calls, "steps": args.steps, "batch": BATCH,
                         "window": WINDOW, "trajectories": TRAJECTORIES, "length": LENGTH},
              "machine": machine_info(("flashbax",)), "load_average_start": os.getloadavg()}
    times = take_turns(per_call_forms(table), args.calls)
    result["per_call"] = {"forms": summary(times, "jax-pure")}
    result["per_call"]["jax_extra_scalar_calls_per_second_paired"] = float(
        np.median(np.asarray(times["jax-pure"]) / np.asarray(times["jax-pure+scalar"])))
    if args.reverb_python:
        with tempfile.TemporaryDirectory() as workdir:
            path = os.path.join(workdir, "data.npz")
            np.savez(path, obs=data["obs"])
            try:
                worker = ReverbWorker(args.reverb_python, str(Path(__file__).resolve()), path,
                                      args.reverb_timeout, os.path.join(workdir, "reverb.log"))
                batches = 50
                seconds = [worker.ask(f"run {batches}")["seconds"] / batches for _ in range(20)]
                worker.close()
                result["per_call"]["reverb"] = {
                    "median_us": float(np.median(seconds) * 1e6), "rounds_of_50_batches": 20,
                    **{k: v for k, v in worker.info.items() if k != "ready"}}
            except (OSError, RuntimeError) as error:
                result["per_call"]["reverb"] = {"skipped": f"the Reverb worker failed: {error}"}
    result["train_step"] = {}
    for width in (int(w) for w in args.widths.split(",")):
        forms = train_forms(table, data, width)
        times = take_turns(forms, args.steps)
        section = summary(times, "pre-staged")
        for name, s in section.items():
            s["time_over_pre-staged_paired"] = float(
                np.median(np.asarray(times[name]) / np.asarray(times["pre-staged"])))
            if "flashbax" in times:
                s["time_over_flashbax_paired"] = float(
                    np.median(np.asarray(times[name]) / np.asarray(times["flashbax"])))
            s.pop("calls_per_second_over_pre-staged_paired", None)
        for name, form in forms.items():
            if not callable(form):
                section[name] = {"skipped": f"{type(form).__name__}: {form}"}
        result["train_step"][str(width)] = section
    table.close()
    result["load_average_end"] = os.getloadavg()
    text = report(result)
    print(text)
    write_results(args.out, result, text)
    return result


if __name__ == "__main__":
    main()
