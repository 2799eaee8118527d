"""Online fine-tuning (Online DT, Zheng et al., 2022): actor threads roll out
the current policy in the environment and insert their episodes into the same
gearjax table the learner keeps sampling inside jit.

- **FIFO replacement.** The table must have ``remover="fifo"``: once full,
  every new episode evicts the oldest trajectory, so the data drifts from the
  offline set towards the policy's own experience.
- **Hindsight return-to-go.** Actors condition on an exploration target
  return, but an episode is stored with the return-to-go it actually
  achieved (computed once at insertion, as for offline data), so the learner
  learns which returns its actions really lead to.
- **Pacing.** Before each learner dispatch (``steps_per_call`` steps) every
  actor is granted ``episodes_per_call`` episodes; an actor waits for a grant
  before it starts an episode and acts with the newest snapshot of the model.
  Actors never run ahead of the learner, the learner never waits for them,
  and the number of episodes is fixed: ``actors * episodes_per_call * calls``.
- **Exploration.** With a stochastic (Online DT) head, actors sample their
  actions; a deterministic head acts with its output.
- **Where actors run.** ``backend="threads"`` (default): threads of this
  process, sharing the learner's jitted model. ``backend="ray"``: one Ray
  actor process per actor (the ``actors`` extra, see :mod:`gearjax.actors`),
  for when environments need more cores than this process has. Each call's
  snapshot goes to the actors once through Ray's object store (the model's
  parameters as NumPy arrays); each Ray actor rebuilds it and runs the same
  rollout; finished episodes are inserted here, in the order they finish.
  Pacing, seeds and records are the same as with threads.
"""

from __future__ import annotations

import dataclasses
import threading
import time

import jax
import numpy as np

import gearjax as gx
from gearjax.dt.data import episode_to_trajectory
from gearjax.dt.evaluate import rollouts
from gearjax.dt.train import Learner


