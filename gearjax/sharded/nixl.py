"""The ``nixl`` exchange: a process samples other processes' shards with
one-sided reads through NVIDIA NIXL (UCX inside: RDMA where a NIC is, shared
memory or TCP between local processes), with no call into the owners.

Each process registers its shard's memory with a NIXL agent once, read-only
for peers: the arena, the slot records, the insertion stamps, and the sum
tree of each strategy sampled so far. It publishes the agent's metadata and
those addresses through JAX's key-value store under the job token; peers load
them only if the token matches. What a sample reads, and how it never sees a
torn window, is the native one-sided sampler (xla_ffi/core/one_sided/one_sided.h,
shared with ``verbs``), which reads through this exchange's agent with no
Python in the loop.

Rows of this process's own shard are read from its memory the same way (no
transport). Priority updates for other shards travel as NIXL notifications to
the owner, whose progress thread checks the token and bounds and applies
them; nothing is written into another process's memory.

Every transfer has a deadline: a dead owner (NIXL reports the disconnect
within milliseconds) or a frozen one (over TCP its reads never finish) makes
the sample raise ``ShardUnavailable`` naming the shard, or, with
``on_dead_shard="skip"``, continue on the live shards with probabilities
renormalised and the loss in ``stats()["lost_shards"]``.

The agent is native (gearjax._gearjax.NixlAgent, xla_ffi/core/nixl/nixl_agent.h):
NIXL's C API loaded from the installed wheel, not NIXL's Python API, so a
read's transfers to every shard are posted and polled to completion in one
call with the GIL released. It runs without NIXL's progress thread (that
busy-loops and would take a whole core): this module's progress thread
polls every ``PROGRESS_SECONDS``, and owners must keep progressing, or their
peers' first reads never complete.
"""

from __future__ import annotations

import atexit
import base64
import importlib.util
import json
import threading
import time
import weakref
from pathlib import Path
from typing import Any, Callable

import numpy as np

from gearjax.errors import ClosedError
from gearjax.sharded import coordination
from gearjax.sharded.one_sided import (OneSidedReader, aligned_zeros, ShardUnavailable,
                                       strategy_key, update_messages)

__all__ = ["ShardUnavailable", "Transport", "capi_library", "nixl_api"]

PROGRESS_SECONDS = 0.0005


HOW_TO_INSTALL = ("exchange='nixl' needs NVIDIA NIXL: python -m gearjax.sharded.install_nixl "
                  "installs it (pip install --no-deps nixl-cu12==1.5.1 nixl==1.5.1: the wheel "
                  "declares torch but never imports it)")


def capi_library() -> str:
    """The path of NIXL's C API library in the installed ``nixl-cu12`` wheel,
    found without importing NIXL's Python API; ValueError saying how to get
    NIXL if it is not there."""
    spec = importlib.util.find_spec("nixl_cu12")
    if spec is None or not spec.submodule_search_locations:
        raise ValueError(HOW_TO_INSTALL)
    site = Path(next(iter(spec.submodule_search_locations))).parent
    library = site / ".nixl_cu12.mesonpy.libs" / "libnixl_capi.so"
    if not library.is_file():
        raise ValueError(f"{HOW_TO_INSTALL} ({library} is missing)")
    return str(library)


