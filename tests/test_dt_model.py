"""The decision transformer (gearjax.dt.model) and its jitted training
(gearjax.dt.train): causality and padding are respected, heads are bounded,
training samples inside jit and lowers the loss, checkpoints resume exactly."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

import gearjax as gx
from conftest import pythonpath
from gearjax.dt import data as D
from gearjax.dt.model import SIZES, DecisionTransformer, DTConfig, act, squashed_gaussian_log_prob
from gearjax.dt.train import Learner, Normalizer, TrainConfig

OBS, ACT, K = 3, 2, 6


def inputs(batch=2, k=K, seed=0):
    rng = np.random.default_rng(seed)
    return (jnp.asarray(rng.normal(size=(batch, k)), jnp.float32),
            jnp.asarray(rng.normal(size=(batch, k, OBS)), jnp.float32),
            jnp.asarray(rng.uniform(-1, 1, size=(batch, k, ACT)), jnp.float32),
            jnp.broadcast_to(jnp.arange(k, dtype=jnp.int32), (batch, k)),
            jnp.ones((batch, k), bool))


def model(**kw) -> DecisionTransformer:
    config = DTConfig(obs_dim=OBS, act_dim=ACT, context=K, hidden=32, layers=2, heads=2,
                      action_scale=2.0, **kw)
    return DecisionTransformer(config, nnx.Rngs(0))


def test_prediction_at_step_t_ignores_later_steps_and_its_own_action():
    m = model()
    rtg, s, a, t, mask = inputs()
    base = m(rtg, s, a, t, mask)
    assert base.shape == (2, K, ACT)
    assert float(jnp.abs(base).max()) <= 2.0  # tanh head, scaled
    changed = m(rtg.at[:, 4:].set(9.0), s.at[:, 4:].add(5.0), a.at[:, 3:].set(0.7), t, mask)
    np.testing.assert_allclose(changed[:, :4], base[:, :4], atol=1e-5)  # steps 0..3 unchanged
    assert not np.allclose(changed[:, 4:], base[:, 4:])


def test_padded_steps_are_invisible():
    m = model()
    rtg, s, a, t, mask = inputs()
    mask = mask.at[:, :3].set(False)  # left padding
    base = m(rtg, s, a, t, mask)
    garbage = m(rtg.at[:, :3].set(50.0), s.at[:, :3].set(-7.0), a.at[:, :3].set(0.9), t, mask)
    np.testing.assert_allclose(garbage[:, 3:], base[:, 3:], atol=1e-5)


def test_behaviour_cloning_ignores_returns_and_dropout_needs_rngs():
    m = model(condition_on_return=False, dropout=0.5)
    rtg, s, a, t, mask = inputs()
    np.testing.assert_allclose(m(rtg, s, a, t, mask), m(rtg * 10, s, a, t, mask), atol=1e-6)
    np.testing.assert_array_equal(m(rtg, s, a, t, mask), m(rtg, s, a, t, mask))
    dropped = m(rtg, s, a, t, mask, rngs=nnx.Rngs(dropout=1))
    assert not np.allclose(dropped, m(rtg, s, a, t, mask))


def test_stochastic_head_and_its_log_prob():
    m = model(stochastic=True)
    rtg, s, a, t, mask = inputs()
    mean, log_std = m(rtg, s, a, t, mask)
    assert mean.shape == log_std.shape == (2, K, ACT)
    action = act(m, rtg, s, a, t, mask)
    np.testing.assert_allclose(action, jnp.tanh(mean[:, -1]) * 2.0, rtol=1e-6)
    sampled = act(m, rtg, s, a, t, mask, key=jax.random.key(0))
    assert sampled.shape == (2, ACT) and float(jnp.abs(sampled).max()) <= 2.0
    # The density integrates to one (one dimension, numerically).
    grid = jnp.linspace(-2 + 1e-4, 2 - 1e-4, 200_001)[:, None]
    density = jnp.exp(squashed_gaussian_log_prob(jnp.array([0.3]), jnp.array([-0.5]), grid, 2.0))
    assert float(jnp.sum(density) * (grid[1, 0] - grid[0, 0])) == pytest.approx(1.0, abs=5e-3)


def test_config_validation_and_sizes():
    assert DTConfig.sized("reference", obs_dim=1, act_dim=1).hidden == 128
    assert set(SIZES) >= {"reference", "large"}
    with pytest.raises(ValueError, match="size must be one of"):
        DTConfig.sized("huge", obs_dim=1, act_dim=1)
    with pytest.raises(ValueError, match="multiple of heads"):
        DTConfig(obs_dim=1, act_dim=1, hidden=30, heads=4)
    with pytest.raises(ValueError, match="context must be a positive integer"):
        DTConfig(obs_dim=1, act_dim=1, context=0)
    with pytest.raises(ValueError, match="dropout"):
        DTConfig(obs_dim=1, act_dim=1, dropout=1.0)


def linear_dataset(n=12, length=15) -> D.Episodes:
    """Actions are a fixed linear function of the state: learnable quickly."""
    rng = np.random.default_rng(0)
    episodes = []
    for _ in range(n):
        obs = rng.normal(size=(length, OBS)).astype(np.float32)
        actions = np.tanh(obs[:, :ACT] * 0.8).astype(np.float32)
        episodes.append({"observations": obs, "actions": actions,
                         "rewards": -np.abs(actions).sum(1).astype(np.float32)})
    return D.Episodes(episodes, {})


@pytest.fixture(scope="module")
def setup():
    data = linear_dataset()
    table = D.make_table(data)
    mean, std = data.state_stats()
    return table, Normalizer(mean, std, 10.0)


@pytest.mark.parametrize("stochastic", [False, True])
def test_jitted_training_samples_inside_the_step_and_learns(setup, stochastic):
    table, normalizer = setup
    config = DTConfig(obs_dim=OBS, act_dim=ACT, context=K, hidden=32, layers=1, heads=1,
                      dropout=0.0, stochastic=stochastic)
    learner = Learner(config, normalizer, table,
                      TrainConfig(batch_size=16, steps_per_call=25, learning_rate=3e-3,
                                  warmup_steps=10))
    samples_before = table.stats()["samples"]
    metrics = learner.train(150)
    assert table.stats()["samples"] - samples_before == 150 * 16  # every step sampled in jit
    assert learner.step == 150 and metrics["loss"].shape == (150,)
    assert np.all(np.isfinite(metrics["loss"]))
    first, last = metrics["loss"][:10].mean(), metrics["loss"][-10:].mean()
    assert last < first - (0.5 * abs(first) if not stochastic else 0.5)
    if stochastic:
        assert {"nll", "entropy", "temperature"} <= set(metrics)


def test_train_refuses_partial_calls_and_needs_a_source(setup):
    table, normalizer = setup
    config = DTConfig(obs_dim=OBS, act_dim=ACT, context=K, hidden=16, layers=1)
    learner = Learner(config, normalizer, table, TrainConfig(batch_size=4, steps_per_call=10))
    with pytest.raises(ValueError, match="multiple of steps_per_call"):
        learner.train(15)
    with pytest.raises(ValueError, match="give a table or a sampler"):
        Learner(config, normalizer)


def test_checkpoints_resume_exactly(setup, tmp_path):
    table, normalizer = setup
    config = DTConfig(obs_dim=OBS, act_dim=ACT, context=K, hidden=16, layers=1, dropout=0.1)
    train = TrainConfig(batch_size=8, steps_per_call=10)
    a = Learner(config, normalizer, table, train)
    a.train(20)
    a.save(tmp_path / "ckpt")
    continued = a.train(20)["loss"]

    b = Learner(config, normalizer, table, train)
    assert not b.restore(tmp_path / "empty")
    assert b.restore(tmp_path / "ckpt") and b.step == 20
    resumed = b.train(20)["loss"]
    np.testing.assert_allclose(resumed, continued, rtol=1e-5)
    rtg, s, ac, t, mask = inputs(k=K)
    np.testing.assert_allclose(b.model(rtg, s, ac, t, mask), a.model(rtg, s, ac, t, mask),
                               rtol=1e-5, atol=1e-6)


def test_training_from_a_fixed_device_batch(setup):
    table, normalizer = setup
    batch = table.sample(jax.random.key(0), 8, K, gx.Timestep(), pad="left")
    config = DTConfig(obs_dim=OBS, act_dim=ACT, context=K, hidden=16, layers=1)
    learner = Learner(config, normalizer, config=TrainConfig(batch_size=8, steps_per_call=5),
                      sampler=lambda state, key: (state, batch))
    assert np.all(np.isfinite(learner.train(10)["loss"]))


def test_rollouts_are_batched_deterministic_and_record_episodes():
    from gearjax.dt.evaluate import evaluate, rollouts
    config = DTConfig(obs_dim=3, act_dim=1, context=4, hidden=16, layers=1, action_scale=2.0)
    m = DecisionTransformer(config, nnx.Rngs(0))
    normalizer = Normalizer(np.zeros(3, np.float32), np.ones(3, np.float32), 100.0)
    a = rollouts(m, normalizer, "Pendulum-v1", -150.0, episodes=3, seed=5, max_steps=9)
    b = rollouts(m, normalizer, "Pendulum-v1", -150.0, episodes=3, seed=5, max_steps=9)
    np.testing.assert_array_equal(a["returns"], b["returns"])
    assert a["lengths"].tolist() == [9, 9, 9]
    for episode, ret in zip(a["episodes"], a["returns"]):
        assert episode["observations"].shape == (9, 3) and episode["actions"].shape == (9, 1)
        assert episode["rewards"].sum() == pytest.approx(ret, rel=1e-5)
        assert np.abs(episode["actions"]).max() <= 2.0
    # different start states per episode; a different target changes the actions
    assert len(set(a["returns"].round(4).tolist())) == 3
    c = rollouts(m, normalizer, "Pendulum-v1", 5000.0, episodes=3, seed=5, max_steps=9)
    assert not np.allclose(c["episodes"][0]["actions"], a["episodes"][0]["actions"])
    result = evaluate(m, normalizer, "Pendulum-v1", [-150.0], episodes=2)
    assert set(result[-150.0]) == {"mean", "std", "returns"} and len(result[-150.0]["returns"]) == 2


def test_batch_size_must_split_evenly_over_the_devices(setup):
    table, normalizer = setup
    config = DTConfig(obs_dim=OBS, act_dim=ACT, context=K, hidden=16, layers=1)
    device = jax.local_devices()[0]
    with pytest.raises(ValueError, match="multiple of the number of devices"):
        Learner(config, normalizer, table, TrainConfig(batch_size=5), devices=[device] * 2)
    with pytest.raises(ValueError, match="devices is empty"):
        Learner(config, normalizer, table, devices=[])


def test_snapshot_is_unaffected_by_later_training(setup):
    table, normalizer = setup
    config = DTConfig(obs_dim=OBS, act_dim=ACT, context=K, hidden=16, layers=1, dropout=0.0)
    learner = Learner(config, normalizer, table, TrainConfig(batch_size=8, steps_per_call=5,
                                                             learning_rate=1e-2))
    frozen = learner.snapshot()
    rtg, s, a, t, mask = inputs()
    before = np.asarray(frozen(rtg, s, a, t, mask))
    learner.train(10)   # donates the learner's state; the snapshot keeps its own copy
    np.testing.assert_array_equal(frozen(rtg, s, a, t, mask), before)
    assert not np.allclose(learner.model(rtg, s, a, t, mask), before)


DATA_PARALLEL = r"""
import jax, numpy as np
from gearjax.dt.model import DTConfig
from gearjax.dt.train import Learner, Normalizer, TrainConfig
import test_dt_model as T
assert jax.local_device_count() == 2, jax.local_devices()
data = T.linear_dataset()
table = T.D.make_table(data)
normalizer = Normalizer(*data.state_stats(), 10.0)
config = DTConfig(obs_dim=T.OBS, act_dim=T.ACT, context=T.K, hidden=32, layers=1, dropout=0.0)
train = TrainConfig(batch_size=16, steps_per_call=25, learning_rate=3e-3, warmup_steps=10)
both = Learner(config, normalizer, table, train)            # default: all local devices
assert both.devices == jax.local_devices()
before = table.stats()["samples"]
loss = both.train(150)["loss"]
assert table.stats()["samples"] - before == 150 * 16      # 2 devices x 8 rows per step
assert np.all(np.isfinite(loss)) and loss[-10:].mean() < 0.5 * loss[:10].mean()
params = jax.tree.leaves(both._state)
assert all(len(p.sharding.device_set) == 2 and p.sharding.is_fully_replicated for p in params)
one = Learner(config, normalizer, table, train, devices=jax.local_devices()[:1])
single = one.train(150)["loss"]
assert single[-10:].mean() < 0.5 * single[:10].mean()
print("ok", loss[:10].mean(), loss[-10:].mean(), single[-10:].mean())
"""


def test_data_parallel_over_two_cpu_devices(tmp_path):
    """Two host devices (XLA's flag) in a fresh process: each device samples
    its half of the batch inside the step, gradients are averaged, parameters
    stay replicated, and it learns as the one-device step does."""
    import os
    import pathlib
    import subprocess
    import sys
    script = tmp_path / "data_parallel.py"
    script.write_text(DATA_PARALLEL)
    env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=2",
           "JAX_PLATFORMS": "cpu",
           "PYTHONPATH": pythonpath(str(pathlib.Path(__file__).parent))}
    result = subprocess.run([sys.executable, str(script)], env=env, capture_output=True,
                            text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.startswith("ok")


def test_train_on_given_batches(setup):
    table, normalizer = setup
    config = DTConfig(obs_dim=OBS, act_dim=ACT, context=K, hidden=16, layers=1)
    learner = Learner(config, normalizer, table, TrainConfig(batch_size=8, steps_per_call=5))
    batches = [table.sample(jax.random.key(i), 8, K, gx.Timestep(), pad="left") for i in range(3)]
    stacked = jax.tree.map(lambda *xs: jnp.stack(xs), *batches)
    samples = table.stats()["samples"]
    metrics = learner.train_on(stacked)
    assert learner.step == 3 and metrics["loss"].shape == (3,)
    assert np.all(np.isfinite(metrics["loss"]))
    assert table.stats()["samples"] == samples          # trained on the given rows only
    with pytest.raises(ValueError, match="batch_size=8"):
        learner.train_on(jax.tree.map(lambda x: x[:, :4], stacked))


def test_the_replay_table_is_saved_in_the_same_orbax_step_and_restored_exactly(setup, tmp_path):
    from gearjax.dt.orbax_table import TableRestore, latest_table
    import orbax.checkpoint as ocp
    table, normalizer = setup
    config = DTConfig(obs_dim=OBS, act_dim=ACT, context=K, hidden=16, layers=1, dropout=0.0)
    learner = Learner(config, normalizer, table, TrainConfig(batch_size=8, steps_per_call=10))
    learner.train(10)
    path = learner.save(tmp_path / "ckpt", table)
    restored = latest_table(tmp_path / "ckpt")
    for name in ("key", "length", "priority"):
        np.testing.assert_array_equal(restored.contents()[name], table.contents()[name])
    key = jax.random.key(3)
    a, b = table.sample(key, 16, K), restored.sample(key, 16, K)
    assert all(jax.tree.leaves(jax.tree.map(
        lambda x, y: bool((np.asarray(x) == np.asarray(y)).all()), a, b)))
    with ocp.CheckpointManager(tmp_path / "ckpt") as manager:  # the same step holds both
        step = manager.restore(10, args=ocp.args.Composite(table=TableRestore("host")))
    assert path.endswith("10") and len(step["table"]) == len(table)
    assert latest_table(tmp_path / "none") is None
