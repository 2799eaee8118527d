"""Offline datasets made here, from environments that need no downloads
(gymnasium's classic control), by mixtures of behaviour policies: random,
noisy, bad and good. Each episode records its policy's label and its return;
the metadata keeps each policy's mean return and the reference returns that
normalised scores use (random = 0, the good behaviour policy = 100).

Mixtures (:func:`mixture` by name):

- ``"mountaincar"``, the built-in default (:data:`DEFAULT`):
  MountainCarContinuous-v0. The good policy pumps energy at 40% throttle and
  reaches the flag (return about 97); "noisy" pumps at full throttle with
  Gaussian noise (about 94); "timid" pumps but backs off whenever it moves
  right past x = -0.3, so it never leaves the valley (about -100); "random"
  is uniform (about -33). Timid and random episodes run the full 999 steps, so
  most of the data is bad and, in the states where the policies disagree,
  behaviour cloning follows the timid majority; conditioning on a high return
  tells them apart.
- ``"halfcheetah"``: MuJoCo's HalfCheetah-v5 with hand-made reflex gaits
  (:mod:`gearjax.dt.locomotion`): random, noisy, medium and good.
- ``"pendulum"``: Pendulum-v1 with an energy-shaping swing-up controller as
  the good policy. Its returns depend strongly on the random initial angle,
  which makes a single target return a poor instruction (see the docs'
  Decision transformers results).

Command line (writes any of the formats of :mod:`gearjax.dt.data`)::

    gearjax-dataset --out data.npz          # or .hdf5, or a directory (Minari)
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence

import numpy as np

from gearjax.actors import rollout
from gearjax.dt.behaviour import Mixture, noisy, uniform_random
from gearjax.dt.data import Episodes, save
from gearjax.dt.locomotion import HALFCHEETAH


# ------------------------------------------------------------------ MountainCarContinuous-v0 policies
def mountaincar_pump(obs: np.ndarray, rng: np.random.Generator | None = None,
                     throttle: float = 1.0) -> np.ndarray:
    """Pushes along the car's velocity (left when still), which adds energy
    every swing until the car crests the right hill."""
    return np.array([throttle if obs[1] > 0 else -throttle], np.float32)


def mountaincar_timid(obs: np.ndarray, rng: np.random.Generator | None = None) -> np.ndarray:
    """Pumps like :func:`mountaincar_pump` but pushes back whenever it moves
    right past x = -0.3: it keeps rocking in the valley and never arrives."""
    if obs[0] > -0.3 and obs[1] > 0:
        return np.array([-1.0], np.float32)
    return mountaincar_pump(obs, rng)


# ------------------------------------------------------------------ Pendulum-v1 policies
def pendulum_swing_up(obs: np.ndarray, rng: np.random.Generator | None = None,
                      max_torque: float = 2.0) -> np.ndarray:
    """A good Pendulum-v1 controller. Near the top (cos theta > 0.8) a PD law
    holds the pole up; elsewhere torque pumps energy towards the upright
    rest energy of the rod (E = w^2 / 6 + (g / 2) cos theta per unit mass and
    length, g = 10), pushing along the angular velocity. Mean return about
    -146 (random: about -1267); with ``max_torque`` 0.6 ("weak") about -336
    (the generated set of ``benchmarks/results/dt_vs_bc_pendulum_cpu.json``)."""
    cos, sin, w = obs
    if cos > 0.8:
        u = -12.0 * np.arctan2(sin, cos) - 2.5 * w
    else:
        energy = w * w / 6.0 + 5.0 * cos
        u = 3.0 * (5.0 - energy) * (np.sign(w) if abs(w) > 1e-3 else 1.0)
    return np.clip(np.array([u], np.float32), -max_torque, max_torque)


def pendulum_hold_down(obs: np.ndarray, rng: np.random.Generator | None = None) -> np.ndarray:
    """A bad Pendulum-v1 controller: brakes the pole's motion, so it settles
    hanging down (mean return about -1873 with noise, in the same set)."""
    return np.clip(np.array([-2.0 * obs[2]], np.float32), -2.0, 2.0)


MOUNTAINCAR = Mixture("MountainCarContinuous-v0", (
    ("random", uniform_random, 10),
    ("timid", lambda lo, hi: mountaincar_timid, 20),
    ("noisy", lambda lo, hi: noisy(mountaincar_pump, 0.5, lo, hi), 10),
    ("good", lambda lo, hi: lambda obs, rng: mountaincar_pump(obs, rng, throttle=0.4), 10),
), good="good")

# Behaviour cloning of this mixture averages braking and pumping near the
# bottom; conditioning on a high return should tell them apart, but the
# return also depends on the initial angle.
PENDULUM = Mixture("Pendulum-v1", (
    ("random", uniform_random, 20),
    ("brake", lambda lo, hi: noisy(pendulum_hold_down, 0.5, lo, hi), 20),
    ("weak", lambda lo, hi: lambda obs, rng: pendulum_swing_up(obs, rng, max_torque=0.6), 20),
    ("good", lambda lo, hi: pendulum_swing_up, 20),
), good="good")

DEFAULT = MOUNTAINCAR
MIXTURE_NAMES = ("mountaincar", "pendulum", "halfcheetah")


def mixture(name: str) -> Mixture:
    """A built-in mixture by name (see the module docstring). Generating
    ``halfcheetah`` (:data:`gearjax.dt.locomotion.HALFCHEETAH`) needs the
    ``mujoco`` package."""
    if name == "mountaincar":
        return MOUNTAINCAR
    if name == "pendulum":
        return PENDULUM
    if name == "halfcheetah":
        return HALFCHEETAH
    raise ValueError(f"mixture must be one of {MIXTURE_NAMES}, got {name!r}")


def generate(mixture: Mixture = DEFAULT, seed: int = 0, scale: float = 1.0) -> Episodes:
    """Rolls out every part of ``mixture`` (``scale`` times its episode count,
    at least one each) and returns the episodes with labels and returns."""
    import gymnasium as gym
    env = gym.make(mixture.env_id)
    low, high = env.action_space.low, env.action_space.high
    rng = np.random.default_rng(seed)
    episodes, labels = [], []
    for label, make_policy, count in mixture.parts:
        policy = make_policy(low, high)
        for _ in range(max(1, round(count * scale))):
            episodes.append(rollout(env, policy, rng, int(rng.integers(2**31))))
            labels.append(label)
    env.close()
    returns = np.array([e["rewards"].sum() for e in episodes])
    by_label = {label: float(returns[[lab == label for lab in labels]].mean())
                for label, _, _ in mixture.parts}
    metadata = {"env_id": mixture.env_id, "seed": seed, "labels": labels,
                "policy_returns": by_label,
                "reference_returns": {"random": by_label.get("random", float(returns.min())),
                                      "good": by_label[mixture.good]}}
    return Episodes(episodes, metadata)


def normalized_score(episode_return: float | np.ndarray, metadata: dict) -> float | np.ndarray:
    """100 * (R - random) / (good - random): 0 is the random policy's mean
    return, 100 the good behaviour policy's."""
    ref = metadata["reference_returns"]
    return 100.0 * (np.asarray(episode_return) - ref["random"]) / (ref["good"] - ref["random"])


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Generate an offline RL dataset here.")
    parser.add_argument("--out", required=True,
                        help="output path: .npz, .hdf5 (D4RL layout) or a directory (Minari)")
    parser.add_argument("--format", choices=("npz", "hdf5", "minari"), default=None)
    parser.add_argument("--mixture", choices=MIXTURE_NAMES, default="mountaincar",
                        help="environment and behaviour policies (default: mountaincar)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--scale", type=float, default=1.0,
                        help="multiplies every policy's episode count")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    chosen = mixture(args.mixture)
    data = generate(chosen, seed=args.seed, scale=args.scale)
    path = save(data, args.out, args.format)
    print(f"{len(data)} episodes, {data.num_steps} steps of {chosen.env_id} in "
          f"{time.perf_counter() - start:.1f} s -> {path}")
    for label, ret in data.metadata["policy_returns"].items():
        print(f"  {label:>10}: mean return {ret:9.1f}")


if __name__ == "__main__":
    main()
