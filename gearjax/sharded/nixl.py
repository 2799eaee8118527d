"""The ``nixl`` exchange: a process samples other processes' shards with
one-sided reads through NVIDIA NIXL (UCX inside: RDMA where a NIC is, shared
memory or TCP between local processes), with no call into the owners.

Each process registers its shard's memory with a NIXL agent once, read-only
for peers: the arena, the slot records, and the sum tree of each strategy
sampled so far. It publishes the agent's metadata and those addresses through
JAX's key-value store under the job token; peers load them only if the token
matches. A sample then reads, for each row:

1. every shard's total (its tree's root) and size, fresh at each sample; the
   shard of the row is drawn with probability S_k / S;
2. the owner's sum tree, one level at a time (all rows of a level in one
   transfer per shard), down to a leaf: the slot, drawn in proportion to its
   weight, exactly as the owner's own sampler would;
3. the slot's record, the window, and the record again. A record holds the
   key and state of the slot; keys are never reused, so if the key or the
   state changed between the two reads the owner rewrote the slot meanwhile
   (a seqlock whose version is the key) and the row is drawn again: a window
   is never torn. A row whose tree path ended on a slot that is no longer
   live is drawn again too.

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
import ctypes
import json
import threading
import time
import weakref
from typing import Any

import numpy as np

from gearjax.sharded import coordination
from gearjax.sharded import keys as keys_of

PROGRESS_SECONDS = 0.0005
# Rounds of redrawing rows whose slot changed (or was left) during the read.
MAX_ROUNDS = 32
_FANOUT = 8
_SLOT_BYTES = 32
_LIVE = 2
_UPDATE = b"GXUP"
_TREE = b"GXTR"
# At most this many entries in one priority-update notification.
MAX_UPDATE_ENTRIES = 1 << 20


class ShardUnavailable(RuntimeError):
    """A shard's owner did not answer a one-sided read in time (dead, frozen
    or unreachable)."""

    def __init__(self, shard: int, why: str):
        super().__init__(f"shard {shard} is unavailable: {why}")
        self.shard = shard


def nixl_api():
    """(nixl_agent, nixl_agent_config), or ValueError saying how to get them."""
    try:
        from nixl_cu12._api import nixl_agent, nixl_agent_config
    except ImportError:
        try:
            from nixl._api import nixl_agent, nixl_agent_config  # the meta package
        except ImportError:
            raise ValueError("exchange='nixl' needs NVIDIA NIXL: pip install --no-deps "
                             "nixl-cu12 nixl (the wheel declares torch but never imports "
                             "it)") from None
    return nixl_agent, nixl_agent_config


# Transports still open: closed at exit, so the NIXL agent never outlives its
# progress thread's interpreter (that aborts the process).
_open: weakref.WeakSet = weakref.WeakSet()


@atexit.register
def _close_all() -> None:
    for transport in list(_open):
        transport.close()


def _strategy_key(code: int, alpha: float) -> str:
    return f"{code}/{alpha!r}"


class Transport:
    """One process's side of the nixl exchange for one ShardedTable: the owner
    of its shard (registration, progress, applying updates) and the reader of
    every shard."""

    def __init__(self, local, shard: int, shards: int, shard_shift: int, path: str, token: str,
                 timeout: float, on_dead_shard: str):
        nixl_agent, nixl_agent_config = nixl_api()
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
        self._peer_layouts: dict[tuple[int, str], dict] = {}
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
        key = _strategy_key(code, alpha)
        with self._lock:
            if key in self._layouts:
                return self._layouts[key]
            layout = self._local._native.remote_layout(code, alpha)
            regions = [("tree", layout["tree"], layout["tree_bytes"])]
            if not self._layouts:
                regions += [("arena", layout["arena"], layout["arena_bytes"]),
                            ("slots", layout["slots"], layout["slots_bytes"])]
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
            store.key_value_set(f"{self._path}/nixl/{self._shard}/layout/{key}",
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

    def _serve(self, message: bytes) -> None:
        """One notification from a peer, checked before anything is applied."""
        token = self._token.encode()
        if len(message) < 4 + len(token) or message[4:4 + len(token)] != token:
            self.refused_updates += 1
            return
        kind, body = message[:4], message[4 + len(token):]
        if kind == _TREE:
            request = json.loads(body)
            code, alpha = int(request["code"]), float(request["alpha"])
            if code in (1, 2) and 0.0 <= alpha <= 8.0:
                self._layout(code, alpha)
            return
        if kind != _UPDATE or len(body) % 16 != 0 or len(body) // 16 > MAX_UPDATE_ENTRIES:
            self.refused_updates += 1
            return
        n = len(body) // 16
        keys = np.frombuffer(body, np.int64, n)
        priorities = np.frombuffer(body, np.float64, n, offset=8 * n)
        mine = keys_of.owners(keys, self._shard_shift) == self._shard
        try:
            self._local.update_priorities(keys_of.local_keys(keys[mine], self._shard_shift),
                                          priorities[mine])
        except (TypeError, ValueError, RuntimeError):
            self.refused_updates += int(mine.sum())
        self.refused_updates += int((~mine).sum())

    def close(self) -> None:
        """Stops serving peers: the progress thread ends, the memory is
        deregistered (peers' later reads fail, naming this shard), and the
        agent goes. Idempotent."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=10)
        _open.discard(self)
        with self._lock:
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

    def _peer_layout(self, shard: int, code: int, alpha: float) -> dict:
        key = _strategy_key(code, alpha)
        if (shard, key) in self._peer_layouts:
            return self._peer_layouts[(shard, key)]
        if shard == self._shard:
            layout = self._layout(code, alpha)
        else:
            store = coordination.client()
            name = self._peer(shard)
            path = f"{self._path}/nixl/{shard}/layout/{key}"
            try:
                value = store.key_value_try_get(path)
            except Exception:  # noqa: BLE001 - not published yet: ask the owner for it
                with self._lock:
                    self._agent.send_notif(name, _TREE + self._token.encode() + json.dumps(
                        {"code": code, "alpha": alpha}).encode())
                try:
                    value = store.blocking_key_value_get(path, int(self._timeout * 1000))
                except Exception as e:  # noqa: BLE001
                    raise ShardUnavailable(shard, f"no answer to a tree request ({e})") from None
            layout = json.loads(value.decode() if isinstance(value, bytes) else value)
            self._peer(shard, layout["agent_version"])
        self._peer_layouts[(shard, key)] = layout
        return layout

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

    def fetch(self, requests: dict[int, tuple[np.ndarray, np.ndarray]],
              name: str = "fetch") -> dict[int, tuple[np.ndarray, np.ndarray]]:
        """Reads, for each shard, its spans (addresses, sizes) into one staging
        buffer; returns for each shard that buffer and each span's offset."""
        total = sum(int(sizes.sum()) for _, sizes in requests.values())
        buffer = self._staging(name, total)
        destinations, offset = {}, 0
        for shard, (addresses, sizes) in requests.items():
            ends = offset + np.cumsum(sizes, dtype=np.int64)
            destinations[shard] = ends - sizes
            offset = int(ends[-1]) if len(ends) else offset
        self.read_into({k: (a, s, buffer.ctypes.data + destinations[k])
                        for k, (a, s) in requests.items()})
        return {k: (buffer, destinations[k]) for k in requests}

    def read_into(self, requests: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]]) -> None:
        """Reads, for each shard, spans (addresses, sizes) into local addresses
        (in registered buffers). Transfers to different shards run at once.
        Raises ShardUnavailable naming the first shard that failed or ran past
        the deadline."""
        pending = []
        for shard, (addresses, sizes, destinations) in requests.items():
            if len(sizes) == 0:
                continue
            if shard == self._shard:  # this process's own memory: copied here
                for src, n, dst in zip(addresses.tolist(), sizes.tolist(),
                                       destinations.tolist()):
                    ctypes.memmove(dst, src, n)
                continue
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
            k = np.ascontiguousarray(keys[start:start + MAX_UPDATE_ENTRIES], np.int64)
            p = np.ascontiguousarray(priorities[start:start + MAX_UPDATE_ENTRIES], np.float64)
            try:
                with self._lock:
                    self._agent.send_notif(name, _UPDATE + self._token.encode() + k.tobytes() +
                                           p.tobytes())
            except Exception as e:  # noqa: BLE001
                raise ShardUnavailable(shard, f"{type(e).__name__}: {e}") from None
            self.sent_updates += len(k)

    def get(self, shard: int, key: int) -> dict[str, np.ndarray] | None:
        """The trajectory with (the shard's own) key `key` of another shard,
        read one-sidedly, or None if that shard does not hold it now."""
        layout = self._peer_layout(shard, 0, 0.0)
        capacity = layout["slots_bytes"] // _SLOT_BYTES
        slot = key & ((1 << _slot_bits(capacity)) - 1)
        if slot >= capacity:
            return None
        slots = {shard: np.array([slot], np.int64)}
        before = self._records({shard: layout}, slots)[shard]
        length = int(before[1][0])
        if before[0][0] != key or before[2][0] != _LIVE or not 1 <= length <= layout["max_length"]:
            return None
        columns = list(self._local.columns.items())
        step_bytes = np.array([c.step_bytes for _, c in columns], np.int64)
        buffer = self._staging("get", int(length * step_bytes.sum()))
        sizes = length * step_bytes
        destinations = buffer.ctypes.data + np.cumsum(sizes) - sizes
        sources = layout["arena"] + np.array(layout["column_offsets"], np.int64) + \
            slot * layout["max_length"] * step_bytes
        self.read_into({shard: (sources.astype(np.uint64), sizes, destinations.astype(np.uint64))})
        after = self._records({shard: layout}, slots)[shard]
        if after[0][0] != key or after[2][0] != _LIVE:
            return None  # rewritten during the read: that trajectory is gone
        out, offset = {}, 0
        for name, column in columns:
            size = length * column.step_bytes
            out[name] = buffer[offset:offset + size].view(column.dtype).reshape(
                (length,) + column.shape).copy()
            offset += size
        return out

    # ------------------------------------------------------------ sampling
    def sample(self, rng: np.random.Generator, batch: int, window: int | None, code: int,
               alpha: float, pad_left: bool) -> dict[str, np.ndarray]:
        """One-sided global sample of `batch` rows (see the module docstring)."""
        if self._agent is None:
            raise RuntimeError("this sharded table is closed")
        shards = [k for k in range(self._shards) if k not in self._dead]
        while True:
            try:
                return self._sample(rng, batch, window, code, alpha, pad_left, shards)
            except ShardUnavailable as e:
                if self._on_dead_shard != "skip" or e.shard not in shards or len(shards) == 1:
                    raise
                self._dead.add(e.shard)
                shards = [k for k in shards if k != e.shard]

    def _sample(self, rng, batch, window, code, alpha, pad_left, shards):
        layouts = {k: self._peer_layout(k, code, alpha) for k in shards}
        uniform = {k: self._peer_layout(k, 0, 0.0) for k in shards}
        roots = self.fetch({k: (np.array([_root(layouts[k]), _root(uniform[k])], np.uint64),
                                np.array([8, 8], np.int64)) for k in shards})
        totals = np.array([_doubles(*roots[k])[0] for k in shards])
        sizes = np.array([_doubles(*roots[k])[1] for k in shards])
        total, table_size = float(totals.sum()), int(round(sizes.sum()))
        if not total > 0:
            raise ValueError("cannot sample: no shard holds anything this strategy can draw "
                             "(every shard is empty, or every priority is 0)")
        columns = list(self._local.columns.values())
        max_length = self._local.max_length
        width = window or max_length
        # The windows land straight in registered output buffers, one per
        # column, already padded: no assembly copy.
        outputs = []
        for c, column in enumerate(columns):
            buffer = self._staging(f"column-{c}", batch * width * column.step_bytes)
            array = buffer[:batch * width * column.step_bytes].view(column.dtype).reshape(
                (batch, width) + column.shape)
            array[...] = column.pad
            outputs.append(array)
        out = {"keys": np.zeros(batch, np.int64), "start": np.zeros(batch, np.int32),
               "probability": np.zeros(batch, np.float32),
               "table_size": np.full(batch, table_size, np.int64),
               "valid": np.zeros(batch, np.int32), "shard": np.zeros(batch, np.int32)}
        step_bytes = np.array([c.step_bytes for c in columns], np.int64)
        todo = np.arange(batch)
        for _ in range(MAX_ROUNDS):
            if len(todo) == 0:
                out["columns"] = [a.copy() for a in outputs]
                return out
            targets = rng.random(len(todo)) * total
            which = np.minimum(np.searchsorted(np.cumsum(totals), targets, side="right"),
                               len(shards) - 1)
            rows_of = {k: todo[which == i] for i, k in enumerate(shards)}
            u = {k: rng.random(len(rows_of[k])) * totals[i] for i, k in enumerate(shards)}
            starts_u = {k: rng.random(len(rows_of[k])) for k in shards}
            leaves, weights = self._descend(layouts, u, rows_of)
            records = self._records(layouts, leaves)
            failed, plan, spans = [], {}, {}
            for k in shards:
                key, length, state = records[k]
                good = (leaves[k] >= 0) & (weights[k] > 0) & (state == _LIVE) & \
                    (length >= 1) & (length <= max_length)
                failed.append(rows_of[k][~good])
                rows, slots, key, length = rows_of[k][good], leaves[k][good], key[good], \
                    length[good]
                start = np.zeros(len(rows), np.int64) if window is None else \
                    (starts_u[k][good] * length).astype(np.int64)
                valid = np.minimum(width, length - start)
                plan[k] = (rows, slots, key, start, valid, weights[k][good])
                # One span per row and column: the valid steps, from the slot's
                # run in the column's region to the row's place in the output.
                layout = layouts[k]
                offsets = np.array(layout["column_offsets"], np.int64)
                source = layout["arena"] + offsets[None, :] + \
                    ((slots * layout["max_length"] + start)[:, None] * step_bytes[None, :])
                pad = (width - valid) if pad_left else np.zeros_like(valid)
                dest = np.stack([outputs[c].ctypes.data + (rows * width + pad) * step_bytes[c]
                                 for c in range(len(columns))], 1)
                size = valid[:, None] * step_bytes[None, :]
                spans[k] = (source.reshape(-1).astype(np.uint64), size.reshape(-1),
                            dest.reshape(-1).astype(np.uint64))
            self.read_into(spans)
            again = self._records(layouts, {k: plan[k][1] for k in shards})
            for k in shards:
                rows, slots, key, start, valid, weight = plan[k]
                unchanged = (again[k][0] == key) & (again[k][2] == _LIVE)
                # Rewritten during the read: padding again, and drawn again.
                for c, column in enumerate(columns):
                    outputs[c][rows[~unchanged]] = column.pad
                failed.append(rows[~unchanged])
                rows, key, start, valid, weight = (x[unchanged] for x in
                                                   (rows, key, start, valid, weight))
                out["keys"][rows] = keys_of.global_keys(k, key, self._shard_shift)
                out["start"][rows] = start
                out["valid"][rows] = valid
                out["probability"][rows] = weight / total
                out["shard"][rows] = k
            todo = np.sort(np.concatenate(failed))
        raise RuntimeError(f"{len(todo)} rows could not be read consistently in {MAX_ROUNDS} "
                           f"rounds: their shards are rewriting slots faster than they can be "
                           f"read")

    def _descend(self, layouts, targets, rows_of):
        """Each row's leaf (slot; -1 if the path found no weight) and its
        weight, one tree level per transfer (all shards at once)."""
        nodes = {k: np.zeros(len(rows_of[k]), np.int64) for k in rows_of}
        target = {k: targets[k].copy() for k in rows_of}
        weight = {k: np.zeros(len(rows_of[k])) for k in rows_of}
        dead = {k: np.zeros(len(rows_of[k]), bool) for k in rows_of}
        levels = {k: len(layouts[k]["tree_offsets"]) for k in rows_of}
        line_bytes = 8 * _FANOUT
        for depth in range(max(levels.values()) - 1):
            requests = {}
            for k in rows_of:
                level = levels[k] - 2 - depth
                if level < 0 or len(rows_of[k]) == 0:
                    continue
                base = layouts[k]["tree"] + 8 * layouts[k]["tree_offsets"][level]
                requests[k] = ((base + line_bytes * nodes[k]).astype(np.uint64),
                               np.full(len(nodes[k]), line_bytes, np.int64))
            lines = self.fetch(requests, "tree")
            for k, (buffer, offsets) in lines.items():
                line = buffer[offsets[0]:offsets[0] + line_bytes * len(offsets)].view(
                    np.float64).reshape(-1, _FANOUT)
                child, target[k], ok = _choose_children(line, target[k])
                dead[k] |= ~ok
                weight[k] = line[np.arange(len(child)), child]
                nodes[k] = nodes[k] * _FANOUT + child
        return ({k: np.where(dead[k], -1, nodes[k]) for k in rows_of}, weight)

    def _records(self, layouts, slots):
        """(keys, lengths, states) of the slots' records, read now."""
        requests = {k: ((layouts[k]["slots"] + _SLOT_BYTES * np.maximum(slots[k], 0))
                        .astype(np.uint64), np.full(len(slots[k]), _SLOT_BYTES, np.int64))
                    for k in slots}
        data = self.fetch(requests, "records")
        out = {}
        for k, (buffer, offsets) in data.items():
            n = len(offsets)
            raw = buffer[offsets[0]:offsets[0] + _SLOT_BYTES * n] if n else buffer[:0]
            records = raw.view(_RECORD) if n else np.zeros(0, _RECORD)
            out[k] = (records["key"].copy(), records["length"].copy(), records["state"].copy())
        return out


