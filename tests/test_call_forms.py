"""gearjax/_call_forms.py: both tables tell a call written with a table state
from one written without by the same rules, and refuse what would be misread."""

from __future__ import annotations

import jax
import numpy as np
import pytest

import gearjax as gx
from gearjax import _call_forms


@pytest.fixture
def state():
    return gx.Table({"x": gx.Column((), "float32")}, 4, 2).state()


def test_a_sample_with_a_state_first_is_split(state):
    key = jax.random.key(0)
    assert _call_forms.split_state((state, key, 8)) == (state, (key, 8))
    assert _call_forms.split_state((key, 8)) == (None, (key, 8))


@pytest.mark.parametrize("before", [3, np.int32(7), 0.5, np.zeros(2, np.uint32)])
def test_something_not_a_state_before_a_key_is_refused_as_a_state(before):
    with pytest.raises(TypeError):
        _call_forms.split_state((before, jax.random.key(0), 8))


def test_insert_batch_is_split_by_the_mapping_of_columns(state):
    columns = {"x": np.zeros((1, 2), np.float32)}
    assert _call_forms.split_insert_batch_state((state, columns, [2]), {})[0] is state
    assert _call_forms.split_insert_batch_state((columns, [2]), {})[0] is None
    assert _call_forms.split_insert_batch_state((state,), {"columns": columns})[0] is state


def test_update_priorities_is_split_by_its_count_and_refuses_a_forgotten_priority(state):
    keys, priorities = np.arange(3), np.ones(3)
    assert _call_forms.split_update_state((state, keys, priorities), {}) == \
        (state, (keys, priorities))
    assert _call_forms.split_update_state((keys, priorities), {})[0] is None
    with pytest.raises(TypeError, match="takes three"):
        _call_forms.split_update_state((state, keys), {})


def test_only_typed_keys_count_as_keys():
    assert _call_forms.is_key(jax.random.key(0))
    assert not _call_forms.is_key(jax.random.PRNGKey(0))
    assert not _call_forms.is_key(3)
