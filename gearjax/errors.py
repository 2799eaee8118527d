"""What a failed table call raises, and ``table_error``, which names the failure
whatever class carried it.

A table call can fail as it runs, after its arguments were accepted, in five
ways: the table is closed (``"closed"``), the call could not go ahead in time
(``"timeout"``: a rate limiter held it past its timeout), a sample asked for
more than the table can serve and does not wait (``"shortfall"``: an empty
table, or too few items for ``cut="full"``, ``replace=False`` or
``max_times_sampled``, with no rate limiter or timeout 0), it was waiting
when a signal arrived and gave
way to it (``"interrupted"``: Ctrl-C; docs: Rate limiters), or it failed for a
reason its message gives (``"failed"``: a NaN priority computed inside the
program, a GPU error).

The class that carries such a failure depends on how the call ran, and for
compiled programs that is JAX's choice, not gearjax's:

- ``Table`` methods called eagerly raise ``jax.errors.JaxRuntimeError`` (a
  ``RuntimeError``) for a failure of the call's program, ``RuntimeError`` for a
  table closed before the call, ``TimeoutError`` for a host insert held back,
  ``ValueError`` for a GPU priority update that failed after its program
  returned (raised by the next call). ``sample(..., numpy=True)`` runs no
  program and raises as a host insert does: ``TimeoutError`` for a shortfall
  or a timeout, ``RuntimeError`` for a table closed meanwhile; and, as the
  eager call's program would, ``jax.errors.JaxRuntimeError`` for another
  failure as it ran (every priority 0).
- A program you compile raises ``jax.errors.JaxRuntimeError`` when JAX runs it
  through its Python dispatch (the first call) or when the failure surfaces as
  its results are read, but ``ValueError`` with the same message when JAX's
  C++ fast dispatch path (later calls) sees the
  failure while launching it: jaxlib turns every failed launch there into a
  ``ValueError``. On the CPU, XLA runs programs it judges cheap at launch, so
  a small program's failures show at the call as ``ValueError`` and a large
  one's at the read as ``JaxRuntimeError``.

So ``except RuntimeError`` around a compiled step misses some failures, and
``except ValueError`` would also catch argument errors raised while tracing.
Catch both and ask ``table_error`` whether the error is a table's::

    try:
        state, batch = step(state, key)
    except (jax.errors.JaxRuntimeError, ValueError) as e:
        if gx.table_error(e) not in ("timeout", "shortfall"):
            raise
"""

from __future__ import annotations

import re
from typing import Literal, NoReturn

import jax

from gearjax import _gearjax

TableErrorKind = Literal["closed", "timeout", "shortfall", "interrupted", "failed"]

# A failure XLA carries: its status code, then the handler's own prefix
# (xla_ffi/ffi/ffi_common.h: FromException), whose tag says the kind.
_CARRIED = re.compile(
    r"\b(FAILED_PRECONDITION|INVALID_ARGUMENT): gearjax"
    r"(?: \[(closed|timeout|shortfall|interrupted)\])?: ")

# Raised by the Python layer for a table, writer or sharded table closed
# before the call: the native class, so one class means "closed" everywhere.
ClosedError = _gearjax.TableClosedError


def table_error(error: BaseException) -> TableErrorKind | None:
    """Names a table's failure, whichever class carried it.

    Args:
      error: any exception.

    Returns:
      ``"closed"`` for a call on a closed table (or writer, or sharded
      table), ``"timeout"`` for a call that could not go ahead in time (a rate
      limiter's timeout, an insert held back), ``"shortfall"`` for a sample
      of more than the table can serve that does not wait (an empty table;
      too few trajectories for ``cut="full"``, ``replace=False`` or
      ``max_times_sampled``; no rate limiter, or its timeout 0),
      ``"interrupted"`` for a compiled call that was
      waiting when a signal (Ctrl-C) arrived and gave way to it (eager calls
      raise the signal handler's ``KeyboardInterrupt`` instead), ``"failed"``
      for a call that failed as it ran for
      another reason its message gives (a NaN priority inside a program, a
      GPU error, a GPU priority update that failed after its program
      returned); ``None`` for any other error, including the ``ValueError``
      and ``TypeError`` that refuse bad arguments before anything runs.
    """
    if isinstance(error, _gearjax.TableClosedError):
        return "closed"
    if isinstance(error, _gearjax.TableShortfallError):
        return "shortfall"
    if isinstance(error, _gearjax.TableTimeoutError):
        return "timeout"
    if isinstance(error, _gearjax.TableFailedEarlierError):
        return "failed"
    if not isinstance(error, (RuntimeError, ValueError)):
        return None
    match = _CARRIED.search(str(error))
    if match is None:
        return None
    if match.group(1) == "INVALID_ARGUMENT":
        return "failed"
    return match.group(2) or "failed"  # type: ignore[return-value]


def raise_if_interrupted(error: BaseException) -> None:
    """For a table call that gave way to a signal (``"interrupted"``): runs
    Python's handlers of the signals that arrived now, and raises what one
    raises (``KeyboardInterrupt`` for Ctrl-C) from `error`. The call's program
    failed before Python, blocked in JAX's runtime, could run them. Returns
    where no handler raises (a handler that only takes note, or a thread
    other than the main one, where Python runs no handlers)."""
    if table_error(error) != "interrupted":
        return
    try:
        _gearjax.check_signals()
    except BaseException as raised:
        raise raised from error


def as_call_failure(error: BaseException) -> jax.errors.JaxRuntimeError:
    """A native failure (a timeout, a shortfall, a close) of an eager call that
    runs no program but keeps the compiled call's contract (eager
    ``insert_batch``): the ``jax.errors.JaxRuntimeError`` that call's program
    would raise, its message tagged as the handlers tag it."""
    kind = table_error(error)
    return jax.errors.JaxRuntimeError(f"FAILED_PRECONDITION: gearjax [{kind}]: {error}")


def reraise(error: ValueError) -> NoReturn:
    """Raises `error` as an eager ``Table`` call does: a table failure that
    JAX's fast dispatch path carried as a ``ValueError`` becomes the
    ``jax.errors.JaxRuntimeError`` its Python path raises, with the same
    message and traceback; a call that gave way to a signal raises what the
    signal's handler raises (raise_if_interrupted); anything else is raised
    as it is."""
    raise_if_interrupted(error)
    if table_error(error) is None or isinstance(error, _gearjax.TableFailedEarlierError):
        raise error
    raise jax.errors.JaxRuntimeError(str(error)).with_traceback(error.__traceback__) from None
