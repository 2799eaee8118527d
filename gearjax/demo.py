"""The built-in demo: fill a table with synthetic trajectories, then train a
small policy whose jit-compiled training step samples its own batches from the
table, while a Python thread keeps inserting new trajectories (online replay).

Run it with ``gearjax-demo`` (or ``python -m gearjax``); ``--help`` lists the knobs.
It needs only the core install (jax and numpy, no extra): its Adam optimizer
is written out here rather than taken from optax.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

import gearjax as gx

OBS, ACT = 17, 6

Params = dict[str, jax.Array]


class AdamState(NamedTuple):
    """Adam's step count and running first and second moments of the gradient."""
    step: jax.Array
    mean: Params
    square: Params


def adam_init(params: Params) -> AdamState:
    zeros = jax.tree.map(jnp.zeros_like, params)
    return AdamState(jnp.zeros((), jnp.int32), zeros, zeros)


def adam_update(params: Params, grads: Params, state: AdamState, learning_rate: float,
                beta1: float = 0.9, beta2: float = 0.999,
                eps: float = 1e-8) -> tuple[Params, AdamState]:
    """One Adam step (Kingma and Ba, 2015) with bias-corrected moments."""
    step = state.step + 1
    mean = jax.tree.map(lambda m, g: beta1 * m + (1 - beta1) * g, state.mean, grads)
    square = jax.tree.map(lambda v, g: beta2 * v + (1 - beta2) * g * g, state.square, grads)
    mean_scale = 1 / (1 - beta1 ** step)
    square_scale = 1 / (1 - beta2 ** step)
    params = jax.tree.map(
        lambda p, m, v: p - learning_rate * m * mean_scale / (jnp.sqrt(v * square_scale) + eps),
        params, mean, square)
    return params, AdamState(step, mean, square)


def make_trajectory(rng: np.random.Generator, policy: np.ndarray, length: int) -> dict:
    """An 'expert' whose action is a fixed linear map of the observation, plus noise."""
    obs = rng.standard_normal((length, OBS)).astype(np.float32)
    action = np.tanh(obs @ policy) + 0.05 * rng.standard_normal((length, ACT))
    reward = -np.square(action).sum(-1)
    return {"obs": obs, "action": action.astype(np.float32), "reward": reward.astype(np.float32)}


class Progress:
    """A one-line progress bar on a terminal, plain periodic lines elsewhere.
    (Ours rather than tqdm: the core installs jax and numpy only.)"""

    def __init__(self, total: int, out=sys.stdout):
        self.total, self.out, self.start = total, out, time.perf_counter()
        self.tty = out.isatty()
        self.last_line = -1.0

    def update(self, done: int, note: str) -> None:
        elapsed = time.perf_counter() - self.start
        rate = done / max(elapsed, 1e-9)
        filled = int(30 * done / self.total)
        line = (f"[{'#' * filled}{'.' * (30 - filled)}] {done}/{self.total} steps "
                f"{rate:7.0f} steps/s  {note}")
        if self.tty:
            self.out.write("\r" + line)
            self.out.flush()
        elif elapsed - self.last_line >= 2.0 or done == self.total:
            self.out.write(line + "\n")
            self.last_line = elapsed
        if done == self.total and self.tty:
            self.out.write("\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="gearjax-demo", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--trajectories", type=int, default=500,
                        help="synthetic expert trajectories inserted before training")
    parser.add_argument("--capacity", type=int, default=1000,
                        help="the table's trajectory slots (FIFO eviction beyond them)")
    parser.add_argument("--max-length", type=int, default=200,
                        help="the table's longest trajectory, in steps")
    parser.add_argument("--steps", type=int, default=2000, help="training steps")
    parser.add_argument("--batch-size", type=int, default=64, help="windows per training step")
    parser.add_argument("--window", type=int, default=20, help="steps per sampled window")
    parser.add_argument("--steps-per-call", type=int, default=50,
                        help="training steps fused into one jitted lax.scan")
    parser.add_argument("--seed", type=int, default=0, help="seed of the data and the sampling")
    args = parser.parse_args(argv)

    rng = np.random.default_rng(args.seed)
    expert = rng.standard_normal((OBS, ACT)).astype(np.float32) / np.sqrt(OBS)
    table = gx.Table({"obs": gx.Column((OBS,), "float32"),
                      "action": gx.Column((ACT,), "float32", pad=-10.0),
                      "reward": gx.Column((), "float32")},
                     capacity=args.capacity, max_length=args.max_length, remover="fifo")
    t0 = time.perf_counter()
    table.insert_many([make_trajectory(rng, expert, int(n))
                       for n in rng.integers(args.window, args.max_length + 1, args.trajectories)])
    print(f"filled {table} with {table.num_steps} steps in {time.perf_counter() - t0:.2f} s")

    # Online: a thread keeps inserting (evicting the oldest) while training runs.
    stop = threading.Event()

    def actor():
        actor_rng = np.random.default_rng(args.seed + 1)
        while not stop.is_set():
            table.insert(make_trajectory(actor_rng, expert,
                                         int(actor_rng.integers(args.window, args.max_length + 1))))
            time.sleep(0.002)

    learning_rate = 3e-3
    params = {"w": jnp.zeros((OBS, ACT)), "b": jnp.zeros(ACT)}

    def loss_fn(params, batch):
        prediction = jnp.tanh(batch["obs"] @ params["w"] + params["b"])
        error = jnp.square(prediction - batch["action"]).sum(-1)
        return (error * batch.mask).sum() / batch.mask.sum()

    def train_step(carry, rng_key):
        params, opt_state, state = carry
        # The table state orders the table's calls (gearjax.state): each call
        # takes one and returns the next.
        state, batch = table.sample(state, rng_key, args.batch_size, window=args.window,
                                    strategy=gx.Timestep(), pad="left")
        loss, grads = jax.value_and_grad(loss_fn)(params, batch)
        return (*adam_update(params, grads, opt_state, learning_rate), state), loss

    @jax.jit
    def train_chunk(params, opt_state, state, rng_key):
        keys = jax.random.split(rng_key, args.steps_per_call)
        (params, opt_state, state), losses = jax.lax.scan(
            train_step, (params, opt_state, state), keys)
        return params, opt_state, state, losses

    opt_state, state = adam_init(params), table.state()
    rng_key = jax.random.key(args.seed)
    thread = threading.Thread(target=actor, daemon=True)
    thread.start()
    progress = Progress(args.steps)
    done = 0
    try:
        while done < args.steps:
            rng_key, chunk_key = jax.random.split(rng_key)
            params, opt_state, state, losses = train_chunk(params, opt_state, state, chunk_key)
            done += args.steps_per_call
            progress.update(min(done, args.steps),
                            f"loss {float(losses[-1]):.4f}  table size {len(table)}")
    finally:
        stop.set()
        thread.join()
    s = table.stats()
    print(f"sampled {s['samples']:.0f} windows, inserted {s['inserts']} trajectories "
          f"({s['evictions']} evicted) in {s['seconds_alive']:.1f} s; "
          f"final loss {float(losses[-1]):.4f}")
    table.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
