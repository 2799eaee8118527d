"""The ``nixl`` exchange: a process samples other processes' shards with
one-sided reads through NVIDIA NIXL (UCX inside: RDMA where a NIC is, shared
memory or TCP between local processes), with no call into the owners.

Each process registers its shard's memory with a NIXL agent once, read-only
for peers: the arena, the slot records, the insertion stamps, and the sum
tree of each strategy sampled so far. It publishes the agent's metadata and
those addresses through JAX's key-value store under the job token; peers load
them only if the token matches. What a sample reads, and how it never sees a
torn window, is gearjax/sharded/one_sided.py (shared with ``verbs``).

Rows of this process's own shard are read from its memory the same way (no
transport). Priority updates for other shards travel as NIXL notifications to
the owner, whose progress thread checks the token and bounds and applies
them; nothing is written into another process's memory.

Every transfer has a deadline: a dead owner (NIXL reports the disconnect
within milliseconds) or a frozen one (over TCP its reads never finish) makes
the sample raise ``ShardUnavailable`` naming the shard, or, with
``on_dead_shard="skip"``, continue on the live shards with probabilities
renormalised and the loss in ``stats()["lost_shards"]``.

NIXL's own progress thread busy-loops (its delay is fixed at 0 in the Python
API) and would take a whole core, so the agent runs without it and this
module's progress thread polls every ``PROGRESS_SECONDS``: owners must keep
progressing, or their peers' first reads never complete.
"""

from __future__ import annotations

import atexit
import base64
import json
import threading
import time
import weakref
from typing import Any

import numpy as np

from gearjax.sharded import coordination
from gearjax.sharded.one_sided import (MAX_UPDATE_ENTRIES, OneSidedReader,
                                       ShardUnavailable, strategy_key, update_message)

__all__ = ["ShardUnavailable", "Transport", "nixl_api"]

PROGRESS_SECONDS = 0.0005


def nixl_api():
    """(nixl_agent, nixl_agent_config), or ValueError saying how to get them."""
    try:
        from nixl_cu12._api import nixl_agent, nixl_agent_config
    except ImportError:
        try:
            from nixl._api import nixl_agent, nixl_agent_config  # the meta package
        except ImportError:
            raise ValueError("exchange='nixl' needs NVIDIA NIXL: python -m "
                             "gearjax.sharded.install_nixl installs it (pip install "
                             "--no-deps nixl-cu12==1.5.1 nixl==1.5.1: the wheel declares "
                             "torch but never imports it)") from None
    return nixl_agent, nixl_agent_config


# Transports still open: closed at exit, so the NIXL agent never outlives its
# progress thread's interpreter (that aborts the process).
_open: weakref.WeakSet = weakref.WeakSet()


@atexit.register
def _close_all() -> None:
    for transport in list(_open):
        transport.close()


