"""Ray actors that step environments and feed a learner's table: the producer
side of replay when environments need more cores than the learner's process
has (the ``actors`` extra: ``pip install 'gearjax[actors]'``).

:class:`RayFeeder` starts ``actors`` Ray actors, each with its own
environment (from ``make_env``) and policy, and keeps one episode in flight
per actor. A thread in the learner's process receives each finished episode
(through Ray's object store), turns it into a trajectory (``to_trajectory``)
and inserts it into ``table``: a :class:`gearjax.Table`, or a
:class:`gearjax.ShardedTable`, whose ``insert`` writes this process's shard (so
with one feeder per process, every shard is fed by its own actors and served
to every learner by the exchange).

* **Back-pressure.** The feeding thread inserts one episode at a time; when
  the table's rate limiter holds inserts back, it waits (through the
  limiter's timeouts, which only mean that the learner has not sampled yet),
  the actors finish their episode in flight and wait too. At most ``actors``
  episodes are buffered, whatever the speeds. :meth:`RayFeeder.close` waits
  for an insert in progress, at most the limiter's timeout.
* **Policy.** ``policy(state, obs, rng) -> action`` runs in the actors;
  :meth:`RayFeeder.set_policy_state` publishes a new ``state`` (model
  parameters, say) once through the object store, and every episode started
  afterwards acts with it.
* **Faults.** An actor whose process dies is replaced (and counted in
  ``stats()["actor_restarts"]``); its episode in flight is lost. One that
  dies ``MAX_RESTARTS_IN_A_ROW + 1`` times without finishing an episode
  stops the feeder with a ``RuntimeError``. An exception raised by
  ``policy`` or ``to_trajectory``, or a refused insert, stops the feeder, and
  :meth:`RayFeeder.wait`, :meth:`RayFeeder.check` and :meth:`RayFeeder.close`
  re-raise it; one raised by ``make_env`` stops it with a ``RuntimeError``
  that quotes it (the actor could not start).
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from gearjax import _checks
from gearjax.errors import table_error

# An actor that dies this many times in a row without finishing an episode
# stops the feeder instead of being replaced again.
MAX_RESTARTS_IN_A_ROW = 3

# How long the feeding thread pauses after an insert the rate limiter timed
# out, before it tries again.
RETRY_PAUSE_SECONDS = 0.01

# A behaviour policy: observation and random generator to action.
Policy = Callable[[np.ndarray, np.random.Generator], np.ndarray]


def rollout(env, policy: Policy, rng: np.random.Generator, seed: int) -> dict[str, np.ndarray]:
    """One episode of ``policy`` in a gymnasium environment, to its end
    (terminated or truncated): observations, actions, rewards, terminal."""
    obs, _ = env.reset(seed=seed)
    observations, actions, rewards = [], [], []
    while True:
        action = policy(np.asarray(obs, np.float32), rng)
        observations.append(np.asarray(obs, np.float32))
        actions.append(np.asarray(action, np.float32))
        obs, reward, terminated, truncated, _ = env.step(action)
        rewards.append(float(reward))
        if terminated or truncated:
            return {"observations": np.stack(observations), "actions": np.stack(actions),
                    "rewards": np.asarray(rewards, np.float32), "terminal": bool(terminated)}


def _ray():
    try:
        import ray
    except ImportError:
        raise ImportError("gearjax.actors needs Ray: pip install 'gearjax[actors]'") from None
    return ray


class _EnvWorker:
    """One actor: an environment and a policy, stepping whole episodes."""

    def __init__(self, make_env: Callable[[], Any], policy, seed: int):
        self._env = make_env()
        self._policy = policy
        self._rng = np.random.default_rng(seed)
        self._seed = seed

    def episode(self, state: Any, number: int) -> dict[str, np.ndarray]:
        # Every episode of every actor gets its own reset seed.
        seed = int(np.random.SeedSequence([self._seed, number]).generate_state(1)[0])
        return rollout(self._env, lambda obs, rng: self._policy(state, obs, rng), self._rng, seed)

    def pid(self) -> int:
        import os
        return os.getpid()


class RayFeeder:
    """Feeds ``table`` with episodes stepped by ``actors`` Ray actors (see
    the module docstring).

    Args:
      table: a :class:`gearjax.Table` or :class:`gearjax.ShardedTable`.
      make_env: builds one environment (gymnasium API) in each actor; it and
        ``policy`` are pickled to the actors.
      policy: ``policy(state, obs, rng) -> action``.
      actors: how many actors (>= 1).
      to_trajectory: episode (``observations``, ``actions``, ``rewards``,
        ``terminal``) to the table's columns; default: the episode's arrays
        under the column names ``observation``, ``action``, ``reward``.
      policy_state: the first ``state`` (default None).
      priority: of every inserted trajectory, a number as
        :meth:`gearjax.Table.insert` takes it (checked here: ``TypeError``
        for a non-number or a bool, ``ValueError`` for NaN, a negative or
        one past the priority bounds).
      max_episodes: stop after inserting this many (default: until closed).
      seed: actor i's generator and reset seeds derive from (seed, i).
      actor_cpus: the CPUs Ray reserves for each actor (default 0: actors
        share the machine, so any number of them can run).

    A table closed under the feeder stops it quietly (``check()`` and
    ``close()`` raise nothing for it): closing the table and then the
    feeder is an ordinary shutdown.
    """

    def __init__(self, table, make_env: Callable[[], Any],
                 policy: Callable[[Any, np.ndarray, np.random.Generator], np.ndarray], *,
                 actors: int, to_trajectory: Callable[[dict], dict] | None = None,
                 policy_state: Any = None, priority: float = 1.0,
                 max_episodes: int | None = None, seed: int = 0, actor_cpus: float = 0.0):
        if isinstance(actors, bool) or not isinstance(actors, int) or actors < 1:
            raise ValueError(f"actors must be an integer >= 1, got {actors!r}")
        if max_episodes is not None and (isinstance(max_episodes, bool) or
                                         not isinstance(max_episodes, int) or max_episodes < 1):
            raise ValueError(f"max_episodes must be None or an integer >= 1, got "
                             f"{max_episodes!r}")
        if not callable(make_env) or not callable(policy):
            raise TypeError("make_env and policy must be callable")
        if not (isinstance(actor_cpus, (int, float)) and 0 <= actor_cpus <= 1024):
            raise ValueError(f"actor_cpus must be a number in [0, 1024], got {actor_cpus!r}")
        # A bad priority fails here, not in the feeding thread at its first
        # insert (NaN, -1 and True passed float() and stopped the feeder).
        priority = _checks.priority(priority)
        ray = _ray()
        if not ray.is_initialized():
            ray.init(include_dashboard=False, configure_logging=False, log_to_driver=False)
        self._ray = ray
        self._table = table
        self._to_trajectory = to_trajectory or _default_trajectory
        self._priority = priority
        self._max_episodes = max_episodes
        self._remote = ray.remote(num_cpus=actor_cpus)(_EnvWorker)
        self._make_env, self._policy, self._seed = make_env, policy, seed
        self._workers = [self._spawn(i) for i in range(actors)]
        self._state_ref = ray.put(policy_state)
        self._lock = threading.Lock()
        self._episodes = self._env_steps = self._started = self._restarts = 0
        self._error: BaseException | None = None
        self._stop = threading.Event()
        self._begin = time.monotonic()
        self._end: float | None = None  # when the feeding thread stopped
        self._thread = threading.Thread(target=self._feed, name="gearjax-ray-feeder",
                                        daemon=True)
        self._thread.start()

    def _spawn(self, index: int):
        return self._remote.remote(self._make_env, self._policy,
                                   int(np.random.SeedSequence([self._seed, index])
                                       .generate_state(1)[0]))

    # ------------------------------------------------------------ the thread
    def _submit(self, index: int):
        with self._lock:
            number = self._started
            self._started += 1
            state = self._state_ref
        return self._workers[index].episode.remote(state, number)

    def _feed(self) -> None:
        ray = self._ray
        # Never more episodes in flight than are still wanted.
        first = len(self._workers) if self._max_episodes is None else \
            min(len(self._workers), self._max_episodes)
        pending = {self._submit(i): i for i in range(first)}
        failures = [0] * len(self._workers)
        try:
            while pending and not self._stop.is_set():
                ready, _ = ray.wait(list(pending), num_returns=1, timeout=0.05)
                for ref in ready:
                    index = pending.pop(ref)
                    try:
                        episode = ray.get(ref)
                    except ray.exceptions.RayActorError as e:
                        if getattr(e, "actor_init_failed", False):
                            # make_env (or the policy's unpickling) raised:
                            # another actor would raise it again.
                            why = re.sub(r"\x1b\[[0-9;]*m", "", str(getattr(e, "error_msg", e)))
                            raise RuntimeError(f"actor {index} could not start: {why}") from None
                        # The actor's process died: replace it; its episode is
                        # lost. One that never finishes an episode (it cannot
                        # start, say) is not replaced for ever.
                        failures[index] += 1
                        if failures[index] > MAX_RESTARTS_IN_A_ROW:
                            raise RuntimeError(
                                f"actor {index} died {failures[index]} times in a row without "
                                f"finishing an episode; the last time: {e}") from None
                        self._workers[index] = self._spawn(index)
                        with self._lock:
                            self._restarts += 1
                        pending[self._submit(index)] = index
                        continue
                    except ray.exceptions.RayTaskError as e:
                        raise e.as_instanceof_cause() from None
                    failures[index] = 0
                    if not self._insert(self._to_trajectory(episode)):
                        break
                    with self._lock:
                        self._episodes += 1
                        self._env_steps += len(episode["rewards"])
                        done = self._max_episodes is not None and \
                            self._episodes + len(pending) >= self._max_episodes
                    if not done and not self._stop.is_set():
                        pending[self._submit(index)] = index
        except BaseException as e:  # noqa: BLE001 - handed to the caller by check()/close()
            # A closed table stops the feeder quietly: closing the table and
            # then the feeder is an ordinary shutdown (the learner's own next
            # call on the table says it is closed).
            if not _is_closed(e):
                self._error = e
        finally:
            # Episodes still in flight are dropped: close() ends their actors.
            with self._lock:
                self._end = time.monotonic()

    def _insert(self, trajectory: dict) -> bool:
        """Inserts, waiting on the rate limiter as long as it takes (its
        timeouts only mean the learner has not sampled yet); returns False if
        the feeder was stopped meanwhile."""
        while not self._stop.is_set():
            try:
                self._table.insert(trajectory, priority=self._priority)
                return True
            except TimeoutError:
                # A pause before trying again: a limiter whose timeout is 0 (or
                # tiny) gives up at once, and this loop spun a core and held
                # the GIL from the learner it waits for.
                self._stop.wait(RETRY_PAUSE_SECONDS)
        return False

    # ------------------------------------------------------------ the caller
    def set_policy_state(self, state: Any) -> None:
        """Episodes started from now on act with ``state``."""
        ref = self._ray.put(state)
        with self._lock:
            self._state_ref = ref

    def stats(self) -> dict[str, float]:
        """episodes (inserted), env_steps (of those episodes), seconds since
        the start (until the feeder stopped), env_steps_per_second, actors,
        actor_restarts, running."""
        with self._lock:
            seconds = (self._end or time.monotonic()) - self._begin
            return {"episodes": self._episodes, "env_steps": self._env_steps,
                    "seconds": seconds, "env_steps_per_second": self._env_steps / seconds,
                    "actors": len(self._workers), "actor_restarts": self._restarts,
                    "running": self._thread.is_alive()}

    def actor_pids(self) -> list[int]:
        """The process id of each actor (to watch or kill them)."""
        return self._ray.get([w.pid.remote() for w in self._workers])

    def check(self) -> None:
        """Re-raises the error that stopped the feeder, if any."""
        if self._error is not None:
            raise self._error

    def wait(self, timeout: float | None = None) -> bool:
        """Waits until the feeder stops by itself (``max_episodes`` inserted,
        or an error); returns whether it did within ``timeout`` seconds."""
        self._thread.join(timeout)
        self.check()
        return not self._thread.is_alive()

    def close(self) -> None:
        """Stops feeding (episodes in flight are dropped), ends the actors and
        re-raises the error that stopped the feeder, if any."""
        self._stop.set()
        self._thread.join()
        for worker in self._workers:
            self._ray.kill(worker)
        self._workers = []
        self.check()

    def __enter__(self) -> "RayFeeder":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _is_closed(error: BaseException) -> bool:
    """Whether `error` is the table's own, because it was closed under us."""
    return table_error(error) == "closed"


def _default_trajectory(episode: dict) -> dict[str, np.ndarray]:
    return {"observation": episode["observations"], "action": episode["actions"],
            "reward": episode["rewards"]}
