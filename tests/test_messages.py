"""Errors that say what happened and what to do, for mistakes users make: sampling an
empty table, running a program of a closed table, passing a batch of keys, strategy
counts out of range. Each of these once said something wrong or unreadable."""

from __future__ import annotations

import jax
import numpy as np
import pytest

import gearjax as gx


def table(**kwargs) -> gx.Table:
    return gx.Table({"x": gx.Column((), "float32")}, capacity=4, max_length=4, **kwargs)


EMPTY = r"the table is empty, and sampling does not wait .*no rate limiter, or its limiter's " \
        r"timeout is 0.*timeout > 0"


@pytest.mark.parametrize("limiter", [None, gx.MinSize(1, timeout=0.0)], ids=["none", "timeout-0"])
def test_sampling_an_empty_table_says_why_it_did_not_wait(limiter):
    """It once suggested a limiter with a timeout even where one (timeout 0) was set."""
    t = table(rate_limiter=limiter)
    with pytest.raises(Exception, match=EMPTY):
        t.sample(jax.random.key(0), 2, 1)
    with pytest.raises(Exception, match=EMPTY):  # a GPU raises where the result is read
        jax.block_until_ready(
            jax.jit(lambda s, k: t.sample(s, k, 2, 1)[1]["x"])(t.state(), jax.random.key(0)))


def test_a_program_of_a_closed_table_does_not_speak_of_a_replacement():
    t = table()
    t.insert({"x": np.ones(2, np.float32)})
    f = jax.jit(lambda s, k: t.sample(s, k, 2, 1)[1]["x"])
    f(t.state(), jax.random.key(0))
    state = t.state()
    t.close()
    with pytest.raises(Exception, match=r"is closed; this program was compiled against it and "
                                        r"cannot run .*trace the program again") as info:
        jax.block_until_ready(f(state, jax.random.key(0)))
    assert "replaced it" not in str(info.value)


@pytest.mark.parametrize("form", ["eager", "jit", "legacy-eager"])
def test_a_batch_of_keys_is_refused_saying_one_key_is_expected(form):
    """Two stacked keys once raised "Cannot interpret 'key<fry>' as a data type"."""
    t = table()
    t.insert({"x": np.ones(2, np.float32)})
    keys = jax.random.split(jax.random.key(0), 2)
    if form == "eager":
        call = lambda: t.sample(keys, 2, 1)  # noqa: E731
    elif form == "jit":
        call = lambda: jax.jit(lambda s, k: t.sample(s, k, 2, 1)[0])(t.state(), keys)  # noqa: E731
    else:
        call = lambda: t.sample(jax.random.key_data(keys), 2, 1)  # noqa: E731
    expected = r"one JAX PRNG key, of shape \(\); got an array of keys of shape \(2,\)" \
        if form != "legacy-eager" else r"one JAX PRNG key .*dtype uint32 and shape \(2, 2\)"
    with pytest.raises(TypeError, match=expected):
        call()
    assert t.stats()["samples"] == 0


@pytest.mark.parametrize("make, name", [(gx.TopK, "TopK k"), (gx.Recent, "Recent n")])
def test_strategy_counts_out_of_range_print_a_readable_bound(make, name):
    """The bound was printed as 2**1000 in 302 digits."""
    with pytest.raises(ValueError, match=rf"{name} must be an integer >= 1, got 0") as info:
        make(0)
    assert len(str(info.value)) < 80
    with pytest.raises(ValueError, match=r"must be an integer >= 1, got -5"):
        make(-5)
