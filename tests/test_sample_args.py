"""gearjax/_sample_args.py: a sample's arguments are checked and normalised
once (SampleArgs: pad resolved, width derived) and travel as such, into the
compiled sample, the exchanges and the memory check."""

from __future__ import annotations

import dataclasses

import jax
import pytest

import gearjax as gx
from gearjax import _sample_args


@pytest.mark.parametrize("window, width, code", [(None, 12, 0), (1, 1, 1), (12, 12, 12)])
def test_width_and_the_native_window_code_are_derived_once(window, width, code):
    args = _sample_args.normalise(4, window, gx.Uniform(), max_length=12)
    assert (args.width, args.window_code) == (width, code)


@pytest.mark.parametrize("pad, cut, resolved", [
    (None, "start", "left"), ("right", "start", "right"), (None, "end", "left"),
    (None, "full", "left")])
def test_pad_resolves_once(pad, cut, resolved):
    args = _sample_args.normalise(2, 3, gx.Uniform(), pad, cut, max_length=8)
    assert args.pad == resolved and args.pad_left == (resolved == "left")


def test_sample_args_are_hashable_and_frozen():
    """A static argument of the compiled sample: equal arguments, one entry."""
    a = _sample_args.normalise(2, 3, gx.Prioritized(0.5), max_length=8)
    b = _sample_args.normalise(2, 3, gx.Prioritized(0.5), max_length=8)
    assert a == b and hash(a) == hash(b)
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.width = 4


@pytest.mark.parametrize("bad, message", [
    (dict(window=9), "window"), (dict(window=0), "window"), (dict(batch_size=0), "batch_size"),
    (dict(cut="full", window=None), "needs a window"), (dict(pad="up"), "pad"),
    (dict(strategy="uniform"), "strategy")])
def test_normalise_refuses_what_check_refuses(bad, message):
    kwargs = dict(batch_size=2, window=3, strategy=gx.Uniform(), pad=None, cut="start") | bad
    with pytest.raises((TypeError, ValueError), match=message):
        _sample_args.normalise(**kwargs, max_length=8)
    with pytest.raises((TypeError, ValueError), match=message):
        _sample_args.check(jax.random.key(0), kwargs["batch_size"], kwargs["window"],
                           kwargs["strategy"], kwargs["pad"], kwargs["cut"], True,
                           max_length=8)


def test_the_memory_check_reads_the_derived_width():
    """Whole trajectories of a long table: the width is max_length, so a batch
    too big for memory is refused before anything runs."""
    columns = {"x": gx.Column((1 << 14,), "float32")}
    args = _sample_args.normalise(1 << 20, None, gx.Uniform(), max_length=1 << 16)
    with pytest.raises(ValueError, match=r"1048576 x 65536 steps"):
        _sample_args.check_room("a sample", args, columns, None)


def test_the_local_shards_program_checks_its_arguments():
    from gearjax.sharded import local
    tables = [gx.Table({"x": gx.Column((), "float32")}, 8, 4)]
    try:
        with pytest.raises(ValueError, match="window"):
            local.sample_program(tables, 2, window=5)
    finally:
        for t in tables:
            t.close()



def test_only_the_ranking_strategies_rank():
    """TopK and Recent draw among their best count (what replace=False and the
    exchanges treat apart); the weighted ones do not."""
    assert [s.ranks for s in (gx.Uniform(), gx.Timestep(), gx.Prioritized(1.0), gx.TopK(2),
                              gx.Recent(2))] == [False, False, False, True, True]
    with pytest.raises(ValueError, match="distinct trajectories"):
        _sample_args.normalise(3, 2, gx.TopK(2), replace=False, max_length=4)
    assert _sample_args.normalise(3, 2, gx.Uniform(), replace=False, max_length=4).batch_size == 3