def nixl_api() -> Callable[[str], Any]:
    """A function that starts this process's native NIXL agent by name
    (gearjax._gearjax.NixlAgent: NIXL's C API, no progress thread, UCX), or
    ValueError saying how to get NIXL."""
    library = capi_library()
    from gearjax._gearjax import NixlAgent
    return lambda name: NixlAgent(library, name)


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
        new_agent = nixl_api()
        super().__init__()
        self._local = local  # the shard's gx.Table (not the ShardedTable: no cycle)
        self._shard, self._shards, self._shard_shift = shard, shards, shard_shift
        self._path, self._token, self._timeout = path, token, timeout
        self._on_dead_shard = on_dead_shard
        self._name = f"gearjax-{path.rsplit('/', 1)[-1]}-{self._shard}-{token[:8]}"
        self._agent = new_agent(self._name)  # thread-safe: serialises its NIXL calls
        self._lock = threading.Lock()  # the tables below
        self._layouts: dict[str, dict] = {}   # this shard's, by strategy
        self._peers: dict[int, str] = {}      # shard -> agent name
        self._peer_versions: dict[int, int] = {}  # shard -> metadata version loaded
        self._peer_lock = threading.Lock()  # one metadata load at a time
        self._version = 0  # of this agent's metadata: one more per registration
        self._dead: set[int] = set()
        self._buffers: dict[str, np.ndarray] = {}  # registered read buffers by use
        self._retired: list[np.ndarray] = []  # outgrown, still registered
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
                self._agent.register(address, size)
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
                "metadata": base64.b64encode(self._agent.metadata()).decode()}),
                allow_overwrite=True)
            store.key_value_set(self._layout_path(self._shard, key), json.dumps(layout),
                                allow_overwrite=True)
        return layout

    def _progress(self) -> None:
        """Keeps the agent progressing (peers' reads complete only then) and
        serves notifications: priority updates and tree requests."""
        while not self._stop.is_set():
            try:
                messages = self._agent.notifications()  # no GIL while NIXL progresses
            except Exception:  # noqa: BLE001 - progress goes on
                messages = []
            # Each on its own: NIXL hands a batch over once, and a bad message
            # (a ninth alpha's tree request, say) dropped the rest of its batch,
            # other peers' priority updates with it.
            for _, message in messages:
                try:
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
        self.close_plans()  # compiled samples stop before the agent goes
        with self._no_reads() as quiet, self._lock:
            if self._agent is None:
                return
            self._agent.close()  # deregisters everything
            if quiet:  # else a sample still copies out of them: freed with this transport
                self._buffers.clear()
                self._retired.clear()
            self._agent = None

    # ------------------------------------------------------------ the reader
    def _check_open(self) -> None:
        if self._agent is None:
            raise ClosedError("this sharded table is closed")

    def _peer(self, shard: int, version: int = 1) -> str:
        """The agent name of a shard's owner, with its metadata of at least
        `version` loaded (checked against the job token first).

        A newer version is loaded over the one loaded, never after forgetting
        it: NIXL adds the regions a known agent's newer metadata lists
        (tests/test_nixl_native.py checks it), while forgetting would fail
        the reads other threads and compiled plans post to that peer meanwhile
        (and free what their transfers in flight use)."""
        if self._peer_versions.get(shard, 0) >= version:
            return self._peers[shard]
        with self._peer_lock:
            if self._peer_versions.get(shard, 0) >= version:  # another thread loaded it
                return self._peers[shard]
            return self._load_peer(shard, version)

    def _load_peer(self, shard: int, version: int) -> str:
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
        try:
            name = self._agent.load_peer(base64.b64decode(info["metadata"]))
        except (RuntimeError, ValueError) as e:
            raise ShardUnavailable(shard, f"its NIXL metadata could not be loaded ({e})") from None
        self._peers[shard] = name
        self._peer_versions[shard] = max(info.get("version", 0), self._peer_versions.get(shard, 0))
        return name

    _compiles = True  # its reads need no Python

    def _native_transport(self):
        return self._agent

    def _peer_name(self, shard: int) -> str:
        return self._peer(shard)

    def _ask(self, shard: int, message: bytes) -> None:
        self._agent.notify(self._peer(shard), message)

    def _loaded_layout(self, shard: int, layout: dict) -> None:
        self._peer(shard, layout["agent_version"])  # metadata listing the layout's regions

    def _staging(self, name: str, size: int) -> np.ndarray:
        """A registered local buffer of at least `size` bytes, one per use
        (`name`), kept and grown as needed: reads land in it."""
        buffer = self._buffers.get(name)
        if buffer is None or buffer.nbytes < size:
            if buffer is not None:  # stays registered, so stays alive (until close)
                self._retired.append(buffer)
            buffer = aligned_zeros(max(size, 1 << 16,
                                        0 if buffer is None else 2 * buffer.nbytes))
            self._agent.register(buffer.ctypes.data, buffer.nbytes)
            self._buffers[name] = buffer
        return buffer

    def _read_remote(self, requests: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]]) -> None:
        """One native call (no GIL): transfers to different shards are posted at
        once and polled to the deadline. Raises ShardUnavailable naming the
        first shard that failed or ran past it."""
        shards = list(requests)
        native = [(self._peer(shard), np.ascontiguousarray(addresses, np.uint64),
                   np.ascontiguousarray(destinations, np.uint64),
                   np.ascontiguousarray(sizes, np.uint64))
                  for shard, (addresses, sizes, destinations) in requests.items()]
        failed, why = self._agent.read(native, self._timeout)
        if failed >= 0:
            raise ShardUnavailable(shards[failed], why)

    def send_updates(self, shard: int, keys: np.ndarray, priorities: np.ndarray,
                     steps: np.ndarray | None = None) -> None:
        name = self._peer(shard)
        for message, rows in update_messages(self._token, keys, priorities, steps):
            try:
                self._agent.notify(name, message)
            except Exception as e:  # noqa: BLE001
                raise ShardUnavailable(shard, f"{type(e).__name__}: {e}") from None
            self.sent_updates += rows
