"""Pieces of the one-sided exchange that need no second process: the tree
descent a reader runs on lines it read (the owner's own SumTreeChild,
xla_ffi/core/sum_tree.h, bound natively), the slot record's layout (from the
core), and int64 keys handed to JAX without x64."""

from __future__ import annotations

import jax
import numpy as np

from gearjax import _ffi
from gearjax.sharded.one_sided import _choose_children


def reference_child(line: np.ndarray, target: float) -> tuple[int, float]:
    """The child whose cumulative interval [before, before + w) holds target,
    skipping zero weights; past the end, the last positive child."""
    before = 0.0
    for c, w in enumerate(line):
        if w > 0 and before <= target < before + w:
            return c, target - before
        before += w
    positives = [c for c, w in enumerate(line) if w > 0]
    c = positives[-1]
    return c, target - (before - line[c])


def test_the_descent_chooses_like_the_owners_sampler():
    rng = np.random.default_rng(0)
    lines = rng.integers(0, 4, (2000, 8)).astype(float)
    lines[lines.sum(1) == 0, 3] = 1.0
    targets = rng.random(2000) * lines.sum(1)
    targets[:5] = lines[:5].sum(1)  # rounding past the end: the last positive child
    child, remaining, ok = _choose_children(lines, targets)
    assert ok.all()
    for i in range(len(lines)):
        c, r = reference_child(lines[i], targets[i])
        assert child[i] == c, (lines[i], targets[i])
        assert np.isclose(remaining[i], r)
        assert lines[i, child[i]] > 0  # never a zero-weight child


def test_a_line_without_weight_is_reported():
    child, _, ok = _choose_children(np.zeros((1, 8)), np.array([0.5]))
    assert not ok[0]


def test_int64_values_reach_jax_whole_without_x64():
    values = np.array([0, 1, (1 << 62) | 12345, (1 << 63) - 1, -1], np.int64)
    out = _ffi.int64_array(values)
    assert out.dtype == np.int64
    assert np.asarray(out).tolist() == values.tolist()
    assert not jax.config.jax_enable_x64


def test_the_native_descent_refuses_lines_of_another_shape():
    import pytest
    from gearjax import _gearjax
    with pytest.raises(ValueError, match=r"\[n, 8\] lines"):
        _gearjax.sum_tree_children(np.zeros((2, 7)), np.zeros(2))
    with pytest.raises(ValueError, match=r"\[n, 8\] lines"):
        _gearjax.sum_tree_children(np.zeros((2, 8)), np.zeros(3))


def test_the_slot_record_layout_comes_from_the_core():
    from gearjax._gearjax import slot_layout
    from gearjax.sharded.one_sided_protocol import _RECORD, _SLOT_BYTES
    layout = slot_layout()
    assert _RECORD.itemsize == _SLOT_BYTES == layout["slot_bytes"]
    assert [_RECORD.fields[name][1] for name in ("key", "length", "priority", "pins", "state")] \
        == [layout[f"{name}_offset"] for name in ("key", "length", "priority", "pins", "state")]
