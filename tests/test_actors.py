"""gearjax.actors: Ray actors stepping CartPole feed a table: whole episodes,
policy updates reaching the actors, back-pressure from the table's rate
limiter, a killed actor replaced, errors handed to the caller, bad arguments
refused."""

from __future__ import annotations

import functools
import os
import signal
import sys
import time

import jax
import numpy as np
import pytest

import gearjax as gx

ray = pytest.importorskip("ray", reason="gearjax.actors needs Ray (the actors extra)")
gym = pytest.importorskip("gymnasium", reason="the actors' environment is gymnasium's CartPole")
from gearjax import actors  # noqa: E402

# The policies below are defined here: the actors get them by value.
ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])

COLUMNS = {"observation": gx.Column((4,), "float32"), "action": gx.Column((), "float32"),
           "reward": gx.Column((), "float32")}
make_env = functools.partial(gym.make, "CartPole-v1")
# How long a test waits for a feeder to stop by itself (it returns as soon as
# it does). Generous: on a loaded machine each Ray actor start (a new worker
# importing JAX) takes seconds; a feeder whose actor dies four times took 28 s
# in CI's two pytest-xdist workers and over 120 s in four on two cores.
STOP_WAIT_S = 300


def constant(state, obs, rng):
    return int(state)


def alternating(state, obs, rng):
    return int(rng.integers(2))


def slow(state, obs, rng):
    time.sleep(0.002)  # so that the actors are mid-episode when one is killed
    return int(rng.integers(2))


def broken(state, obs, rng):
    raise ValueError("the policy broke")


@pytest.fixture(scope="module", autouse=True)
def ray_session(tmp_path_factory):
    # Ray's workers start in the driver's working directory and put it on
    # their path: from the repository root they would import the source tree
    # (no compiled extension) instead of the installed gearjax.
    before = os.getcwd()
    os.chdir(tmp_path_factory.mktemp("ray"))
    ray.init(num_cpus=2, include_dashboard=False, configure_logging=False, log_to_driver=False)
    yield
    ray.shutdown()
    os.chdir(before)


def table(capacity=64, rate_limiter=None) -> gx.Table:
    return gx.Table(COLUMNS, capacity=capacity, max_length=500, placement="host",
                    rate_limiter=rate_limiter)


