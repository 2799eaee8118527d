"""Shared fixtures: a small table with mixed columns, filled with random data."""

from __future__ import annotations

import numpy as np
import pytest

import gearjax as gx
from reference import random_trajectory

COLUMNS = {
    "obs": gx.Column((5,), "float32"),
    "action": gx.Column((2,), "float32", pad=-10.0),
    "reward": gx.Column((), "float32"),
    "frame": gx.Column((3, 2), "uint8", pad=7),
    "done": gx.Column((), "bool"),
}


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(0)


@pytest.fixture
def filled(rng):
    """(table, stored) where stored maps key -> the trajectory inserted under it."""
    table = gx.Table(COLUMNS, capacity=32, max_length=12)
    stored = {}
    for length in rng.integers(1, 13, size=20):
        trajectory = random_trajectory(rng, COLUMNS, int(length))
        stored[table.insert(trajectory, priority=float(rng.uniform(0.1, 5)))] = trajectory
    yield table, stored
    table.close()
