"""Benchmark: decision-transformer training throughput by where the batch
comes from.

The same jitted training step (model, loss, AdamW update; batch 64 windows of
K = 20 from the built-in default dataset) is fed four ways:

  in-jit          gearjax: the step samples its own batch inside the compiled
                  program (``state, batch = table.sample(state, ..., gx.Timestep(),
                  pad="left")``, the state in the scan's carry),
                  ``steps_per_call`` steps per dispatch in ``lax.scan``.
  device-batch    the step picks one of 64 batches already on the device (an
                  index drawn in the step), same scan: no sampling at all.
                  The lower bound in-jit sampling is measured against.
  numpy-put       the common way: a NumPy sampler (Timestep strategy, windows
                  left-padded like gearjax's) builds a batch, ``device_put``
                  sends it, then one jitted step runs; repeated per step.
  numpy-put-scan  the NumPy sampler builds ``steps_per_call`` batches, one
                  ``device_put`` of the stack, one scanned dispatch.

Each mode is warmed up (compile + one call), then the modes take turns, one
timed call each, ``--calls`` rounds; a call is ``steps_per_call`` steps (the
NumPy per-step mode runs the same number of steps, one dispatch each), blocking
on its result. Reported: steps per second from the median call, per model
size, and the cost of in-jit sampling relative to device-batch,
``1 - rate(in-jit) / rate(device-batch)`` (the goal: under 5%; negative means
in-jit was faster).

    python scripts/bench_dt_step.py [--sizes tiny,reference] [--calls 5]
        [--out benchmarks/results/bench_dt_step_cpu.json]
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

import jax
import numpy as np
from flax import nnx

import gearjax as gx
from gearjax.dt import data as D
from gearjax.dt import generate
from gearjax.dt.model import DTConfig
from gearjax.dt.train import Learner, Normalizer, TrainConfig

DEFAULT_OUT = Path(__file__).resolve().parent.parent / "benchmarks" / "results" / \
    "bench_dt_step_cpu.json"


class NumpySampler:
    """Timestep-strategy windows with NumPy: episodes in proportion to their
    length, a uniform start, windows cut at the episode's end and left-padded
    with zeros (as gearjax pads)."""

    def __init__(self, data: D.Episodes, seed: int = 0):
        self.rng = np.random.default_rng(seed)
        self.lengths = np.array([len(e["rewards"]) for e in data.episodes])
        self.offsets = np.concatenate([[0], np.cumsum(self.lengths)[:-1]])
        flat = [D.episode_to_trajectory(e) for e in data.episodes]
        self.columns = {name: np.concatenate([f[name] for f in flat]) for name in flat[0]}
        self.p = self.lengths / self.lengths.sum()

    def __call__(self, batch_size: int, window: int) -> gx.Batch:
        episode = self.rng.choice(len(self.lengths), size=batch_size, p=self.p)
        length = self.lengths[episode]
        start = (self.rng.random(batch_size) * length).astype(np.int64)
        real = np.minimum(window, length - start)                  # steps before the end
        pad = window - real
        pos = np.arange(window)[None, :] - pad[:, None]            # -pad .. real-1
        mask = pos >= 0
        step = start[:, None] + np.maximum(pos, 0)
        index = self.offsets[episode][:, None] + step
        columns = {name: np.where(mask.reshape(*mask.shape, *([1] * (col.ndim - 1))),
                                  col[index], 0).astype(col.dtype)
                   for name, col in self.columns.items()}
        return gx.Batch(columns=columns, mask=mask, timestep=np.where(mask, step, 0)
                        .astype(np.int32), keys=episode.astype(np.int64),
                        start=start.astype(np.int32),
                        probability=self.p[episode].astype(np.float32),
                        table_size=np.full(batch_size, len(self.lengths), np.int64))


def stack(batches: list[gx.Batch]) -> gx.Batch:
    return jax.tree.map(lambda *xs: np.stack(xs), *batches)


def timed(fn, calls: int) -> float:
    """Seconds per call, after a warm-up call."""
    jax.block_until_ready(fn())
    start = time.perf_counter()
    for _ in range(calls):
        jax.block_until_ready(fn())
    return (time.perf_counter() - start) / calls


def round_robin(fns: dict, calls: int) -> dict[str, list[float]]:
    """Each function warmed up, then timed call by call in turns, so that a
    noisy machine's slow phases hit every mode alike; seconds per call."""
    for fn in fns.values():
        jax.block_until_ready(fn())
    seconds: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(calls):
        for name, fn in fns.items():
            start = time.perf_counter()
            jax.block_until_ready(fn())
            seconds[name].append(time.perf_counter() - start)
    return seconds