class Transport(OneSidedReader):
    """One process's side of the nixl exchange for one ShardedTable: the owner
    of its shard (registration, progress, applying updates) and the reader of
    every shard."""

    NAME = "nixl"

    def __init__(self, local, shard: int, shards: int, shard_shift: int, path: str, token: str,
                 timeout: float, on_dead_shard: str):
        nixl_agent, nixl_agent_config = nixl_api()
        super().__init__()
        self._local = local  # the shard's gx.Table (not the ShardedTable: no cycle)
        self._shard, self._shards, self._shard_shift = shard, shards, shard_shift
        self._path, self._token, self._timeout = path, token, timeout
        self._on_dead_shard = on_dead_shard
        self._name = f"gearjax-{path.rsplit('/', 1)[-1]}-{self._shard}-{token[:8]}"
        self._agent = nixl_agent(self._name, nixl_agent_config(enable_prog_thread=False,
                                                               backends=["UCX"]))
        self._lock = threading.Lock()  # the agent and the tables below
        self._registered: list[Any] = []
        self._layouts: dict[str, dict] = {}   # this shard's, by strategy
        self._peers: dict[int, str] = {}      # shard -> agent name
        self._peer_versions: dict[int, int] = {}  # shard -> metadata version loaded
        self._version = 0  # of this agent's metadata: one more per registration
        self._dead: set[int] = set()
        self._buffers: dict[str, np.ndarray] = {}  # registered read buffers by use
        self.refused_updates = 0
        self.sent_updates = 0
        self._layout(0, 0.0)  # Uniform: every shard publishes it from the start
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._progress, name=f"{self._name}-progress",
                                        daemon=True)
        self._thread.start()
        _open.add(self)

    # ------------------------------------------------------------ the owner
    def _layout(self, code: int, alpha: float) -> dict:
        """This shard's layout for a strategy, registered and published once."""
        key = strategy_key(code, alpha)
        with self._lock:
            if key in self._layouts:
                return self._layouts[key]
            layout = self._local._native.remote_layout(code, alpha)
            regions = [("tree", layout["tree"], layout["tree_bytes"])]
            if not self._layouts:
                regions += [("arena", layout["arena"], layout["arena_bytes"]),
                            ("slots", layout["slots"], layout["slots_bytes"]),
                            ("stamps", layout["stamps"], layout["stamps_bytes"])]
            for _, address, size in regions:
                self._registered.append(self._agent.register_memory(
                    [(address, size, 0, "")], "DRAM"))
            self._version += 1
            layout["max_length"] = self._local.max_length
            layout["step_bytes"] = [c.step_bytes for c in self._local.columns.values()]
            layout["agent_version"] = self._version
            self._layouts[key] = layout
            # Peers load the agent's metadata again when a layout needs a newer
            # one (NIXL's metadata lists the registered regions). Published
            # under the lock, so versions never go back.
            store = coordination.client()
            store.key_value_set(f"{self._path}/nixl/{self._shard}/agent", json.dumps({
                "token": self._token, "name": self._name, "version": self._version,
                "metadata": base64.b64encode(self._agent.get_agent_metadata()).decode()}),
                allow_overwrite=True)
            store.key_value_set(f"{self._path}/{self.NAME}/{self._shard}/layout/{key}",
                                json.dumps(layout), allow_overwrite=True)
        return layout

    def _progress(self) -> None:
        """Keeps the agent progressing (peers' reads complete only then) and
        serves notifications: priority updates and tree requests."""
        while not self._stop.is_set():
            try:
                with self._lock:
                    notifications = self._agent.get_new_notifs()
                for messages in notifications.values():
                    for message in messages:
                        self._serve(message)
            except Exception:  # noqa: BLE001 - a bad message must not stop progress
                self.refused_updates += 1
            time.sleep(PROGRESS_SECONDS)

    def close(self) -> None:
        """Stops serving peers: the progress thread ends, the memory is
        deregistered (peers' later reads fail, naming this shard), and the
        agent goes. Idempotent."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=10)
        _open.discard(self)
        with self._no_reads(), self._lock:
            if self._agent is None:
                return
            for descs in self._registered:
                try:
                    self._agent.deregister_memory(descs)
                except Exception:  # noqa: BLE001 - closing anyway
                    pass
            self._registered.clear()
            self._buffers.clear()
            self._agent = None

    # ------------------------------------------------------------ the reader
    def _check_open(self) -> None:
        if self._agent is None:
            raise RuntimeError("this sharded table is closed")

    def _peer(self, shard: int, version: int = 1) -> str:
        """The agent name of a shard's owner, with its metadata of at least
        `version` loaded (checked against the job token first)."""
        if self._peer_versions.get(shard, 0) >= version:
            return self._peers[shard]
        store = coordination.client()
        deadline = time.monotonic() + self._timeout
        while True:
            try:
                value = store.blocking_key_value_get(f"{self._path}/nixl/{shard}/agent",
                                                     int(self._timeout * 1000))
            except Exception as e:  # noqa: BLE001
                raise ShardUnavailable(shard, f"no transport metadata ({e})") from None
            info = json.loads(value.decode() if isinstance(value, bytes) else value)
            if info.get("version", 0) >= version or time.monotonic() > deadline:
                break
            time.sleep(0.001)
        if info.get("token") != self._token:
            raise ValueError(f"shard {shard} published transport metadata under another job "
                             f"token: refused")
        with self._lock:
            if shard in self._peers:
                self._agent.remove_remote_agent(self._peers[shard])
            name = self._agent.add_remote_agent(base64.b64decode(info["metadata"]))
        self._peers[shard] = name.decode() if isinstance(name, bytes) else name
        self._peer_versions[shard] = info.get("version", 0)
        return self._peers[shard]

    def _ask(self, shard: int, message: bytes) -> None:
        name = self._peer(shard)
        with self._lock:
            self._agent.send_notif(name, message)

    def _loaded_layout(self, shard: int, layout: dict) -> None:
        self._peer(shard, layout["agent_version"])  # metadata listing the layout's regions

    def _staging(self, name: str, size: int) -> np.ndarray:
        """A registered local buffer of at least `size` bytes, one per use
        (`name`), kept and grown as needed: reads land in it."""
        buffer = self._buffers.get(name)
        if buffer is None or buffer.nbytes < size:
            buffer = np.zeros(max(size, 1 << 16, 0 if buffer is None else 2 * buffer.nbytes),
                              np.uint8)
            with self._lock:
                self._registered.append(self._agent.register_memory(
                    [(buffer.ctypes.data, buffer.nbytes, 0, "")], "DRAM"))
            self._buffers[name] = buffer
        return buffer

    def _read_remote(self, requests: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]]) -> None:
        """Transfers to different shards run at once. Raises ShardUnavailable
        naming the first shard that failed or ran past the deadline."""
        pending = []
        for shard, (addresses, sizes, destinations) in requests.items():
            zeros = np.zeros(len(sizes), np.uint64)
            remote = np.stack([addresses.astype(np.uint64), sizes.astype(np.uint64), zeros], 1)
            local = np.stack([destinations.astype(np.uint64), sizes.astype(np.uint64), zeros], 1)
            name = self._peer(shard)
            try:
                with self._lock:
                    handle = self._agent.initialize_xfer(
                        "READ", self._agent.get_xfer_descs(local, "DRAM"),
                        self._agent.get_xfer_descs(remote, "DRAM"), name)
                    state = self._agent.transfer(handle)
            except Exception as e:  # noqa: BLE001 - NIXL reports a dead peer by raising
                raise ShardUnavailable(shard, f"{type(e).__name__}: {e}") from None
            pending.append((shard, handle, state))
        deadline = time.monotonic() + self._timeout
        try:
            while pending:
                still = []
                for shard, handle, state in pending:
                    try:
                        if state != "DONE":
                            with self._lock:
                                state = self._agent.check_xfer_state(handle)
                    except Exception as e:  # noqa: BLE001
                        raise ShardUnavailable(shard, f"{type(e).__name__}: {e}") from None
                    if state == "ERR":
                        raise ShardUnavailable(shard, "the transfer failed")
                    if state == "DONE":
                        with self._lock:
                            self._agent.release_xfer_handle(handle)
                    else:
                        still.append((shard, handle, state))
                pending = still
                if pending and time.monotonic() > deadline:
                    raise ShardUnavailable(pending[0][0], f"no answer within {self._timeout} s")
                if pending:
                    time.sleep(0.00005)
        finally:
            for _, handle, _ in pending:
                try:
                    with self._lock:
                        self._agent.release_xfer_handle(handle)
                except Exception:  # noqa: BLE001
                    pass

    def send_updates(self, shard: int, keys: np.ndarray, priorities: np.ndarray) -> None:
        name = self._peer(shard)
        for start in range(0, len(keys), MAX_UPDATE_ENTRIES):
            k = keys[start:start + MAX_UPDATE_ENTRIES]
            p = priorities[start:start + MAX_UPDATE_ENTRIES]
            try:
                with self._lock:
                    self._agent.send_notif(name, update_message(self._token, k, p))
            except Exception as e:  # noqa: BLE001
                raise ShardUnavailable(shard, f"{type(e).__name__}: {e}") from None
            self.sent_updates += len(k)
