"""The two forms every table call is written in (docs: Semantics in jit):
with a table state first (the taught form: ``state, out = table.call(state,
...)``) or without (ordered by JAX's ordered effects). ``gearjax.Table`` and
``gearjax.ShardedTable`` tell them apart here, the same way."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jax

from gearjax import state as table_state
from gearjax.state import TableState, is_state


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
            "keys, priorities); the stateless form takes (keys, priorities) with keys an "
            "integer array of shape [n] or a Python int (pass a uint32 scalar key as "
            "np.array([key]))")
    return (args[0], args[1:]) if given == 3 and args else (None, args)


def is_key(value: Any) -> bool:
    """A typed JAX PRNG key (what follows a state in a sample)."""
    dtype = getattr(value, "dtype", None)
    return dtype is not None and jax.dtypes.issubdtype(dtype, jax.dtypes.prng_key)
