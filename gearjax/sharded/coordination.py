"""What the processes of a sharded table agree on and publish through JAX's
key-value store: that each process joined the job once, the table's number,
its spec, the job token, and each shard's latest stats.

JAX offers its distributed key-value store only through the private
``jax._src.distributed.global_state.client`` (the coordination service that
``jax.distributed.initialize`` starts); this module is the one place that
touches it. A job of one process that never initialised jax.distributed gets
an in-process store with the same interface, so a ShardedTable of one shard
works anywhere (notebooks, tests).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import secrets
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

import jax
import numpy as np

PREFIX = "gearjax/sharded"
# How long construction, save and load wait for the other processes.
AGREE_TIMEOUT_SECONDS = 120.0
# What JAX's store says (a JaxRuntimeError) when a key set without
# allow_overwrite exists: "ALREADY_EXISTS: key <key> already exists. ...".
ALREADY_EXISTS = "ALREADY_EXISTS"


class RejoinError(RuntimeError):
    """A process restarted into a jax.distributed job that still runs made a
    sharded table: gearjax cannot give a restarted process its shard back.

    JAX lets a restarted process reconnect to a running job only where the
    job runs with ``JAX_ENABLE_RECOVERABILITY=true`` (otherwise its
    coordination service aborts every process when one reconnects). The
    restarted process's shard died with its predecessor, the other processes
    still hold what that one published (each table's spec, its transport's
    address), and a process numbers its sharded tables from its own start, so
    its tables would not be theirs. The remedy is to restart every process
    (a new job) and restore the last checkpoint with
    :meth:`gearjax.ShardedTable.load`.

    Attributes:
      process: the restarted process's index.
      previous: what its predecessor published when it joined: ``host``,
        ``pid`` and ``since`` (when it joined, in seconds since the epoch);
        empty where that cannot be read.
    """

    def __init__(self, process: int, previous: dict):
        self.process = process
        self.previous = previous
        was = ""
        if previous:
            since = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(previous.get("since", 0)))
            was = f" (as pid {previous.get('pid')} on {previous.get('host')}, since {since})"
        super().__init__(
            f"process {process} already took part in this jax.distributed job's sharded "
            f"tables{was}: this process is a restart of it into the running job (JAX lets a "
            f"restarted process reconnect where the job runs with "
            f"JAX_ENABLE_RECOVERABILITY=true). gearjax cannot rejoin a running job: the "
            f"shard died with the old process, and the others still hold what it published. "
            f"Restart every process of the job, then restore the last checkpoint with "
            f"gx.ShardedTable.load")


class _LocalStore:
    """The key-value store of a one-process job."""

    def __init__(self) -> None:
        self._values: dict[str, str] = {}
        self._lock = threading.Lock()

    def key_value_set(self, key: str, value: str, allow_overwrite: bool = False) -> None:
        with self._lock:
            if key in self._values and not allow_overwrite:  # as JAX's store says it
                raise RuntimeError(f"{ALREADY_EXISTS}: key {key} already exists.")
            self._values[key] = value

    def blocking_key_value_get(self, key: str, timeout_in_ms: int) -> str:
        with self._lock:
            if key not in self._values:
                raise TimeoutError(f"{key} was not set within {timeout_in_ms} ms")
            return self._values[key]

    def key_value_try_get(self, key: str) -> str:
        with self._lock:
            if key not in self._values:
                raise KeyError(key)
            return self._values[key]

    def key_value_delete(self, key: str) -> None:
        with self._lock:
            for k in [k for k in self._values if k == key or k.startswith(key + "/")]:
                del self._values[k]

    def wait_at_barrier(self, barrier_id: str, timeout_in_ms: int) -> None:
        del barrier_id, timeout_in_ms


_local_store = _LocalStore()
_table_numbers = itertools.count()
# The store this process announced itself in (join), and the lock that makes
# two threads' first tables announce it once.
_joined_store: Any = None
_join_lock = threading.Lock()


def client() -> Any:
    """JAX's distributed key-value client, or the in-process store for a job
    of one process. Raises when several processes run without it."""
    from jax._src import distributed  # the only public route to the store

    store = distributed.global_state.client
    if store is not None:
        return store
    if jax.process_count() > 1:
        raise RuntimeError("a ShardedTable across processes needs jax.distributed.initialize() "
                           "in every process first")
    return _local_store


def next_table_path() -> str:
    """The key prefix of the next ShardedTable this process makes. Every
    process makes its sharded tables in the same order, so the n-th table of
    each is the same table."""
    return f"{PREFIX}/{next(_table_numbers)}"


def join(process: int) -> None:
    """Announces, once per job, that this process takes part in sharded
    tables (``gearjax/sharded/processes/<process>``: its host, its pid and
    the time); every process calls it before its first table's spec.

    The key is never withdrawn, so it is there for a restarted process: a
    process's index is its shard, and a process restarted into the running
    job (JAX_ENABLE_RECOVERABILITY) finds its predecessor's announcement.

    Raises:
      RejoinError: an earlier process of this index announced itself in this
        job.
    """
    global _joined_store
    with _join_lock:
        store = client()
        if store is _joined_store:
            return
        me = {"host": socket.gethostname(), "pid": os.getpid(), "since": time.time()}
        try:
            store.key_value_set(f"{PREFIX}/processes/{process}", json.dumps(me))
        except Exception as e:  # noqa: BLE001 - JaxRuntimeError, or the local store's
            if not str(e).startswith(ALREADY_EXISTS):
                raise
            raise RejoinError(process, _announcement(store, process)) from None
        _joined_store = store


def _announcement(store: Any, process: int) -> dict:
    """What process `process` published when it joined; {} where it cannot
    be read (the message then says less, and still says what to do)."""
    try:
        value = store.key_value_try_get(f"{PREFIX}/processes/{process}")
        found = json.loads(value.decode() if isinstance(value, bytes) else value)
    except Exception:  # noqa: BLE001 - gone meanwhile, or not ours
        return {}
    return found if isinstance(found, dict) else {}


def agree(path: str, what: str, mine: dict, process: int, processes: int,
          differences: Callable[[dict, dict, int, int], list[str]]) -> None:
    """Publishes this process's `what` (a JSON-able dict) and checks it
    against every other process's: raises ValueError naming the first process
    whose `what` differs and, by `differences(theirs, mine, other, process)`,
    how (a phrase per difference); TimeoutError if one never publishes.

    Published with sorted keys: dicts compare as dicts (their order never
    counts), so whatever order must count is a list (the columns of a spec,
    gearjax.sharded.agreement).
    """
    store = client()
    store.key_value_set(f"{path}/{what}/{process}", json.dumps(mine, sort_keys=True))
    for other in range(processes):
        if other == process:
            continue
        theirs = json.loads(_blocking_get(store, f"{path}/{what}/{other}"))
        found = differences(theirs, mine, other, process)
        if found:
            raise ValueError(f"process {other} made this sharded table with another {what} "
                             f"than process {process}: " + "; ".join(found) +
                             ". Every process must pass the same arguments; the table was "
                             "not made")


def check_same_call(path: str, call: int, mine: dict, process: int, processes: int,
                    gather: Any) -> None:
    """Before a collective runs, checks that every process makes the same call
    (`mine`: its arguments as JSON values): a fixed-size all-gather of a digest
    of them, which cannot itself mismatch. Where the digests differ, every
    process publishes its arguments under the call's number and raises
    ValueError naming the first process whose arguments differ and how (a
    collective of mismatched shapes would abort every process instead).
    `gather(uint32[4]) -> uint32[processes, 4]` is the all-gather
    (gearjax.sharded.exchange.gather_words)."""
    if processes == 1:
        return
    text = json.dumps(mine, sort_keys=True)
    digest = np.frombuffer(hashlib.sha256(text.encode()).digest()[:16], np.uint32)
    gathered = np.asarray(gather(digest)).reshape(processes, 4)
    if (gathered == digest).all():
        return
    store = client()
    store.key_value_set(f"{path}/call-{call}/{process}", text)
    for other in range(processes):
        if other == process or (gathered[other] == digest).all():
            continue
        theirs = json.loads(_blocking_get(store, f"{path}/call-{call}/{other}"))
        differ = {k: (theirs.get(k), mine.get(k)) for k in sorted(set(theirs) | set(mine))
                  if theirs.get(k) != mine.get(k)}
        raise ValueError(f"the processes disagree on this sharded table call (call {call} of "
                         f"this process): process {other} passed "
                         + ", ".join(f"{k}={a!r}" for k, (a, _) in differ.items())
                         + f" where process {process} passed "
                         + ", ".join(f"{k}={b!r}" for k, (_, b) in differ.items())
                         + "; every process must make the same calls, with the same batch "
                           "size, window, strategy and pad, in the same order. Nothing was "
                           "sampled")


def job_token(path: str, process: int) -> str:
    """A random token made by process 0 and read by every process: peers show
    it before their transport metadata is loaded (gearjax.sharded.exchange)."""
    store = client()
    if process == 0:
        store.key_value_set(f"{path}/token", secrets.token_hex(16))
    return _blocking_get(store, f"{path}/token")


def barrier(path: str, name: str, processes: int) -> None:
    """Returns once every process reached the barrier `name` of this table."""
    if processes > 1:
        client().wait_at_barrier(f"{path}/{name}", int(AGREE_TIMEOUT_SECONDS * 1000))


def publish_stats(path: str, process: int, stats: dict) -> None:
    """This shard's latest stats, stamped with the time they were read."""
    client().key_value_set(f"{path}/stats/{process}",
                           json.dumps({**stats, "published_at": time.time()}),
                           allow_overwrite=True)


def latest_stats(path: str, processes: int) -> list[dict | None]:
    """Every shard's latest published stats (None for a shard that published
    none yet), without waiting for any process."""
    store = client()
    out: list[dict | None] = []
    for process in range(processes):
        try:
            out.append(json.loads(store.key_value_try_get(f"{path}/stats/{process}")))
        except Exception:  # noqa: BLE001 - NOT_FOUND from JAX's store, KeyError here
            out.append(None)
    return out


def forget(path: str, process: int) -> None:
    """Removes the stats this process published for the table. Its spec stays
    (a few hundred bytes for the job's life, under a path no later table
    takes): a peer still agreeing on the table reads it, and one that a quick
    close got ahead of waited for it until the agreement's timeout while this
    process waited for it in a collective."""
    try:
        client().key_value_delete(f"{path}/stats/{process}")
    except Exception:  # noqa: BLE001 - already gone, or the service is shutting down
        pass


def _blocking_get(store: Any, key: str) -> str:
    value = store.blocking_key_value_get(key, int(AGREE_TIMEOUT_SECONDS * 1000))
    return value.decode() if isinstance(value, bytes) else value
