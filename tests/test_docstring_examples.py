"""The Examples in the public API's docstrings run as written (they render on
the API reference pages): each docstring's examples run as one doctest, with
jax, jax.numpy, numpy and gearjax imported, and the names the examples take
as given (``columns``, a filled ``table``, its ``state``, a ``key``) ready."""

from __future__ import annotations

import doctest

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gearjax as gx
from gearjax import batch, columns, rate_limiters, state, strategies, table, writer
from gearjax.sharded import table as sharded_table

MODULES = (table, columns, batch, state, strategies, rate_limiters, writer, sharded_table)


def examples():
    finder = doctest.DocTestFinder(exclude_empty=True)
    found = []
    for module in MODULES:
        for test in finder.find(module, module.__name__):
            if test.examples:
                found.append(test)
    return found


COLUMNS = {"obs": gx.Column((3,), "float32"), "reward": gx.Column((), "float32")}


@pytest.mark.parametrize("test", examples(), ids=lambda t: t.name)
def test_docstring_examples_run(test):
    # What the examples take as given: `columns`, a `table` of 64 trajectories
    # of 10 to 49 steps with priorities, its `state`, a `key`.
    t = gx.Table(COLUMNS, capacity=1000, max_length=50, placement="host")
    rng = np.random.default_rng(0)
    for length in rng.integers(10, 50, 64):
        t.insert({"obs": rng.standard_normal((length, 3)).astype(np.float32),
                  "reward": np.ones(length, np.float32)}, priority=float(rng.uniform(0.1, 2)))
    test.globs = {"jax": jax, "jnp": jnp, "np": np, "gx": gx, "columns": COLUMNS, "table": t,
                  "state": t.state(), "key": jax.random.key(0)}
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    runner.run(test)
    try:
        assert runner.failures == 0, f"{runner.failures} failing example(s) in {test.name}"
    finally:
        if not t.closed:
            t.close()