@dataclasses.dataclass(frozen=True)
class OnlineConfig:
    """How fine-tuning runs (see the module docstring)."""

    env_id: str
    target_return: float          # what actors condition on (Online DT explores above the data)
    calls: int = 10               # learner dispatches, each ``steps_per_call`` steps
    actors: int = 2
    episodes_per_call: int = 1    # per actor, per learner dispatch
    explore: bool = True          # sample from a stochastic head
    max_episode_steps: int | None = None
    seed: int = 0
    backend: str = "threads"      # or "ray": actors in Ray actor processes

    def __post_init__(self):
        if self.backend not in ("threads", "ray"):
            raise ValueError(f"backend must be 'threads' or 'ray', got {self.backend!r}")
        for name in ("calls", "actors", "episodes_per_call"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
        if self.max_episode_steps is not None and self.max_episode_steps < 1:
            raise ValueError(f"max_episode_steps must be >= 1, got {self.max_episode_steps}")


@dataclasses.dataclass
class OnlineResult:
    """What happened: one record per actor episode, in insertion order
    (``actor``, ``policy_step``: the learner step of the snapshot it acted
    with, ``return``, ``length``, ``key``: its key in the table), and the
    learner's metrics per step."""

    episodes: list[dict]
    metrics: dict[str, np.ndarray]
    seconds: float


def finetune(learner: Learner, table: gx.Table, config: OnlineConfig) -> OnlineResult:
    """Runs ``config.calls`` learner dispatches while ``config.actors``
    threads roll out the newest policy and insert into ``table`` (which the
    learner samples). Returns when the learner is done and every granted
    episode is stored; an actor's error is raised here."""
    if table.remover != "fifo":
        raise ValueError(f"Online DT replaces the oldest trajectories: make the table with "
                         f"remover='fifo' (it has {table.remover!r})")
    if config.backend == "ray":
        return _finetune_with_ray(learner, table, config)
    cond = threading.Condition()
    grants = [0] * config.actors
    current = {"model": learner.snapshot(), "step": learner.step}
    stopping = False
    records: list[dict] = []
    errors: list[BaseException] = []

    def actor(index: int) -> None:
        episode = 0
        try:
            while True:
                with cond:
                    cond.wait_for(lambda: grants[index] > 0 or stopping)
                    if grants[index] == 0:
                        return
                    grants[index] -= 1
                    model, step = current["model"], current["step"]
                stored, achieved, length = _episode(model, learner.normalizer, config,
                                                    _seed(config, index, episode))
                table_key = table.insert(episode_to_trajectory(stored))
                with cond:
                    records.append({"actor": index, "policy_step": step, "return": achieved,
                                    "length": length, "key": int(table_key)})
                episode += 1
        except BaseException as error:  # reported by finetune, after the others stop
            with cond:
                errors.append(error)
                cond.notify_all()

    start = time.perf_counter()
    threads = [threading.Thread(target=actor, args=(i,), name=f"gearjax-actor-{i}", daemon=True)
               for i in range(config.actors)]
    for thread in threads:
        thread.start()
    metrics = []
    completed = False
    try:
        for _ in range(config.calls):
            with cond:
                if errors:
                    break
                for i in range(config.actors):
                    grants[i] += config.episodes_per_call
                cond.notify_all()
            metrics.append(learner.train(learner.config.steps_per_call))
            snapshot = learner.snapshot()
            with cond:
                current.update(model=snapshot, step=learner.step)
        completed = True
    finally:
        with cond:
            stopping = True   # actors finish the episodes already granted, then exit
            if errors or not completed:   # ... unless something failed
                grants[:] = [0] * config.actors
            cond.notify_all()
        for thread in threads:
            thread.join()
    if errors:
        raise RuntimeError("an Online DT actor failed") from errors[0]
    merged = {k: np.concatenate([m[k] for m in metrics]) for k in metrics[0]} if metrics else {}
    return OnlineResult(records, merged, time.perf_counter() - start)


def _seed(config: OnlineConfig, actor: int, episode: int) -> int:
    """The environment and exploration seed of an actor's episode."""
    return config.seed + 1_000_003 * (actor + 1) + episode


def _episode(model, normalizer, config: OnlineConfig, seed: int) -> tuple[dict, float, int]:
    """One rollout of `model`: (the episode, its return, its length)."""
    key = jax.random.key(seed) if config.explore else None
    out = rollouts(model, normalizer, config.env_id, config.target_return, episodes=1,
                   seed=seed, max_steps=config.max_episode_steps, sample_key=key)
    return out["episodes"][0], float(out["returns"][0]), int(out["lengths"][0])


class _RayRolloutActor:
    """An Online DT actor in its own process (a Ray actor)."""

    def episode(self, graphdef, params, normalizer, config: OnlineConfig,
                seed: int) -> tuple[dict, float, int]:
        from flax import nnx
        return _episode(nnx.merge(graphdef, params), normalizer, config, seed)


def _finetune_with_ray(learner: Learner, table: gx.Table, config: OnlineConfig) -> OnlineResult:
    """finetune with Ray actor processes: before each dispatch, every actor is
    given its episodes with the newest snapshot; the episodes that have
    finished are inserted after each dispatch, and all of them at the end."""
    from flax import nnx

    from gearjax.actors import _ray
    ray = _ray()
    if not ray.is_initialized():
        ray.init(include_dashboard=False, configure_logging=False, log_to_driver=False)
    remote = ray.remote(num_cpus=0)(_RayRolloutActor)
    actors = [remote.remote() for _ in range(config.actors)]
    pending: dict = {}  # ref -> (actor, policy step)
    records: list[dict] = []
    metrics = []
    episodes = [0] * config.actors
    start = time.perf_counter()

    def insert(ready) -> None:
        for ref in ready:
            actor, step = pending.pop(ref)
            try:
                stored, achieved, length = ray.get(ref)
            except ray.exceptions.RayError as error:
                raise RuntimeError("an Online DT actor failed") from error
            key = table.insert(episode_to_trajectory(stored))
            records.append({"actor": actor, "policy_step": step, "return": achieved,
                            "length": length, "key": int(key)})

    try:
        for _ in range(config.calls):
            graphdef, params = nnx.split(learner.snapshot())
            params_ref = ray.put(jax.device_get(params))
            for i, actor in enumerate(actors):
                for _ in range(config.episodes_per_call):
                    ref = actor.episode.remote(graphdef, params_ref, learner.normalizer, config,
                                               _seed(config, i, episodes[i]))
                    pending[ref] = (i, learner.step)
                    episodes[i] += 1
            metrics.append(learner.train(learner.config.steps_per_call))
            insert(ray.wait(list(pending), num_returns=len(pending), timeout=0)[0])
        while pending:
            insert(ray.wait(list(pending), num_returns=1)[0])
    finally:
        for actor in actors:
            ray.kill(actor)
    merged = {k: np.concatenate([m[k] for m in metrics]) for k in metrics[0]} if metrics else {}
    return OnlineResult(records, merged, time.perf_counter() - start)
