"""Online DT fine-tuning (gearjax.dt.online): actor threads insert while the
learner samples in jit; FIFO replacement, hindsight return-to-go, pacing,
and failures reported."""

import numpy as np
import pytest

pytest.importorskip("gymnasium", reason="gearjax.dt needs the rl extra (gymnasium)")

from gearjax.dt import data as D  # noqa: E402
from gearjax.dt import generate as G  # noqa: E402
from gearjax.dt.model import DTConfig  # noqa: E402
from gearjax.dt.online import OnlineConfig, finetune  # noqa: E402
from gearjax.dt.train import Learner, Normalizer, TrainConfig  # noqa: E402

ENV = "Pendulum-v1"


def setup(remover="fifo", capacity=4):
    data = G.generate(G.mixture("pendulum"), scale=0.05)   # 4 episodes of 200 steps
    table = D.make_table(data, capacity=capacity, remover=remover)
    normalizer = Normalizer(*data.state_stats(), rtg_scale=100.0)
    config = DTConfig(obs_dim=3, act_dim=1, context=4, hidden=16, layers=1, dropout=0.0,
                      action_scale=2.0, stochastic=True)
    learner = Learner(config, normalizer, table, TrainConfig(batch_size=8, steps_per_call=5))
    return table, learner


def test_actors_insert_while_the_learner_trains_fifo_and_hindsight_rtg():
    table, learner = setup()
    inserted_before = table.stats()["inserts"]
    result = finetune(learner, table, OnlineConfig(ENV, target_return=-100.0, calls=3,
                                                   actors=2, max_episode_steps=12))
    assert learner.step == 15 and result.metrics["loss"].shape == (15,)
    assert len(result.episodes) == 6                      # actors * episodes_per_call * calls
    assert table.stats()["inserts"] - inserted_before == 6
    assert len(table) == 4                                 # full: FIFO evicted the oldest
    assert list(table.contents()["key"]) == sorted(r["key"] for r in result.episodes)[-4:]
    keys = [r["key"] for r in result.episodes]
    stored = sorted(keys)[-4:]                             # the 4 newest keys survive
    for record in result.episodes:
        assert record["length"] == 12
        if record["key"] in stored:
            trajectory = table.get(record["key"])
            # hindsight: stored with the return it achieved, not the -100 it aimed at
            np.testing.assert_allclose(trajectory["rtg"], D.return_to_go(trajectory["reward"]),
                                       rtol=1e-5)
            assert trajectory["rtg"][0] == pytest.approx(record["return"], rel=1e-5)
        else:
            with pytest.raises(KeyError):
                table.get(record["key"])
    # pacing: an actor's k-th episode acts with a model trained for >= 5k steps
    for actor in range(2):
        steps = [r["policy_step"] for r in result.episodes if r["actor"] == actor]
        assert len(steps) == 3 and all(s >= 5 * k for k, s in enumerate(steps))


def test_online_needs_fifo_and_valid_settings():
    table, learner = setup(remover="lifo")
    with pytest.raises(ValueError, match="remover='fifo'"):
        finetune(learner, table, OnlineConfig(ENV, -100.0, calls=1))
    for bad in ({"calls": 0}, {"actors": 0}, {"episodes_per_call": 0},
                {"max_episode_steps": 0}, {"actors": True}):
        with pytest.raises(ValueError):
            OnlineConfig(ENV, -100.0, **bad)


def test_an_actor_failure_is_raised_and_stops_the_run():
    table, learner = setup()
    before = table.stats()["inserts"]
    with pytest.raises(RuntimeError, match="actor failed") as info:
        finetune(learner, table, OnlineConfig("NoSuchEnvironment-v0", -100.0, calls=3,
                                              actors=2))
    assert info.value.__cause__ is not None
    assert table.stats()["inserts"] == before


def test_ray_actor_processes_roll_out_and_insert_as_threads_do(tmp_path, monkeypatch):
    ray = pytest.importorskip("ray", reason="backend='ray' needs Ray (the actors extra)")
    # Ray's workers start in this working directory and put it on their path:
    # from the repository root they would import the source tree, not gearjax.
    monkeypatch.chdir(tmp_path)
    ray.init(num_cpus=2, include_dashboard=False, configure_logging=False, log_to_driver=False)
    try:
        table, learner = setup()
        inserted_before = table.stats()["inserts"]
        result = finetune(learner, table, OnlineConfig(ENV, target_return=-100.0, calls=2,
                                                       actors=2, max_episode_steps=12,
                                                       backend="ray"))
    finally:
        ray.shutdown()
    assert learner.step == 10 and len(result.episodes) == 4
    assert table.stats()["inserts"] - inserted_before == 4
    assert list(table.contents()["key"]) == sorted(r["key"] for r in result.episodes)
    for record in result.episodes:
        assert record["length"] == 12
        trajectory = table.get(record["key"])
        np.testing.assert_allclose(trajectory["rtg"], D.return_to_go(trajectory["reward"]),
                                   rtol=1e-5)
        assert trajectory["rtg"][0] == pytest.approx(record["return"], rel=1e-5)
    for actor in range(2):  # pacing: the k-th episode acts with >= 5k learner steps
        steps = sorted(r["policy_step"] for r in result.episodes if r["actor"] == actor)
        assert steps == [0, 5]


def test_an_unknown_backend_is_refused():
    with pytest.raises(ValueError, match="backend"):
        OnlineConfig(ENV, target_return=0.0, backend="processes")
