"""One-sided global sampling over a sharded table's shards, whatever moves
the bytes: the parts of the ``nixl`` and ``verbs`` exchanges
(gearjax/sharded/nixl.py, gearjax/sharded/verbs.py) that do not depend on
the transport. A transport subclasses :class:`OneSidedReader` and provides
``_read_remote`` (read spans of another shard's registered memory into local
registered buffers, with a deadline), ``_staging`` (such a buffer),
``_layout`` (register and publish this shard's memory for a strategy),
``_ask`` (send an owner a message) and ``_loaded_layout``. Everything else is
here, once: finding peers' layouts, serving peers' messages, reading one
trajectory (``get``) and the buffers samples land in.

Samples, of every strategy and over every transport, are drawn by the one
native sampler (xla_ffi/core/one_sided/one_sided.h documents the protocol; its Python
side is gearjax/sharded/one_sided_native.py): a NIXL transport hands it its
agent and no Python runs during a sample; any other transport (verbs) is
called back for each round trip (one_sided_native.py PythonTransport,
xla_ffi/python/one_sided_module.cc PythonReader).
What readers and owners agree on is gearjax/sharded/one_sided_protocol.py.

A shard whose reads fail or time out raises :class:`ShardUnavailable`, or,
with ``on_dead_shard="skip"``, is left out of this and later samples
(probabilities renormalised over the live ones).
"""

from __future__ import annotations

import contextlib
import json
import threading
from typing import Any

import numpy as np

from gearjax import _checks
from gearjax._sample_args import SampleArgs
from gearjax.errors import ClosedError
from gearjax.sharded import coordination, one_sided_protocol
from gearjax.sharded.one_sided_native import NativeSampling
from gearjax.sharded.one_sided_protocol import (  # noqa: F401 (re-exported)
    _LIVE, _RECORD, _SLOT_BYTES, ALIGNMENT, MAX_UPDATE_ENTRIES, OUTPUT_BUFFERS, TREE_REQUEST,
    ShardUnavailable, _check_layout, _fields, _slot_bits, _unreferenced, aligned_zeros,
    apply_updates, copy_local, strategy_key, update_message, update_messages)
from gearjax.strategies import Prioritized, PrioritizedSteps, Timestep


