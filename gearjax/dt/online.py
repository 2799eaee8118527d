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

    def __post_init__(self):
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
                seed = config.seed + 1_000_003 * (index + 1) + episode
                key = jax.random.key(seed) if config.explore else None
                out = rollouts(model, learner.normalizer, config.env_id, config.target_return,
                               episodes=1, seed=seed, max_steps=config.max_episode_steps,
                               sample_key=key)
                stored = out["episodes"][0]
                table_key = table.insert(episode_to_trajectory(stored))
                with cond:
                    records.append({"actor": index, "policy_step": step,
                                    "return": float(out["returns"][0]),
                                    "length": int(out["lengths"][0]), "key": int(table_key)})
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
