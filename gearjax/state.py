"""The table state: what a program threads through its table calls to order them.

``state = table.state()`` gives one; every call that reads or changes a table
from compiled code takes it first and returns its successor first::

    state, batch = table.sample(state, key, 256, window=20)
    state, count = table.update_priorities(state, batch.keys, new_priorities)

A call runs after the call whose state it was given, as data flows, so a
program that passes each state on (through ``lax.scan`` carries, loop states
and ``cond`` operands) runs every call exactly once, in that order, and keeps
JAX's fast dispatch path (gearjax/_primitives.py says how). Between programs,
a program may start from a fresh ``table.state()`` (XLA runs the programs of
one device in dispatch order), or take the state the previous one returned
(ordered by data, whatever the runtime does).

A state is a plain ``jax.Array``, a uint32 scalar whose value stays 0: only its
data dependence matters. A bare array rather than a pytree class because JAX's
dispatch charges every pytree node on every call (measured here: 4-7 us per
call for a one-field dataclass or namedtuple, about 5-8% of a small sample).
So a state is not tied to one table: one state may order the calls of several
tables, each call after the one whose state it got. It travels in train
states, through ``jax.jit`` arguments and Orbax checkpoints like any array.
"""

from __future__ import annotations

import weakref
from typing import Any

import jax
import jax.extend
import jax.numpy as jnp
import numpy as np

from gearjax._keys import is_key_dtype
from gearjax._primitives import STATE_DTYPE

TableState = jax.Array
"""The type of a table state (a uint32 scalar ``jax.Array``), for annotations.

Examples:
  >>> def train_step(state: gx.TableState, key: jax.Array) -> gx.TableState:
  ...     state, batch = table.sample(state, key, 32, window=8)
  ...     return state
"""

# Tracers already given to a table call, by id: (the tracer, weakly; the trace
# of the call). See consume().
_consumed: dict[int, tuple[weakref.ref, Any]] = {}
# States made by table.state() while tracing, by id: (the tracer, weakly; the
# trace); and, per (trace, table), the fresh state its calls started from.
_fresh: dict[int, tuple[weakref.ref, Any]] = {}
_started: list[tuple[Any, int, weakref.ref]] = []  # (trace, handle, the state): traces
# compare by equality only (not hashable); entries of finished traces are pruned.


def initial() -> jax.Array:
    """A fresh table state (what ``table.state()`` returns once the table is
    checked open).

    Returns:
      A uint32 scalar ``jax.Array`` of value 0.
    """
    # A new array each time, never one shared: a program that donates a state
    # (a train state donated whole) deletes that array, and a shared one would
    # go from under every other holder.
    state = jnp.zeros((), STATE_DTYPE)
    if isinstance(state, jax.core.Tracer):  # made while tracing: see consume()
        _remember(_fresh, state, jax.extend.core.get_opaque_trace_state(convention="flax"))
    return state


def is_state(value: Any) -> bool:
    """Whether ``value`` looks like a table state (a uint32 scalar array).

    How a call tells its stateful form from its stateless one. PRNG keys, the
    only other array a call takes first, are key-typed or uint32[2].

    Args:
      value: anything.

    Returns:
      True for a uint32 array of shape ``()`` that is not a PRNG key.
    """
    dtype = getattr(value, "dtype", None)
    if dtype is None or getattr(value, "shape", None) != ():
        return False
    if isinstance(dtype, np.dtype):  # an array's (never a PRNG key's): asked first, it is cheap
        return dtype == STATE_DTYPE
    if is_key_dtype(dtype):
        return False
    return np.dtype(dtype) == STATE_DTYPE


def consume(state: Any, table: Any, handle: int | None = None) -> Any:
    """The state, checked, for a call on ``table``.

    While tracing, refuses a state that another table call of the same
    function was already given: two calls given the same state are not
    ordered against each other (the second must take the state the first
    returned). A state closed over by both branches of a ``cond`` is given
    once in each branch's own trace, and only one branch runs: that is
    allowed.

    Also refuses a second state made by ``table.state()`` in the same trace
    for calls on the same table: the two chains would not be ordered against
    each other either (a program makes one and passes it on).

    Args:
      state: what the call was given as its state.
      table: the table, which an error message names by its ``repr`` (made
        only then: a table's ``repr`` costs microseconds every call would pay),
        or a string that names it.
      handle: the table's handle (None: the fresh-state rule is not applied).

    Returns:
      ``state`` itself.

    Raises:
      TypeError: ``state`` is not a table state (a uint32 scalar array).
      ValueError: while tracing, ``state`` was already given to another table
        call of the same function.
    """
    if not is_state(state):
        raise TypeError(f"a table state is a uint32 scalar array (from table.state()), got "
                        f"{type(state).__name__} with shape {getattr(state, 'shape', None)} and "
                        f"dtype {getattr(state, 'dtype', None)}")
    if isinstance(state, jax.core.Tracer):
        trace = jax.extend.core.get_opaque_trace_state(convention="flax")
        seen = _consumed.get(id(state))
        if seen is not None and seen[0]() is state and seen[1] == trace:
            raise ValueError(
                f"this table state was already passed to another table call in this function "
                f"(now: {_named(table)}): two calls given the same state are not ordered "
                f"against each other. Pass each call the state the previous call returned "
                f"(state, batch = table.sample(state, ...))")
        _remember(_consumed, state, trace)
        fresh = _fresh.get(id(state))
        if handle is not None and fresh is not None and fresh[0]() is state and fresh[1] == trace:
            _started[:] = [e for e in _started if e[2]() is not None]
            for started_trace, started_handle, first in _started:
                if started_handle == handle and started_trace == trace and first() is not state:
                    raise ValueError(
                        f"a second table.state() gave a call on {_named(table)} a new chain in "
                        f"this function: calls on one table from two fresh states are not "
                        f"ordered against each other. Make one state per program and pass it "
                        f"from call to call")
            _started.append((trace, handle, weakref.ref(state)))
    return state


def _named(table: Any) -> str:
    return table if isinstance(table, str) else repr(table)


def _remember(registry: dict[int, tuple[weakref.ref, Any]], tracer: jax.core.Tracer,
              trace: Any) -> None:
    key = id(tracer)

    def forget(ref: weakref.ref) -> None:  # unless a newer tracer took the id
        if registry.get(key, (None,))[0] is ref:
            del registry[key]

    registry[key] = (weakref.ref(tracer, forget), trace)
