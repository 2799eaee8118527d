"""The CPU/GPU ratio: how many environment actors a learner needs before it
stops starving.

    python scripts/bench_actors.py                          # 1..4 actors, CartPole
    python scripts/bench_actors.py --actors 1 2 4 8 16 --env HalfCheetah-v5 \\
        --out benchmarks/results/bench_actors_gpu.json

A learner samples its batch inside a jitted training step (``--batch`` rows
of ``--window`` steps, then the gradient of a two-layer MLP of width
``--hidden`` over them) from a table fed by Ray actors
(:class:`gearjax.actors.RayFeeder`, random policies, one environment each).
The table's rate limiter (``SampleToInsertRatio``, ``--samples-per-insert``)
lets each trajectory be sampled that many times on average, so the learner
can only go as fast as the actors bring data: it starves when they are too
few.

Measured, for each actor count, over ``--seconds``: the learner's rows
sampled per second and the actors' environment steps per second (episodes
inserted). First the learner alone on a prefilled table without a limiter,
its ceiling. The ratio reported is the fewest actors at which the learner
reaches 90% of its ceiling (none if it never does). Writes JSON and a PNG of
both curves. Every actor and the learner share this machine's cores: on a
2-core machine the curve is short, and past the core count actors slow one
another down.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import platform
import time

import jax
import jax.numpy as jnp
import numpy as np

import gearjax as gx
from gearjax import actors as gx_actors

CEILING_FRACTION = 0.9


def random_policy(space):
    def policy(state, obs, rng):
        return space.sample() if space is not None else 0
    return policy


def learner_step(table: gx.Table, batch: int, window: int, hidden: int, obs_dim: int):
    """A jitted training step that samples its own batch: returns the new
    parameters and the loss."""
    def loss(params, obs):
        h = jnp.tanh(obs @ params["w1"])
        return jnp.mean((h @ params["w2"]) ** 2)

    @jax.jit
    def step(params, key):
        _, b = table.sample(table.state(), key, batch, window)
        obs = b["observation"] * b.mask[..., None]
        value, grads = jax.value_and_grad(loss)(params, obs)
        return jax.tree.map(lambda p, g: p - 1e-3 * g, params, grads), value

    rng = np.random.default_rng(0)
    params = {"w1": jnp.asarray(rng.normal(size=(obs_dim, hidden)) / np.sqrt(obs_dim),
                                jnp.float32),
              "w2": jnp.asarray(rng.normal(size=(hidden, 1)) / np.sqrt(hidden), jnp.float32)}
    return step, params


def run_learner(step, params, seconds: float) -> tuple[int, float]:
    """Steps for `seconds`; returns (steps, seconds). A step held back by the
    rate limiter past its timeout counts as time without a step."""
    steps, begin = 0, time.perf_counter()
    key = jax.random.key(1)
    while time.perf_counter() - begin < seconds:
        key, sub = jax.random.split(key)
        try:
            params, value = step(params, sub)
            value.block_until_ready()
            steps += 1
        except Exception as e:  # noqa: BLE001 - a starved learner times out
            if "rate limiter" not in str(e) and "timed out" not in str(e):
                raise
    return steps, time.perf_counter() - begin


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--actors", type=int, nargs="+", default=[1, 2, 3, 4])
    parser.add_argument("--env", default="CartPole-v1")
    parser.add_argument("--max-episode-steps", type=int, default=200)
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--window", type=int, default=20)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--samples-per-insert", type=float, default=64.0)
    parser.add_argument("--out", default="benchmarks/results/bench_actors_cpu.json")
    parser.add_argument("--plot-from", metavar="RESULTS.json",
                        help="only draw the PNG of a results file (beside it)")
    args = parser.parse_args()
    if args.plot_from:
        with open(args.plot_from) as f:
            plot(json.load(f), os.path.splitext(args.plot_from)[0] + ".png")
        return

    import gymnasium as gym
    import ray

    make_env = functools.partial(gym.make, args.env, max_episode_steps=args.max_episode_steps)
    probe = make_env()
    obs_dim = int(np.prod(probe.observation_space.shape))
    act_shape = tuple(getattr(probe.action_space, "shape", ()) or ())
    columns = {"observation": gx.Column((obs_dim,), "float32"),
               "action": gx.Column(act_shape, "float32"), "reward": gx.Column((), "float32")}
    capacity = 4096

    def trajectory(episode):
        return {"observation": episode["observations"].reshape(-1, obs_dim),
                "action": episode["actions"].reshape((-1,) + act_shape),
                "reward": episode["rewards"]}

    ray.init(include_dashboard=False, configure_logging=False, log_to_driver=False)
    policy = random_policy(probe.action_space)

    # The ceiling: the learner alone, on a prefilled table with no limiter.
    table = gx.Table(columns, capacity, args.max_episode_steps, placement="host")
    with gx_actors.RayFeeder(table, make_env, policy, actors=2, max_episodes=256,
                             to_trajectory=trajectory) as feeder:
        feeder.wait(600)
    step, params = learner_step(table, args.batch, args.window, args.hidden, obs_dim)
    run_learner(step, params, 1.0)  # compile, warm up
    steps, seconds = run_learner(step, params, args.seconds)
    ceiling = steps * args.batch / seconds
    table.close()
    print(f"learner alone: {ceiling:,.0f} rows/s ({steps / seconds:,.1f} steps/s)", flush=True)

    points = []
    error_buffer = max(4.0 * args.batch, args.samples_per_insert * 4)
    for n in args.actors:
        limiter = gx.SampleToInsertRatio(
            samples_per_insert=args.samples_per_insert, min_size_to_sample=32,
            error_buffer=error_buffer, timeout=1.0)
        table = gx.Table(columns, capacity, args.max_episode_steps, placement="host",
                         rate_limiter=limiter)
        step, params = learner_step(table, args.batch, args.window, args.hidden, obs_dim)
        with gx_actors.RayFeeder(table, make_env, policy, actors=n,
                                 to_trajectory=trajectory) as feeder:
            while len(table) < 32:
                time.sleep(0.05)
            run_learner(step, params, 1.0)  # compile, warm up
            before = feeder.stats()
            steps, seconds = run_learner(step, params, args.seconds)
            after = feeder.stats()
        table.close()
        env_rate = (after["env_steps"] - before["env_steps"]) / (after["seconds"] -
                                                                  before["seconds"])
        rows = steps * args.batch / seconds
        points.append({"actors": n, "learner_rows_per_second": rows,
                       "learner_steps_per_second": steps / seconds,
                       "env_steps_per_second": env_rate,
                       "episodes_per_second": (after["episodes"] - before["episodes"]) /
                       (after["seconds"] - before["seconds"]),
                       "learner_fraction_of_ceiling": rows / ceiling})
        print(f"{n:3d} actors: learner {rows:10,.0f} rows/s ({rows / ceiling:5.1%} of alone), "
              f"actors {env_rate:10,.0f} env steps/s", flush=True)
    ray.shutdown()

    fed = [p["actors"] for p in points if p["learner_fraction_of_ceiling"] >= CEILING_FRACTION]
    result = {"machine": {"platform": platform.platform(), "cpus": os.cpu_count(),
                          "python": platform.python_version(), "jax": jax.__version__,
                          "devices": [f"{d.platform}:{d.device_kind}" for d in jax.devices()]},
              "config": vars(args), "error_buffer": error_buffer,
              "learner_alone_rows_per_second": ceiling,
              "points": points, "ceiling_fraction": CEILING_FRACTION,
              "actors_per_learner": min(fed) if fed else None}
    print("actors per learner (fewest reaching "
          f"{CEILING_FRACTION:.0%} of the learner alone): {result['actors_per_learner']}")
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1)
    plot(result, os.path.splitext(args.out)[0] + ".png")


def plot(result: dict, path: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    points = result["points"]
    n = [p["actors"] for p in points]
    fig, left = plt.subplots(figsize=(6, 4))
    left.plot(n, [p["learner_rows_per_second"] for p in points], "o-", color="C0",
              label="learner rows/s")
    left.axhline(result["learner_alone_rows_per_second"], color="C0", ls=":",
                 label="learner alone (ceiling)")
    left.set_xlabel("actors per learner")
    left.set_xticks(n)
    left.set_ylabel("learner rows sampled / s", color="C0")
    right = left.twinx()
    right.plot(n, [p["env_steps_per_second"] for p in points], "s--", color="C1",
               label="actor env steps/s")
    right.set_ylabel("environment steps / s", color="C1")
    machine = result["machine"]
    left.set_title(f"{result['config']['env']}, {machine['cpus']} CPUs, "
                   f"{machine['devices'][0]}", fontsize=9)
    lines = left.get_lines() + right.get_lines()
    left.legend(lines, [line.get_label() for line in lines], loc="center right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
