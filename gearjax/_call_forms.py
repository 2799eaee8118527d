"""The two forms every table call is written in (docs: Semantics in jit):
with a table state first (``state, out = table.call(state, ...)``: the only
form in compiled code) or without (``out = table.call(...)``: eager calls
only, each from a fresh state). ``gearjax.Table`` and ``gearjax.ShardedTable``
tell them apart here, the same way, and refuse the stateless form while
tracing."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import warnings
import weakref

import jax
import jax.extend
import jax.numpy as jnp

from gearjax import _checks
from gearjax import state as table_state
from gearjax._keys import is_key_dtype
from gearjax._primitives import STATE_DTYPE
from gearjax.state import TableState, is_state

# JAX's trace outside any transformation (the same object in every thread);
# any other current trace means the call is being traced.
_EAGER_TRACE = jax.extend.core.find_top_trace(())

# What an eager stateless call passes as its state, per default-device
# setting (jax.config.jax_default_device: None, a device or a platform name):
# one zero state, made once. Programs of one device run in dispatch order,
# and an eager call waits for its results, so nothing is lost by not threading
# it. A JAX array, not a NumPy scalar: JAX copies a NumPy argument into a new
# buffer on every call, a large part of what an eager sample cost over the
# jitted call (scripts/bench_eager.py). Never handed to the caller, so no
# program donates it; remade if something deleted it anyway.
_eager_states: dict[Any, jax.Array] = {}


def _eager_state_array() -> jax.Array:
    setting = jax.config.jax_default_device
    state = _eager_states.get(setting)
    if state is None or state.is_deleted():
        state = _eager_states[setting] = jnp.zeros((), STATE_DTYPE)
    return state


class StatelessCallInJitError(TypeError):
    """A table call without a table state, traced inside jit, scan, vmap or
    grad: compiled code orders its table calls by the state they thread."""


def tracing() -> bool:
    """Whether the caller is being traced (inside jit, scan, vmap, grad)."""
    return jax.extend.core.find_top_trace(()) is not _EAGER_TRACE


def eager_state(call: str, stateful: str) -> jax.Array:
    """The state an eager stateless call runs with (one zero state per default
    device, made once);
    while tracing, refuses the call (refuse_traced)."""
    refuse_traced(call, stateful)
    return _eager_state_array()


def refuse_traced(call: str, stateful: str) -> None:
    """While tracing, refuses a stateless call (StatelessCallInJitError) with
    the one-line change: ``call`` is the call as written (``"table.sample(key,
    ...)"``), ``stateful`` its state form (``"state, batch =
    table.sample(state, key, ...)"``)."""
    if tracing():
        raise StatelessCallInJitError(
            f"{call} without a table state was traced (inside jax.jit, lax.scan, vmap, grad "
            f"or another transformation): compiled code takes a table state and passes on the "
            f"one each call returns, which orders the calls and keeps JAX's fast dispatch "
            f"path. Write\n    state = table.state()\n    {stateful}\nand pass `state` to the "
            f"next table call (docs: Semantics in jit). The stateless form is for eager calls "
            f"only (gearjax 0.x no longer compiles it; see CHANGELOG.md)")


def wait_for(state: TableState) -> None:
    """Waits for the program that returned ``state``: an eager call given a
    state runs after that program's table calls. A JAX array waits by its own
    method, without ``jax.block_until_ready``'s pytree walk, and not at all
    when it is the state last found ready (mark_ready): both were part of
    what the eager state form of insert_batch cost over its stateless form
    (scripts/bench_eager.py)."""
    ready = _last_ready
    if ready is not None and ready() is state and not _deleted(state):
        return
    wait = getattr(state, "block_until_ready", None)
    if wait is None:  # a NumPy uint32 scalar array, say: nothing runs
        return
    wait()
    mark_ready(state)


def _deleted(state: Any) -> bool:
    """Whether ``state`` is a JAX array deleted since (donated to a program,
    say): waited for, it raises, as it did before it was found ready."""
    deleted = getattr(state, "is_deleted", None)
    return deleted is not None and deleted()


# The state an eager call last found ready, weakly: a loop that passes the
# state from eager call to eager call gives the next call the state the last
# one waited for or returned, and a ready array stays ready (a failed one
# raised instead, and was not marked), so that call need not ask again.
_last_ready: Any = None


def mark_ready(state: Any) -> None:
    """Remembers ``state`` (a JAX array whose program has run) as ready, for
    wait_for. One at a time; anything that cannot be referenced weakly is not
    remembered."""
    global _last_ready
    try:
        _last_ready = weakref.ref(state)
    except TypeError:
        pass


def warn_ordered(ordered: Any) -> None:
    """``sample(ordered=...)``: checked (a bool), then deprecated, doing
    nothing. It chose between the compiled stateless forms gearjax no longer
    has; an eager call always runs in order."""
    _checks.flag("ordered", ordered)
    warnings.warn("sample(ordered=...) is deprecated and does nothing: eager samples run in "
                  "order, and compiled ones are ordered by the table state they take (see "
                  "CHANGELOG.md). Drop the argument", DeprecationWarning, stacklevel=4)


def split_state(args: tuple) -> tuple[TableState | None, tuple]:
    """(the state, the other arguments) of a sample written with or without
    one, told apart by the first argument's type (gearjax.state.is_state)."""
    if args and is_state(args[0]):
        return args[0], args[1:]
    if len(args) > 1 and is_key(args[1]):
        # Something before a key: meant as a state (an int, a uint32[2], a
        # float scalar); refused as one, not read as a key.
        table_state.consume(args[0], "")
    return None, args


def split_insert_batch_state(args: tuple, kwargs: Mapping[str, Any]
                             ) -> tuple[TableState | None, tuple]:
    """The same for insert_batch, whose first argument after a state is the
    mapping of columns."""
    stateful = (len(args) > 1 and isinstance(args[1], Mapping)) or \
        (len(args) == 1 and "columns" in kwargs)
    return (args[0], args[1:]) if stateful else (None, args)


def split_update_state(args: tuple, kwargs: Mapping[str, Any]
                       ) -> tuple[TableState | None, tuple]:
    """The same for update_priorities: the state form has one argument more
    (keys may be any integers, so their type cannot tell the forms apart).
    Two arguments whose first looks like a state are refused: (state, keys)
    with the priorities forgotten would set key 0's priority to the keys'
    values."""
    given = len(args) + sum(name in kwargs for name in ("keys", "priorities"))
    if given == 2 and args and is_state(args[0]) and "keys" not in kwargs:
        raise TypeError(
            "update_priorities got two arguments and the first is a uint32 scalar, which "
            "reads as a table state: the state form takes three, update_priorities(state, "
            "keys, priorities); the eager stateless form takes (keys, priorities) with keys an "
            "integer array of shape [n] or a Python int (pass a uint32 scalar key as "
            "np.array([key]))")
    return (args[0], args[1:]) if given == 3 and args else (None, args)


def is_key(value: Any) -> bool:
    """A typed JAX PRNG key (what follows a state in a sample)."""
    dtype = getattr(value, "dtype", None)
    return is_key_dtype(dtype)
