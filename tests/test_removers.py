"""Removers: which trajectory leaves when a full table takes one more."""

from __future__ import annotations

import jax
import numpy as np
import pytest

import gearjax as gx


def make(remover, capacity=3):
    return gx.Table({"x": gx.Column((), "int32")}, capacity=capacity, max_length=4,
                    remover=remover)


def insert(table, value, priority=1.0):
    return table.insert({"x": np.full(2, value)}, priority=priority)


@pytest.mark.parametrize("remover, survivors", [
    ("fifo", [2, 3, 4]),
    ("lifo", [0, 1, 4]),
])
def test_fifo_and_lifo(remover, survivors):
    with make(remover) as table:
        keys = [insert(table, v) for v in range(5)]  # the value inserted is its order
        assert keys == sorted(keys)
        assert table.contents()["key"].tolist() == [keys[i] for i in survivors]
        assert table.stats()["evictions"] == 2
        for i in survivors:  # the data under each key is the data inserted with it
            assert table.get(keys[i])["x"].tolist() == [i, i]
        for i in set(range(5)) - set(survivors):
            with pytest.raises(KeyError):
                table.get(keys[i])


def test_min_priority_evicts_the_lowest_then_the_oldest():
    with make("min_priority") as table:
        k = [insert(table, 0, priority=5.0), insert(table, 1, priority=1.0),
             insert(table, 2, priority=3.0)]
        k.append(insert(table, 3, priority=9.0))  # evicts k[1] (priority 1)
        assert table.contents()["key"].tolist() == [k[0], k[2], k[3]]
        table.update_priorities([k[0], k[2], k[3]], [2.0, 2.0, 2.0])
        k.append(insert(table, 4, priority=0.5))  # all tie at 2: evicts the oldest, k[0]
        assert table.contents()["key"].tolist() == [k[2], k[3], k[4]]
        k.append(insert(table, 5, priority=7.0))  # evicts k[4] (priority 0.5)
        assert table.contents()["key"].tolist() == [k[2], k[3], k[5]]


def test_evicted_trajectories_are_never_sampled():
    with make("fifo", capacity=4) as table:
        keys = [insert(table, v) for v in range(10)]
        batch = table.sample(jax.random.key(0), 256, 2, gx.Uniform())
        assert set(np.asarray(batch.keys).tolist()) == set(keys[6:])
        value = {key: i for i, key in enumerate(keys)}
        np.testing.assert_array_equal(np.asarray(batch["x"])[:, -1],
                                      [value[int(k)] for k in np.asarray(batch.keys)])
