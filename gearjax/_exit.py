"""Interpreter exit: table calls blocked on a rate limiter are woken, so exit is prompt.

A sample or insert waiting in a table's rate limiter (in a thread, or in a program a
thread dispatched) would otherwise hold exit for the limiter's whole timeout, or be torn
down mid-wait while Python finalises (which aborted the process). At exit, each table with
blocked calls is closed: they wake and fail with the table's "is closed" error, and get a
moment to leave before finalisation. Tables without blocked calls are left as they are.
Then the exit gate closes (xla_ffi/python/python_gil.h): a thread still inside a table call (a
daemon thread inserting, say) parks when it leaves it, where Python would end it by
unwinding through the call's C++ frames and abort the process.
Registered when gearjax is imported, after jax, so it runs before JAX's own exit
handlers (atexit runs the last registered first) and after the user's handlers
registered later (a save at exit still finds its table open).
"""

from __future__ import annotations

import atexit
import os
import threading
import time
import weakref
from typing import Any

from gearjax import _gearjax

# How long exit waits for woken calls to leave their tables, at most.
WAKE_SECONDS = 2.0
# How long exit waits for threads taking the GIL as the gate closes, at most.
GATE_SECONDS = 1.0

_tables: weakref.WeakSet = weakref.WeakSet()
_lock = threading.Lock()


def track(table: Any) -> None:
    """Remembers `table` (a gearjax.Table) for exit, without keeping it alive."""
    with _lock:
        _tables.add(table)


def wake_blocked_calls() -> int:
    """Closes every tracked table that has calls waiting on its rate limiter;
    returns how many calls were waiting. Runs at exit (and in tests)."""
    with _lock:
        tables = list(_tables)
    waiting = 0
    for table in tables:
        native = table._native
        blocked = 0 if native.closed else native.waiting
        if blocked == 0:
            continue
        waiting += blocked
        native.close(WAKE_SECONDS)  # wakes the waiters; releases the GIL while it waits
    if waiting:
        # The woken calls are out of the tables; let their threads take the
        # GIL and raise before finalisation stops them.
        time.sleep(0.05)
    return waiting


def at_exit() -> None:
    """Wakes blocked calls, then closes the exit gate: from here on a thread
    that leaves a table call (or calls Python from native code) parks instead
    of taking the GIL, which Python would answer by ending the thread through
    the C++ frames of the call, aborting the process (xla_ffi/python/python_gil.h)."""
    wake_blocked_calls()
    _gearjax.close_exit_gate(GATE_SECONDS)
    if any(t.daemon and t.is_alive() for t in threading.enumerate()):
        # Their frames keep what they hold alive through finalisation, which
        # nanobind would report as leaks of gearjax's objects: expected here.
        _gearjax.set_leak_warnings(False)


atexit.register(at_exit)
# A forked child inherits what the parent's other threads hold, and never
# those threads: nanobind would report it all as leaks at the child's exit.
os.register_at_fork(after_in_child=lambda: _gearjax.set_leak_warnings(False))