def until(condition, seconds=60.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def test_actors_insert_whole_episodes():
    t = table()
    feeder = actors.RayFeeder(t, make_env, alternating, actors=2, max_episodes=12)
    assert feeder.wait(STOP_WAIT_S)
    stats = feeder.stats()
    feeder.close()
    assert len(t) == 12 and stats["episodes"] == 12
    assert stats["env_steps"] == t.num_steps and stats["env_steps_per_second"] > 0
    for key in t.contents()["key"]:
        episode = t.get(int(key))
        assert np.all(episode["reward"] == 1.0)  # CartPole: 1 per step survived
        assert set(np.unique(episode["action"])) <= {0.0, 1.0}
        # The pole falls or the episode is cut at 500: never a partial episode.
        final = episode["observation"][-1]
        assert len(episode["reward"]) == 500 or abs(final[2]) > 0.15 or abs(final[0]) > 2.0


def test_a_new_policy_state_reaches_episodes_started_after_it():
    t = table(capacity=256)
    with actors.RayFeeder(t, make_env, constant, actors=2, policy_state=0) as feeder:
        until(lambda: len(t) >= 4)
        feeder.set_policy_state(1)
        before = len(t)
        until(lambda: len(t) >= before + 8)
    actions = [set(np.unique(t.get(int(k))["action"])) for k in t.contents()["key"]]
    assert actions[0] == {0.0}
    # Every episode started after the change acts with the new state. Only
    # those in flight then, at most one per actor, may act with the old one,
    # and they may land after any number of new ones: an actor can be slow
    # (descheduled on a busy machine) while the other steps on.
    after = actions[before:]
    assert all(a in ({0.0}, {1.0}) for a in after), actions
    assert sum(a == {0.0} for a in after) <= 2, (before, actions)
    assert sum(a == {1.0} for a in after) >= len(after) - 2 >= 6, (before, actions)


def test_the_rate_limiter_holds_the_actors_back():
    limiter = gx.SampleToInsertRatio(samples_per_insert=4.0, min_size_to_sample=3,
                                     error_buffer=8.0, timeout=1.0)
    t = table(rate_limiter=limiter)
    feeder = actors.RayFeeder(t, make_env, alternating, actors=2)
    until(lambda: len(t) >= 5)
    time.sleep(1.0)  # more would go in now, were they not held back
    held = len(t)
    # Three inserts for min_size, two more within the error buffer (diff =
    # 4 * inserts - samples <= 20), then inserts wait, through the limiter's
    # timeouts, until sampling brings the ratio down.
    assert held == 5
    for i in range(3):
        t.sample(jax.random.key(i), 4, 2)
    until(lambda: len(t) > held)
    time.sleep(1.0)  # held back again: the feeding thread waits in an insert
    began = time.monotonic()
    feeder.close()  # waits for that insert: at most the limiter's timeout
    assert time.monotonic() - began < limiter.timeout + 2.0


def test_a_killed_actor_is_replaced():
    t = table(capacity=512)
    with actors.RayFeeder(t, make_env, slow, actors=2, max_episodes=40) as feeder:
        victim = feeder.actor_pids()[0]
        until(lambda: len(t) >= 2)
        os.kill(victim, signal.SIGKILL)
        assert feeder.wait(STOP_WAIT_S)
        stats = feeder.stats()
    assert stats["actor_restarts"] >= 1
    assert len(t) == 40  # the lost episode was stepped again by the new actor


def test_an_error_in_the_actors_stops_the_feeder_and_reaches_the_caller():
    t = table()
    feeder = actors.RayFeeder(t, make_env, broken, actors=1)
    with pytest.raises(ValueError, match="the policy broke"):
        feeder.wait(STOP_WAIT_S)
    assert not feeder.stats()["running"] and len(t) == 0
    with pytest.raises(ValueError, match="the policy broke"):
        feeder.close()


def unbuildable():
    os._exit(3)  # the actor's process dies while it builds its environment


def missing_environment():
    raise ValueError("no such environment")


def bad_columns(episode):
    raise KeyError("the trajectory has no column 'obs'")


def test_an_actor_that_cannot_start_stops_the_feeder_instead_of_restarting_for_ever():
    t = table()
    feeder = actors.RayFeeder(t, unbuildable, alternating, actors=1)
    with pytest.raises(RuntimeError, match="died 4 times in a row"):
        feeder.wait(STOP_WAIT_S)
    assert feeder.stats()["actor_restarts"] == actors.MAX_RESTARTS_IN_A_ROW
    with pytest.raises(RuntimeError):
        feeder.close()


def test_a_raising_make_env_or_to_trajectory_stops_the_feeder_with_its_error():
    t = table()
    feeder = actors.RayFeeder(t, missing_environment, alternating, actors=2)
    with pytest.raises(RuntimeError, match="(?s)could not start.*ValueError: no such environment"):
        feeder.wait(STOP_WAIT_S)
    assert feeder.stats()["actor_restarts"] == 0  # not retried: it would raise again
    with pytest.raises(RuntimeError):
        feeder.close()
    feeder = actors.RayFeeder(t, make_env, alternating, actors=1, to_trajectory=bad_columns)
    with pytest.raises(KeyError, match="no column 'obs'"):
        feeder.wait(STOP_WAIT_S)
    with pytest.raises(KeyError):
        feeder.close()
    assert len(t) == 0


def test_max_episodes_below_the_actor_count_inserts_exactly_that_many():
    t = table()
    with actors.RayFeeder(t, make_env, alternating, actors=4, max_episodes=2) as feeder:
        assert feeder.wait(STOP_WAIT_S)
    assert len(t) == 2 and feeder.stats()["episodes"] == 2


def test_a_sharded_table_is_fed_into_this_process_shard():
    t = gx.ShardedTable(COLUMNS, capacity=16, max_length=500)
    with actors.RayFeeder(t, make_env, alternating, actors=2, max_episodes=5) as feeder:
        assert feeder.wait(STOP_WAIT_S)
    assert len(t.local) == 5 and len(t) == 5
    keys = t.local.contents()["key"]
    assert all(t.shard_of(int(k)) == 0 for k in keys)
    t.close()


def test_closing_the_table_then_the_feeder_is_a_quiet_shutdown():
    """Fails when a table closed under the feeder is its error: close() and
    check() raised TableClosedError for this ordinary shutdown order."""
    t = table()
    feeder = actors.RayFeeder(t, make_env, alternating, actors=1)
    until(lambda: len(t) >= 1)
    t.close()
    assert feeder.wait(STOP_WAIT_S)  # the closed table stopped it
    feeder.check()
    feeder.close()


def test_an_insert_the_limiter_refuses_at_once_is_retried_after_a_pause():
    """Fails without the pause: with a limiter whose timeout is 0 the feeding
    thread retried about 20,000 times a second, a core and the GIL taken from
    the learner (no Ray needed: the feeder's insert loop alone)."""
    import threading

    limiter = gx.SampleToInsertRatio(samples_per_insert=1.0, min_size_to_sample=1,
                                     error_buffer=1.0, timeout=0.0)
    t = table(rate_limiter=limiter)
    episode = {"observation": np.zeros((3, 4), np.float32), "action": np.zeros(3, np.float32),
               "reward": np.ones(3, np.float32)}
    t.insert(episode)
    t.insert(episode)  # the next insert waits for samples: refused at once (timeout 0)
    attempts = []

    class Counting:
        def insert(self, trajectory, priority):
            attempts.append(time.monotonic())
            return t.insert(trajectory, priority=priority)

    feeder = actors.RayFeeder.__new__(actors.RayFeeder)
    feeder._stop, feeder._table, feeder._priority = threading.Event(), Counting(), 1.0
    thread = threading.Thread(target=feeder._insert, args=(episode,))
    began = time.process_time()
    thread.start()
    time.sleep(0.5)
    feeder._stop.set()
    thread.join(10)
    assert len(attempts) <= 0.5 / actors.RETRY_PAUSE_SECONDS + 5, len(attempts)
    assert time.process_time() - began < 0.25  # the thread slept between tries
    assert len(t) == 2


def test_bad_arguments_are_refused_before_any_actor_starts():
    t = table()
    for kwargs, error in (({"actors": 0}, ValueError), ({"actors": True}, ValueError),
                          ({"actors": 1, "max_episodes": 0}, ValueError),
                          ({"actors": 1, "actor_cpus": -1}, ValueError),
                          ({"actors": 1, "priority": "high"}, TypeError),
                          # Passed float() once, and stopped the feeder at its first insert.
                          ({"actors": 1, "priority": float("nan")}, ValueError),
                          ({"actors": 1, "priority": -1.0}, ValueError),
                          ({"actors": 1, "priority": True}, TypeError)):
        with pytest.raises(error):
            actors.RayFeeder(t, make_env, alternating, **kwargs)
    with pytest.raises(TypeError):
        actors.RayFeeder(t, "CartPole-v1", alternating, actors=1)
    assert len(t) == 0
