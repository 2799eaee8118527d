"""Hand-made HalfCheetah-v5 behaviour policies (gearjax.dt.locomotion): every
policy's actions have the action space's shape, dtype and bounds, and the good
gait outruns the random policy."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("mujoco", reason="needs the mujoco package: pip install 'gymnasium[mujoco]'")

from gearjax.dt import locomotion as L  # noqa: E402
from gearjax.dt.generate import mixture, uniform_random  # noqa: E402


def test_the_mixture_is_built_in_by_name():
    assert mixture("halfcheetah") is L.HALFCHEETAH


@pytest.fixture(scope="module")
def env():
    env = L.make_env(max_steps=200)
    yield env
    env.close()


@pytest.mark.parametrize("label", [label for label, _, _ in L.HALFCHEETAH.parts])
def test_actions_have_the_action_spaces_shape_dtype_and_bounds(env, label):
    make_policy = dict((lab, make) for lab, make, _ in L.HALFCHEETAH.parts)[label]
    low, high = env.action_space.low, env.action_space.high
    policy = make_policy(low, high)
    rng = np.random.default_rng(0)
    obs, _ = env.reset(seed=0)
    for _ in range(50):
        action = policy(np.asarray(obs, np.float32), rng)
        assert action.shape == env.action_space.shape and action.dtype == np.float32
        assert np.all(action >= low) and np.all(action <= high)
        obs, *_ = env.step(action)


def test_good_gait_beats_random_policy(env):
    low, high = env.action_space.low, env.action_space.high
    good = L.episode_returns(L.GOOD_GAIT, seeds=[0, 1], env=env)
    random = L.episode_returns(uniform_random(low, high), seeds=[0, 1], env=env)
    # 200 steps: the good gait runs about 4.4 m/s once up to speed (return
    # about 790); the random policy stays near its start (about -60)
    assert good.mean() > random.mean() + 300
    assert L.episode_returns(L.MEDIUM_GAIT, seeds=[0, 1], env=env).mean() > random.mean()
