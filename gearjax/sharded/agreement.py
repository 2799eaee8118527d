"""What every process of a sharded table must pass alike (the agreed spec),
and how two processes' specs differ, in words.

Rows travel between processes by column position: an owner sends (``xla``)
or exposes (``nixl``, ``verbs``) a row's columns in the order of its own
columns, and the process that receives them names them in the order of its
own. So the columns must agree in order, not only by name: two processes that
list the same columns in different orders would swap them in every row read
from the other (and abort in the collective where their sizes differ). The
spec keeps the columns as a list, and each column's pad as the bytes it fills
a step with (``-0.0`` and ``0.0`` are different pads, which compare equal as
numbers; ``0`` and ``0.0`` in a float column are the same one).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from gearjax import rate_limiters
from gearjax.columns import Column


def table_spec(columns: dict[str, Column], capacity: int, max_length: int, remover: str,
               rate_limiter: rate_limiters.RateLimiter | None, exchange: str, name: str,
               processes: int, step_priorities: bool = False) -> dict:
    """The spec of a sharded table as JSON values: every argument that must
    be the same in every process (``placement``, ``exchange_timeout`` and
    ``on_dead_shard`` may differ: they act on this process alone)."""
    return {"columns": [column_entry(n, c) for n, c in columns.items()],
            "capacity": capacity, "max_length": max_length, "remover": remover,
            "exchange": exchange, "rate_limiter": rate_limiters.to_json(rate_limiter),
            "name": name, "processes": processes, "step_priorities": step_priorities}


def column_entry(name: str, column: Column) -> dict:
    """One column of the spec: compared by name, shape, dtype and pad bytes;
    ``pad`` is the pad as written, for messages only (a complex pad is no JSON
    number). A column's dtype is always in the machine's byte order (a
    ``Column`` of ``">i4"`` is an ``int32`` column whose inserts convert), so
    its name says all of it."""
    return {"name": name, "shape": list(column.shape), "dtype": column.dtype.name,
            "pad": repr(column.pad),
            "pad_bytes": np.array(column.pad, column.dtype).tobytes().hex()}


def differences(theirs: dict, mine: dict, other: int, process: int) -> list[str]:
    """How process `other`'s spec (`theirs`) differs from process
    `process`'s (`mine`), one phrase per difference; empty where they agree.

    Columns come first (their order, their names, then each shared column's
    shape, dtype and pad), then every other field by name.
    """
    found = _column_differences(theirs["columns"], mine["columns"], other, process)
    for field in sorted((set(theirs) | set(mine)) - {"columns"}):
        if theirs.get(field) != mine.get(field):
            found.append(f"{field}={theirs.get(field)!r} in process {other} against "
                         f"{mine.get(field)!r} in process {process}")
    return found


def _column_differences(theirs: list[dict], mine: list[dict], other: int,
                        process: int) -> list[str]:
    their_names = [c["name"] for c in theirs]
    my_names = [c["name"] for c in mine]
    found = []
    if their_names != my_names:
        if sorted(their_names) == sorted(my_names):
            found.append(f"the columns in another order: {their_names} in process {other} "
                         f"against {my_names} in process {process}. Rows travel between "
                         f"processes by column position, so a different order would swap "
                         f"columns: list the columns in the same order on every process")
        else:
            found.append(f"other columns: {their_names} in process {other} against "
                         f"{my_names} in process {process}")
    by_name = {c["name"]: c for c in theirs}
    for column in mine:
        their_column = by_name.get(column["name"])
        if their_column is not None and _identity(their_column) != _identity(column):
            found.append(f"column {column['name']!r} as {_describe(their_column, column)} in "
                         f"process {other} against {_describe(column, their_column)} in "
                         f"process {process}")
    return found


def _identity(column: dict) -> tuple[Any, ...]:
    """What makes two columns the same column (the pad by its bytes)."""
    return (column["shape"], column["dtype"], column["pad_bytes"])


def _describe(column: dict, against: dict) -> str:
    """A column for a message, ``int32[2] pad 0``, with what tells it from
    `against` where the plain form cannot: the pad's bytes where both pads
    print alike (``nan`` and ``-nan``: ``repr`` shows both as ``nan``)."""
    text = f"{column['dtype']}{column['shape']} pad {column['pad']}"
    if column["pad_bytes"] != against["pad_bytes"] and column["pad"] == against["pad"]:
        text += f" (bytes {column['pad_bytes']})"
    return text