def bench_size(size: str, data: D.Episodes, calls: int, steps_per_call: int,
               batch_size: int, context: int) -> dict:
    table = D.make_table(data)
    normalizer = Normalizer(*data.state_stats(), rtg_scale=100.0)
    model_config = DTConfig.sized(size, obs_dim=data.obs_dim, act_dim=data.act_dim,
                                  context=context)
    train = TrainConfig(batch_size=batch_size, steps_per_call=steps_per_call)
    numpy_sampler = NumpySampler(data)
    staged = jax.device_put(stack([numpy_sampler(batch_size, context) for _ in range(64)]))

    def from_device(state, key):
        return state, jax.tree.map(lambda x: x[jax.random.randint(key, (), 0, 64)], staged)

    in_jit = Learner(model_config, normalizer, table, train)
    on_device = Learner(model_config, normalizer, config=train, sampler=from_device)
    per_step = Learner(model_config, normalizer, table, train)
    scanned = Learner(model_config, normalizer, table, train)

    def numpy_put_per_step():
        for _ in range(steps_per_call):
            metrics = per_step.train_on(jax.device_put(stack([numpy_sampler(batch_size,
                                                                            context)])))
        return metrics["loss"]

    def numpy_put_scan():
        batches = [numpy_sampler(batch_size, context) for _ in range(steps_per_call)]
        return scanned.train_on(jax.device_put(stack(batches)))["loss"]

    calls_seconds = round_robin({
        "in-jit": lambda: in_jit.train(steps_per_call)["loss"],
        "device-batch": lambda: on_device.train(steps_per_call)["loss"],
        "numpy-put": numpy_put_per_step,
        "numpy-put-scan": numpy_put_scan,
    }, calls)
    sampler_seconds = timed(lambda: numpy_sampler(batch_size, context), 50)
    rates = {mode: steps_per_call / float(np.median(s)) for mode, s in calls_seconds.items()}
    return {"size": size, "steps_per_second": rates, "seconds_per_call": calls_seconds,
            "in_jit_cost_vs_device_batch": 1 - rates["in-jit"] / rates["device-batch"],
            "numpy_sampler_ms_per_batch": 1e3 * sampler_seconds,
            "parameters": int(sum(x.size for x in jax.tree.leaves(
                nnx.state(in_jit.model, nnx.Param))))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="tiny,reference")
    parser.add_argument("--calls", type=int, default=7, help="timed calls per mode")
    parser.add_argument("--steps-per-call", type=int, default=50)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--context", type=int, default=20)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args()
    data = generate.generate()
    results = {"machine": {"platform": platform.platform(), "processor": platform.processor(),
                           "jax_backend": jax.default_backend(),
                           "devices": [str(d) for d in jax.devices()]},
               "batch_size": args.batch_size, "context": args.context,
               "steps_per_call": args.steps_per_call, "calls": args.calls, "sizes": {}}
    print(f"{'size':>10} {'mode':>15} {'steps/s':>9}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    for size in args.sizes.split(","):
        r = bench_size(size, data, args.calls, args.steps_per_call, args.batch_size,
                       args.context)
        results["sizes"][size] = r
        for mode, rate in r["steps_per_second"].items():
            print(f"{size:>10} {mode:>15} {rate:9.1f}")
        print(f"{size:>10} in-jit sampling costs {100 * r['in_jit_cost_vs_device_batch']:.1f}% "
              f"of the step (vs a batch already on the device)", flush=True)
        # After each size: a run cut short (scripts/gpu_check.sh's budgets)
        # keeps the sizes it finished.
        args.out.write_text(json.dumps(results, indent=1))
    print(f"results: {args.out}")


if __name__ == "__main__":
    main()
