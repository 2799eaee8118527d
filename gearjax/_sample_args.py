"""The sampling arguments' contract, in one place: what ``Table.sample`` and
``ShardedTable.sample`` accept, how an unset ``pad`` resolves, and what a
sample may ask of memory and of the rate limiter. Each table adds only what
is its own (a table's Prioritized alphas; a sharded table's
rows over every shard and its exchanges). The core checks the same ranges
again where values enter it (``xla_ffi/core/limits.h``)."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping
from typing import Any

import jax
import numpy as np

from gearjax import _checks, _gearjax
from gearjax._keys import is_key_dtype
from gearjax.columns import Column
from gearjax.strategies import Strategy

PADS = ("left", "right")
# Where a window lies in its trajectory (xla_ffi/core/window.h).
CUTS = _checks.CUT_CODES


@dataclasses.dataclass(frozen=True)
class SampleArgs:
    """A sample's arguments, checked and normalised once: ``pad`` resolved
    ("left" unless a ``cut="start"`` sample asked for "right") and ``width``,
    the steps a row of the batch holds, derived; the compiled sample, the
    exchanges and the memory check read them from here (hashable: a static
    jit argument)."""

    batch_size: int
    window: int | None   # None: whole trajectories, from step 0
    strategy: Strategy
    pad: str
    cut: str
    replace: bool
    width: int           # window, or the table's max_length for whole trajectories

    @property
    def cut_code(self) -> int:
        return CUTS[self.cut]

    @property
    def window_code(self) -> int:
        """The window as the native calls take it: 0 for whole trajectories."""
        return self.window or 0

    @property
    def pad_left(self) -> bool:
        return self.pad == "left"


def normalise(batch_size: Any, window: Any, strategy: Any, pad: Any = None, cut: Any = "start",
              replace: Any = True, *, max_length: int, rows: int = 1) -> SampleArgs:
    """Checks a sample's arguments (``rows`` samples of ``batch_size`` rows
    are drawn at once: a sharded table's processes), resolves ``pad`` and
    derives ``width``. Raises ``TypeError`` or ``ValueError`` naming the
    argument; checks nothing of a table's state."""
    batch_size = _checks.integer("batch_size", batch_size, 1, _checks.MAX_BATCH)
    if batch_size > _checks.MAX_BATCH // rows:
        raise ValueError(f"batch_size {batch_size} x {rows} shards exceeds "
                         f"{_checks.MAX_BATCH} rows")
    if window is not None:
        window = _checks.integer("window", window, 1, max_length)
    if not isinstance(cut, str) or cut not in CUTS:
        raise ValueError(f"cut must be one of {tuple(CUTS)}, got {cut!r}")
    if pad is not None and (not isinstance(pad, str) or pad not in PADS):
        raise ValueError(f"pad must be 'left' or 'right', got {pad!r}")
    if cut != "start" and window is None:
        raise ValueError(f"cut={cut!r} needs a window (window=None samples whole "
                         f"trajectories from step 0)")
    if cut == "end" and pad == "right":
        raise ValueError("cut='end' pads at the start: pad='right' contradicts it")
    if cut == "full" and pad is not None:
        raise ValueError("cut='full' windows are never padded: leave pad unset")
    pad = "left" if pad is None or cut != "start" else pad
    replace = _checks.flag("replace", replace)
    if not isinstance(strategy, Strategy) or type(strategy) is Strategy:
        raise TypeError(f"strategy must be gearjax.Uniform(), Timestep(), Prioritized(alpha), "
                        f"PrioritizedSteps(alpha), TopK(k) or Recent(n), got {strategy!r}")
    if strategy.draws_steps and window is None:
        raise ValueError(f"{strategy!r} places a window at the drawn step: give a window")
    if not replace and strategy.ranks and batch_size > strategy.count:
        raise ValueError(f"cannot sample {batch_size} distinct trajectories (replace=False) "
                         f"from the {strategy!r} best")
    # The width comes from the core's one derivation (window.h WindowWidth),
    # which the native calls use too.
    return SampleArgs(batch_size, window, strategy, pad, cut, replace,
                      _gearjax.window_width(window or 0, max_length))


def check(rng_key: Any, batch_size: Any, window: Any, strategy: Any, pad: Any, cut: Any,
          replace: Any, *, max_length: int, rows: int = 1) -> SampleArgs:
    """``normalise``, and then ``rng_key`` checked: what the tables' sample
    methods take."""
    args = normalise(batch_size, window, strategy, pad, cut, replace, max_length=max_length,
                     rows=rows)
    check_rng_key(rng_key)
    return args


def check_room(what: str, args: SampleArgs, columns: Mapping[str, Column], rate_limiter: Any,
               rows: int = 1) -> None:
    """Refuses a sample whose results would not fit in this machine's memory,
    or whose batch the table's rate limiter could never admit."""
    width = args.width
    _checks.result_bytes(f"{what} of {'' if rows == 1 else f'{rows} x '}{args.batch_size} x "
                         f"{width} steps", [
        *(((rows * args.batch_size, width, *c.shape), c.dtype.itemsize)
          for c in columns.values()),
        ((args.batch_size, width), 5),          # mask and timestep
        ((rows * args.batch_size,), 24)])       # keys, start, probability, table size, valid
    if rate_limiter is not None:
        rate_limiter.check_batch(args.batch_size)


def check_rng_key(key: Any) -> None:
    """A JAX PRNG key: a typed key array of shape () or a legacy uint32[2]."""
    dtype = getattr(key, "dtype", None)
    shape = getattr(key, "shape", None)
    typed = False
    try:
        typed = is_key_dtype(dtype)
    except TypeError:
        pass
    if typed and shape == ():
        return
    if typed:
        raise TypeError(f"rng_key must be one JAX PRNG key, of shape (); got an array of keys "
                        f"of shape {shape} (one call draws one batch from one key: pass one, "
                        f"e.g. keys[0], or call once per key)")
    try:
        uint32 = dtype is not None and np.dtype(dtype) == np.uint32
    except TypeError:
        uint32 = False
    legacy = legacy_key_shape()
    if uint32 and shape in ((2,), legacy):
        return
    raise TypeError(f"rng_key must be one JAX PRNG key (jax.random.key(...), or a legacy "
                    f"jax.random.PRNGKey: uint32{list(legacy)} under the default "
                    f"implementation, {jax.config.jax_default_prng_impl}), got "
                    f"{type(key).__name__} with dtype {dtype} and shape {shape}")


# JAX's implementations' key shapes; another (registered by a user) is asked
# once (a key made with it), not traced: eval_shape's cache ignores which
# implementation is the default.
_LEGACY_KEY_SHAPES = {"threefry2x32": (2,), "rbg": (4,), "unsafe_rbg": (4,)}


@functools.lru_cache(maxsize=None)
def _legacy_key_shape(impl: str) -> tuple[int, ...]:
    known = _LEGACY_KEY_SHAPES.get(impl)
    return known if known is not None else tuple(np.shape(jax.random.PRNGKey(0)))


def legacy_key_shape() -> tuple[int, ...]:
    """The shape of a legacy key (jax.random.PRNGKey) of JAX's default PRNG
    implementation: (2,) for threefry, (4,) for rbg; a raw uint32 array of
    that shape is such a key to jax.random (and to seed_words)."""
    return _legacy_key_shape(jax.config.jax_default_prng_impl)
