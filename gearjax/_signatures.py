"""What ``inspect.signature``, ``help()`` and editors show for the methods with
two call forms (a table state first, or not): the state form's parameters, the
first ``typing.overload``, instead of the implementation's ``(*args,
**kwargs)``. The docstrings name both forms; type checkers read the overloads."""

from __future__ import annotations

import inspect
import typing
from collections.abc import Callable
from typing import TypeVar

F = TypeVar("F", bound=Callable)


def first_overload(method: F) -> F:
    """Decorates the implementation after its overloads."""
    overloads = typing.get_overloads(method)
    if not overloads:
        raise TypeError(f"{method.__qualname__} has no overloads to show")
    method.__signature__ = inspect.signature(overloads[0])
    return method