class OneSidedReader(NativeSampling):
    """Samples and reads every shard one-sidedly; subclasses move the bytes.

    Subclasses set ``_local`` (this process's shard, a gx.Table), ``_shard``,
    ``_shards``, ``_shard_shift``, ``_on_dead_shard`` and ``_dead`` (a set of
    shards left out), and implement the three methods below."""

    NAME = ""  # the transport's name in published keys
    UPDATE_MESSAGE_BYTES: int | None = None  # the largest update message, where bounded

    def __init__(self):
        # One read at a time (a prefetching thread and the caller share the
        # staging buffers).
        self._reading = threading.Lock()
        self._peer_layouts: dict[tuple[int, str], dict] = {}
        self._plans: dict[tuple, int] = {}  # compiled-sample plans by shape and strategy

    _local: Any
    _path: str
    _timeout: float
    _token: str
    refused_updates: int
    _shard: int
    _shards: int
    _shard_shift: int
    _on_dead_shard: str
    _dead: set

    def read_into(self, requests: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]]) -> None:
        """Reads, for each shard, spans (addresses, sizes) into local addresses
        (in registered buffers); raises ShardUnavailable naming a shard that
        failed or ran past the deadline. This process's own shard is copied
        here; the others go to the transport (_read_remote)."""
        remote = {}
        for shard, spans in requests.items():
            if len(spans[1]) == 0:
                continue
            if shard == self._shard:
                with self._local_held():
                    copy_local(*spans)
            else:
                remote[shard] = spans
        if remote:
            self._read_remote(remote)

    def _read_remote(self, requests: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]]) -> None:
        """read_into for other processes' shards (none empty)."""
        raise NotImplementedError

    def _staging(self, name: str, size: int) -> np.ndarray:
        """A registered local buffer of at least `size` bytes, one per use."""
        raise NotImplementedError

    @contextlib.contextmanager
    def _no_reads(self):
        """Holds off reads for a close: waits for one in progress (at most the
        exchange's timeout; then it closes anyway). Yields whether no read is
        in progress: where one still is, its staging buffers must outlive the
        close (they go with this transport, which the sample holds)."""
        acquired = self._reading.acquire(timeout=self._timeout)
        try:
            yield acquired
        finally:
            if acquired:
                self._reading.release()

    @contextlib.contextmanager
    def _local_held(self):
        """This process's shard held while a sample or a read copies from its
        memory by address (Table::Hold): closing it waits for them, and where
        one outlives that wait (a transport close that gave up on a sample)
        the shard's memory stays until it has left (see Table.close)."""
        native = self._local._native
        if not native.hold():
            raise ClosedError(f"{self._local!r} is closed")
        try:
            yield
        finally:
            native.release()

    def check_updates(self, width: int | None) -> None:
        """Raises ValueError where an update of ``width`` steps a row (None:
        one priority a key) cannot be sent: checked before any shard,
        this one included, applies a part of it."""
        one_sided_protocol.rows_per_message(self._token, width, self.UPDATE_MESSAGE_BYTES)

    def _ask(self, shard: int, message: bytes) -> None:
        """Sends a message (a tree request) to the shard's owner."""
        raise NotImplementedError

    def _loaded_layout(self, shard: int, layout: dict) -> None:
        """Whatever a transport must do with a peer's layout before reading
        by it (check it, load keys or metadata)."""
        raise NotImplementedError

    def _peer_layout(self, shard: int, code: int, alpha: float) -> dict:
        """Shard `shard`'s remote layout for a strategy (Table::Remote, as
        NativeTable.remote_layout returns it, plus max_length), as its owner
        published it under ``<table>/<transport>/<shard>/layout/<strategy>``;
        if it has not yet, the owner is asked to (a tree request) and the
        layout awaited."""
        key = strategy_key(code, alpha)
        if (shard, key) in self._peer_layouts:
            return self._peer_layouts[(shard, key)]
        if shard == self._shard:
            layout = self._layout(code, alpha)
        else:
            store = coordination.client()
            path = self._layout_path(shard, key)
            try:
                value = store.key_value_try_get(path)
            except Exception:  # noqa: BLE001 - not published yet: ask the owner for it
                self._ask(shard, TREE_REQUEST + self._token.encode() + json.dumps(
                    {"code": code, "alpha": alpha}).encode())
                try:
                    value = store.blocking_key_value_get(path, int(self._timeout * 1000))
                except Exception as e:  # noqa: BLE001
                    raise ShardUnavailable(shard, f"no answer to a tree request ({e})") from None
            layout = json.loads(value.decode() if isinstance(value, bytes) else value)
            if isinstance(layout, dict) and "refused" in layout:
                # Alive, and unable to serve it (_serve): not a dead shard.
                raise ValueError(f"shard {shard} cannot serve this sample's strategy: "
                                 f"{layout['refused']}")
            _check_layout(layout, shard, self._local.capacity, self._local.max_length)
            self._loaded_layout(shard, layout)
        self._peer_layouts[(shard, key)] = layout
        return layout

    def _layout_path(self, shard: int, key: str) -> str:
        """Where shard `shard`'s owner publishes its layout for a strategy
        (`key`: strategy_key), or why it cannot serve it."""
        return f"{self._path}/{self.NAME}/{shard}/layout/{key}"

    def _check_open(self) -> None:
        """Raises if the transport is closed."""
        raise NotImplementedError

    def _layout(self, code: int, alpha: float) -> dict:
        """This shard's layout for a strategy, registered and published once
        (the owner's side of _peer_layout)."""
        raise NotImplementedError

    def _serve(self, message: bytes) -> None:
        """The owner's handling of one message from a peer (a NIXL
        notification, a verbs SEND), checked before anything is applied: the
        job token, then a tree request (Timestep, Prioritized, or
        PrioritizedSteps on a table that keeps step priorities, with alpha in
        [0, 8], not subnormal: one the table refuses, a ninth alpha say, is answered by
        _publish_refusal) or an update message (apply_updates). Refused
        updates are counted in ``refused_updates``."""
        token = self._token.encode()
        if len(message) < 4 + len(token) or message[4:4 + len(token)] != token:
            self.refused_updates += 1
            return
        kind, body = message[:4], message[4 + len(token):]
        if kind == TREE_REQUEST:
            request = json.loads(body)
            code, alpha = int(request["code"]), float(request["alpha"])
            steps = code == PrioritizedSteps.code and self._local.step_priorities
            try:
                if not (code in (Timestep.code, Prioritized.code) or steps):
                    raise ValueError(f"no tree for strategy code {code} with alpha {alpha!r} "
                                     f"here")
                _checks.alpha("a tree request's alpha", alpha)  # as the strategies check it
                self._layout(code, alpha)
            except ValueError as e:  # a refusal, for good: the asker raises it at once
                self._publish_refusal(code, alpha, str(e))
            return
        self.refused_updates += apply_updates(self._local, self._shard, self._shard_shift,
                                              kind, body)

    def _publish_refusal(self, code: int, alpha: float, why: str) -> None:
        """Publishes, where the layout of a strategy this shard cannot serve
        would be, why: a reader waiting for it raises ValueError at once,
        rather than wait out its timeout and take a live shard for a dead one
        (a ninth alpha, say, or a table in GPU memory)."""
        coordination.client().key_value_set(
            self._layout_path(self._shard, strategy_key(code, alpha)),
            json.dumps({"refused": why}), allow_overwrite=True)

    def _outputs(self, batch: int, width: int) -> tuple[list[np.ndarray], list[bool]]:
        """Registered [batch, width, ...] arrays, one per column, that a sample
        reads its windows into, and whether each is a pool buffer of its own
        (handed out as it is) or the shared one (copied out after)."""
        outputs, pooled = [], []
        for c, column in enumerate(self._local.columns.values()):
            nbytes = batch * width * column.step_bytes
            buffer = self._free_output(c, nbytes)
            pooled.append(buffer is not None)
            if buffer is None:
                buffer = self._staging(f"column-{c}", nbytes)
            outputs.append(buffer[:nbytes].view(column.dtype).reshape((batch, width) +
                                                                        column.shape))
            del buffer  # only the view refers to it now
        return outputs, pooled

    @staticmethod
    def _handed_out(outputs: list[np.ndarray], pooled: list[bool]) -> list[np.ndarray]:
        """A sample's columns as it returns them: pool buffers as they are,
        the shared buffer's rows copied (the next sample reuses it)."""
        return [a if mine else a.copy() for a, mine in zip(outputs, pooled)]

    def _free_output(self, column: int, size: int) -> np.ndarray | None:
        """A registered output buffer of at least `size` bytes for `column`
        that nothing outside the reader refers to, or None if all
        OUTPUT_BUFFERS are in use."""
        for i in range(OUTPUT_BUFFERS):
            name = f"output-{column}-{i}"
            held = self._buffers.get(name)
            if held is None or _unreferenced(held):
                del held
                return self._staging(name, size)
        return None

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

    def get(self, shard: int, key: int) -> dict[str, np.ndarray] | None:
        """The trajectory with (the shard's own) key `key` of another shard,
        read one-sidedly, or None if that shard does not hold it now."""
        with self._reading:
            self._check_open()
            return self._get(shard, key)

    def _get(self, shard: int, key: int) -> dict[str, np.ndarray] | None:
        layout = self._peer_layout(shard, 0, 0.0)
        capacity = layout["slots_bytes"] // _SLOT_BYTES
        slot = key & ((1 << _slot_bits(capacity)) - 1)
        if slot >= capacity:
            return None
        before = self._record(shard, layout, slot)
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
        after = self._record(shard, layout, slot)
        if after[0][0] != key or after[2][0] != _LIVE:
            return None  # rewritten during the read: that trajectory is gone
        out, offset = {}, 0
        for name, column in columns:
            size = length * column.step_bytes
            out[name] = buffer[offset:offset + size].view(column.dtype).reshape(
                (length,) + column.shape).copy()
            offset += size
        return out

    def _record(self, shard: int, layout: dict, slot: int):
        """(keys, lengths, states), one entry each, of a slot's record, read now."""
        data = self.fetch({shard: (np.array([layout["slots"] + _SLOT_BYTES * slot], np.uint64),
                                   np.array([_SLOT_BYTES], np.int64))}, "records")
        buffer, offsets = data[shard]
        return _fields(buffer[offsets[0]:offsets[0] + _SLOT_BYTES].view(_RECORD))

    # ------------------------------------------------------------ sampling
    def sample(self, seed: tuple[int, int], args: SampleArgs) -> dict[str, np.ndarray]:
        """One-sided global sample (batch size, window, strategy, pad: `args`)
        over the shards not lost yet, drawn from `seed` (two uint32 words), as
        a compiled sample with the same seed is. With on_dead_shard="skip" a
        shard that fails is left out of this and later samples."""
        with self._reading, self._local_held():
            self._check_open()
            shards = [k for k in range(self._shards) if k not in self._dead]
            while True:
                try:
                    return self._sample_native(seed, args, shards)
                except ShardUnavailable as e:
                    if self._on_dead_shard != "skip" or e.shard not in shards or \
                            len(shards) == 1:
                        raise
                    self._dead.add(e.shard)
                    shards = [k for k in shards if k != e.shard]