# A slot record as xla_ffi/core/slots.h lays it out (SlotInfo, 32 bytes).
_RECORD = np.dtype([("key", "<i8"), ("length", "<i8"), ("priority", "<f8"), ("pins", "<i4"),
                    ("state", "u1"), ("pad", "V3")])
assert _RECORD.itemsize == _SLOT_BYTES


def _slot_bits(capacity: int) -> int:
    """KeyLayout's slot bits (xla_ffi/core/slots.h): the fewest that hold
    every slot number."""
    return 0 if capacity <= 1 else (capacity - 1).bit_length()


def _root(layout: dict) -> int:
    """The address of a tree's root (its total)."""
    return layout["tree"] + 8 * layout["tree_offsets"][-1]


def _doubles(buffer: np.ndarray, offsets: np.ndarray) -> list[float]:
    return [float(buffer[o:o + 8].view(np.float64)[0]) for o in offsets]


def _choose_children(line: np.ndarray, target: np.ndarray):
    """SumTreeChild (xla_ffi/core/sum_tree.h) for many lines at once: the child
    whose interval holds each target, never a zero-weight one; returns
    (child, target within it, whether a positive child existed)."""
    prefix = np.cumsum(line, axis=1)
    count = (prefix <= target[:, None]).sum(axis=1)
    positive = line > 0
    last_positive = np.where(positive.any(axis=1),
                             _FANOUT - 1 - np.argmax(positive[:, ::-1], axis=1), -1)
    over = count >= _FANOUT
    child = np.where(over, last_positive, count)
    ok = child >= 0
    child = np.clip(child, 0, _FANOUT - 1)
    before = np.where(child > 0, prefix[np.arange(len(child)), np.maximum(child - 1, 0)], 0.0)
    # A zero-weight child is never chosen: the prefix counting skips it unless
    # rounding left the target past the end, handled above.
    ok &= line[np.arange(len(child)), child] > 0
    return child, target - before, ok
