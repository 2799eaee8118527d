"""The sampled Batch's mapping face over its columns (gearjax/batch.py)."""

from __future__ import annotations

import gearjax as gx


def test_a_batch_reads_its_columns_as_a_mapping_does():
    """Flashbax users reach for the mapping methods: every one but keys()
    (batch.keys is the trajectory keys) works on the columns."""
    import jax
    import numpy as np

    with gx.Table({"obs": gx.Column((2,), "float32"), "r": gx.Column((), "int32")},
                  capacity=4, max_length=3) as table:
        table.insert({"obs": np.ones((3, 2), np.float32), "r": np.ones(3, np.int32)})
        batch = table.sample(jax.random.key(0), 2, window=2)
    assert list(batch) == ["obs", "r"] and len(batch) == 2
    assert "obs" in batch and "keys" not in batch
    assert batch.get("obs") is batch["obs"] and batch.get("missing") is None
    assert dict(batch.items()) == batch.columns and list(batch.values()) == [
        batch["obs"], batch["r"]]
    assert batch.keys.shape == (2,)  # the documented name: the rows' trajectory keys
    assert list(batch.columns.keys()) == ["obs", "r"]
    # Still a pytree: jit returns it whole.
    assert list(jax.jit(lambda b: b)(batch)) == ["obs", "r"]
