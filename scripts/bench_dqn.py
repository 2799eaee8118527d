"""Benchmark: a CleanRL-style DQN on CartPole-v1, end to end, with its replay
in a gearjax table against the same agent with a NumPy ring buffer.

    python scripts/bench_dqn.py [--steps 60000] [--seeds 0,1]
        [--out benchmarks/results/bench_dqn_cpu.json]

The agent is CleanRL's ``dqn_jax.py`` for CartPole, written as a new user would
write it: a Q-network 4 -> 120 -> 84 -> 2 (ReLU), Adam (2.5e-4), gamma 0.99,
a replay of 10,000 transitions, batch 128, one jitted update every 10
environment steps after the first 1,000, the target network copied every 500
steps, epsilon from 1 to 0.05 over half the run; actions chosen one step at a
time by a jitted forward pass. Replays:

* ``gearjax``: a table of 10,000 one-step transitions (``max_length=1``;
  columns obs, action, reward, next_obs, done), ``table.insert_step`` per
  environment step, and the update samples its own batch inside the jitted
  update (``state, batch = table.sample(table.state(), key, 128, 1)``: the
  state form, starting from a fresh state in each program);
* ``numpy``: a NumPy ring buffer of the same columns, written per step and
  sampled on the host (uniform indices, fancy indexing), the batch passed to
  the jitted update.

Each run is timed from its first environment step to its last, the jitted
functions compiled before; reported are environment steps per second and the
mean return of the last 20 episodes. Systems take turns run by run, seed by
seed.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path

import numpy as np

from _machine import cpu_model, version_of

CAPACITY, BATCH, GAMMA = 10_000, 128, 0.99
LEARNING_STARTS, TRAIN_EVERY, TARGET_EVERY = 1_000, 10, 500
SYSTEMS = ("gearjax", "numpy")


def q_init(key):
    import jax
    import jax.numpy as jnp
    sizes = [(4, 120), (120, 84), (84, 2)]
    keys = jax.random.split(key, len(sizes))
    return [(jax.random.uniform(k, s, minval=-1, maxval=1) / np.sqrt(s[0]), jnp.zeros(s[1]))
            for k, s in zip(keys, sizes)]


def q_values(params, obs):
    import jax
    h = obs
    for i, (w, b) in enumerate(params):
        h = h @ w + b
        if i < len(params) - 1:
            h = jax.nn.relu(h)
    return h


def make_update(optimizer, sample):
    """The jitted update: ``sample(key, *batch_args) -> (obs, action, reward,
    next_obs, done)`` makes the batch (inside the program, or from the given
    host batch)."""
    import jax
    import jax.numpy as jnp
    import optax

    @jax.jit
    def update(params, target, opt_state, key, *batch_args):
        obs, action, reward, next_obs, done = sample(key, *batch_args)
        next_q = q_values(target, next_obs).max(-1)
        target_q = reward + GAMMA * next_q * (1.0 - done.astype(jnp.float32))

        def loss_fn(p):
            q = jnp.take_along_axis(q_values(p, obs), action[:, None].astype(jnp.int32), -1)
            return jnp.mean((q[:, 0] - jax.lax.stop_gradient(target_q)) ** 2)

        loss, grads = jax.value_and_grad(loss_fn)(params)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    return update


class NumpyReplay:
    def __init__(self, seed: int):
        self.obs = np.zeros((CAPACITY, 4), np.float32)
        self.next_obs = np.zeros((CAPACITY, 4), np.float32)
        self.action = np.zeros(CAPACITY, np.int32)
        self.reward = np.zeros(CAPACITY, np.float32)
        self.done = np.zeros(CAPACITY, np.bool_)
        self.size = self.at = 0
        self.rng = np.random.default_rng(seed)

    def add(self, obs, action, reward, next_obs, done):
        i = self.at
        self.obs[i] = obs
        self.action[i] = action
        self.reward[i] = reward
        self.next_obs[i] = next_obs
        self.done[i] = done
        self.at = (i + 1) % CAPACITY
        self.size = min(self.size + 1, CAPACITY)

    def batch(self):
        i = self.rng.integers(0, self.size, BATCH)
        return self.obs[i], self.action[i], self.reward[i], self.next_obs[i], self.done[i]


def gearjax_replay():
    import gearjax as gx
    return gx.Table({"obs": gx.Column((4,), "float32"), "action": gx.Column((), "int32"),
                     "reward": gx.Column((), "float32"), "next_obs": gx.Column((4,), "float32"),
                     "done": gx.Column((), "bool")}, capacity=CAPACITY, max_length=1,
                    placement="host")


def run(system: str, steps: int, seed: int) -> dict:
    import gymnasium as gym
    import jax
    import jax.numpy as jnp
    import optax

    env = gym.make("CartPole-v1")
    optimizer = optax.adam(2.5e-4)
    params = q_init(jax.random.key(seed))
    target = params
    opt_state = optimizer.init(params)
    act = jax.jit(lambda p, o: jnp.argmax(q_values(p, o)))
    if system == "numpy":
        replay = NumpyReplay(seed)
        update = make_update(optimizer, lambda key, *batch: batch)
        add = replay.add
    else:
        table = gearjax_replay()

        def from_table(key):
            _, b = table.sample(table.state(), key, BATCH, 1)
            return (b["obs"][:, 0], b["action"][:, 0], b["reward"][:, 0], b["next_obs"][:, 0],
                    b["done"][:, 0])

        update = make_update(optimizer, from_table)

        def add(obs, action, reward, next_obs, done):
            table.insert_step({"obs": obs, "action": action, "reward": reward,
                               "next_obs": next_obs, "done": done})
    rng = np.random.default_rng(seed)
    key = jax.random.key(seed + 100)
    obs, _ = env.reset(seed=seed)
    # Compile before the clock starts (ahead of time: nothing runs).
    jax.block_until_ready(act(params, obs))
    example = (NumpyReplay(seed).obs[:BATCH], NumpyReplay(seed).action[:BATCH],
               np.zeros(BATCH, np.float32), np.zeros((BATCH, 4), np.float32),
               np.zeros(BATCH, np.bool_)) if system == "numpy" else ()
    update = update.lower(params, target, opt_state, key, *example).compile()
    returns, episode_return, losses = [], 0.0, []
    begin = time.perf_counter()
    for step in range(steps):
        epsilon = max(0.05, 1.0 - step / (0.5 * steps) * 0.95)
        if rng.random() < epsilon:
            action = int(rng.integers(2))
        else:
            action = int(act(params, obs))
        next_obs, reward, terminated, truncated, _ = env.step(action)
        add(obs, action, float(reward), next_obs, bool(terminated))
        episode_return += float(reward)
        obs = next_obs
        if terminated or truncated:
            returns.append(episode_return)
            episode_return = 0.0
            obs, _ = env.reset()
        if step >= LEARNING_STARTS and step % TRAIN_EVERY == 0:
            key, sub = jax.random.split(key)
            batch = replay.batch() if system == "numpy" else ()
            params, opt_state, loss = update(params, target, opt_state, sub, *batch)
            if step % 1000 == 0:
                losses.append(float(loss))
        if step % TARGET_EVERY == 0:
            target = params
    seconds = time.perf_counter() - begin
    if system != "numpy":
        samples = table.stats()["samples"]
        table.close()
    else:
        samples = None
    return {"system": system, "seed": seed, "steps": steps, "seconds": seconds,
            "env_steps_per_second": steps / seconds, "episodes": len(returns),
            "mean_return_last_20": float(np.mean(returns[-20:])) if returns else None,
            "loss_every_1000_steps": losses, "rows_sampled": samples}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=60_000)
    parser.add_argument("--seeds", default="0,1")
    parser.add_argument("--systems", default=",".join(SYSTEMS),
                        help=f"comma-separated subset of {','.join(SYSTEMS)}")
    parser.add_argument("--out", default="benchmarks/results/bench_dqn_cpu.json")
    args = parser.parse_args(argv)
    systems = args.systems.split(",")
    unknown = sorted(set(systems) - set(SYSTEMS))
    if unknown:
        parser.error(f"unknown systems {unknown}; choose from {','.join(SYSTEMS)}")
    runs = []
    for seed in (int(s) for s in args.seeds.split(",")):
        for system in systems:
            runs.append(run(system, args.steps, seed))
            r = runs[-1]
            print(f"{system:16s} seed {seed}: {r['env_steps_per_second']:8.0f} env steps/s, "
                  f"return (last 20 episodes) {r['mean_return_last_20']:.1f}", flush=True)
    summary = {}
    for system in systems:
        mine = [r for r in runs if r["system"] == system]
        summary[system] = {"env_steps_per_second": [r["env_steps_per_second"] for r in mine],
                           "mean_return_last_20": [r["mean_return_last_20"] for r in mine]}
    if "numpy" in summary:
        for system in systems:
            summary[system]["steps_per_second_over_numpy"] = [
                a / b for a, b in zip(summary[system]["env_steps_per_second"],
                                      summary["numpy"]["env_steps_per_second"])]
    import jax
    result = {"config": {"steps": args.steps, "capacity": CAPACITY, "batch": BATCH,
                         "learning_starts": LEARNING_STARTS, "train_every": TRAIN_EVERY,
                         "target_every": TARGET_EVERY},
              "machine": {"platform": platform.platform(), "cpu_model": cpu_model(),
                          "cores": len(os.sched_getaffinity(0)),
                          "python": platform.python_version(),
                          "jax_devices": [str(d) for d in jax.devices()],
                          "versions": {p: version_of(p) for p in
                                       ("gearjax", "jax", "jaxlib", "numpy", "gymnasium",
                                        "optax")}},
              "runs": runs, "summary": summary}
    lines = [f"bench_dqn: CartPole-v1, {args.steps} steps a run, {result['machine']['cpu_model']}, "
             f"{result['machine']['cores']} cores"]
    for system, s in summary.items():
        lines.append(f"  {system:16s} env steps/s "
                     + ", ".join(f"{v:.0f}" for v in s["env_steps_per_second"])
                     + "; return (last 20) " + ", ".join(f"{v:.1f}" for v in s["mean_return_last_20"])
                     + ("; x numpy " + ", ".join(f"{v:.2f}" for v in s["steps_per_second_over_numpy"])
                        if "steps_per_second_over_numpy" in s else ""))
    text = "\n".join(lines)
    print(text)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n")
    out.with_suffix(".txt").write_text(text + "\n")
    return result


if __name__ == "__main__":
    main()
