"""One-sided global sampling over a sharded table's shards, whatever moves
the bytes: the parts of the ``nixl`` and ``verbs`` exchanges
(gearjax/sharded/nixl.py, gearjax/sharded/verbs.py) that do not depend on
the transport. A transport subclasses :class:`OneSidedReader` and provides
``_read_remote`` (read spans of another shard's registered memory into local
registered buffers, with a deadline), ``_staging`` (such a buffer),
``_layout`` (register and publish this shard's memory for a strategy),
``_ask`` (send an owner a message) and ``_loaded_layout``. Everything else is
here, once: finding peers' layouts, serving peers' messages, and sampling
(what readers and owners agree on is gearjax/sharded/one_sided_protocol.py;
the ``nixl`` exchange samples the tree strategies natively,
gearjax/sharded/one_sided_native.py, by the same protocol):

1. one snapshot per shard, in one transfer: the levels of its sum tree that
   are small enough to read whole (``WHOLE_READ_BYTES`` in all, from the
   root down: the root is the shard's total), its size, and, where small
   enough, its whole slot-record array. The shard of each row is drawn with
   probability S_k / S;
2. the slot, by the owner's sum tree from the root down to a leaf: through
   the levels held whole locally, then one transfer a level (all rows of the
   level, every shard at once) for the levels too large to read whole. The
   slot is drawn in proportion to its weight, exactly as the owner's own
   sampler would. TopK and Recent have no tree: every shard's slot records and
   insertion stamps are read whole and ranked here (xla_ffi/core/sharding.h);
3. the slot's record (from the snapshot, or read now when the records are too
   large to read whole), the window, and the record again. A record holds
   the key and state of the slot; keys are never reused, so if the key or the
   state changed between the two reads the owner rewrote the slot meanwhile
   (a seqlock whose version is the key) and the row is drawn again: a window
   is never torn. A row whose tree path ended on a slot that is no longer
   live is drawn again too.

Where a shard's tree and records fit the budget, a sample is three round
trips (snapshot, windows, records) and its descriptors are the windows plus
a handful: the transport's per-descriptor cost, not the table's bookkeeping,
sets the rate.

A shard whose reads fail or time out raises :class:`ShardUnavailable`, or,
with ``on_dead_shard="skip"``, is left out of this and later samples
(probabilities renormalised over the live ones).
"""

from __future__ import annotations

import contextlib
import json
import threading
from typing import Any, NamedTuple

import numpy as np

from gearjax import _gearjax
from gearjax.sharded import coordination
from gearjax.sharded import keys as keys_of
from gearjax.sharded.one_sided_native import NativeSampling
from gearjax.sharded.one_sided_protocol import (  # noqa: F401 (re-exported)
    _FANOUT, _LIVE, _RANKED, _RECORD, _SLOT_BYTES, _TOPK, ALIGNMENT, MAX_UPDATE_ENTRIES,
    OUTPUT_BUFFERS, TREE_REQUEST, ShardUnavailable, _check_layout, _fields, _level_nodes, _root,
    _slot_bits, _unreferenced, aligned_zeros, apply_updates, copy_local, strategy_key,
    update_message)

# Rounds of redrawing rows whose slot changed (or was left) during the read.
MAX_ROUNDS = 32
# Bytes of a shard's sum tree (whole levels, from the root down) and, apart,
# of its slot records that a sample reads whole in one descriptor each rather
# than one descriptor a row: at about 3 us a descriptor over loopback UCX
# (scripts/bench_nixl_reader.py) and 10 GB/s, 1 MiB costs what 30 rows do.
WHOLE_READ_BYTES = 1 << 20


class OneSidedReader(NativeSampling):
    """Samples and reads every shard one-sidedly; subclasses move the bytes.

    Subclasses set ``_local`` (this process's shard, a gx.Table), ``_shard``,
    ``_shards``, ``_shard_shift``, ``_on_dead_shard`` and ``_dead`` (a set of
    shards left out), and implement the three methods below."""

    NAME = ""  # the transport's name in published keys

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
        exchange's timeout; then it closes anyway)."""
        acquired = self._reading.acquire(timeout=self._timeout)
        try:
            yield
        finally:
            if acquired:
                self._reading.release()

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
            path = f"{self._path}/{self.NAME}/{shard}/layout/{key}"
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
            _check_layout(layout, shard, self._local.capacity, self._local.max_length)
            self._loaded_layout(shard, layout)
        self._peer_layouts[(shard, key)] = layout
        return layout

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
        job token, then a tree request (Timestep or Prioritized with alpha in
        [0, 8]) or an update message (apply_updates). Refusals are counted in
        ``refused_updates``."""
        token = self._token.encode()
        if len(message) < 4 + len(token) or message[4:4 + len(token)] != token:
            self.refused_updates += 1
            return
        kind, body = message[:4], message[4 + len(token):]
        if kind == TREE_REQUEST:
            request = json.loads(body)
            code, alpha = int(request["code"]), float(request["alpha"])
            if code in (1, 2) and 0.0 <= alpha <= 8.0:
                self._layout(code, alpha)
            return
        self.refused_updates += apply_updates(self._local, self._shard, self._shard_shift,
                                              kind, body)

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
               alpha: float, pad_left: bool, count: int = 0,
               seed: tuple[int, int] | None = None) -> dict[str, np.ndarray]:
        """One-sided global sample of `batch` rows (see the module docstring).
        The native sampler draws from `seed` (two uint32 words) where given,
        as a compiled sample with the same seed does, else from `rng`."""
        with self._reading:
            return self._sample_live(rng, batch, window, code, alpha, pad_left, count, seed)

    def _sample_live(self, rng, batch, window, code, alpha, pad_left, count, seed=None):
        """Samples over the shards not lost yet, leaving out (with
        on_dead_shard="skip") those that fail."""
        self._check_open()
        shards = [k for k in range(self._shards) if k not in self._dead]
        while True:
            try:
                return self._sample(rng, batch, window, code, alpha, pad_left, shards, count,
                                    seed)
            except ShardUnavailable as e:
                if self._on_dead_shard != "skip" or e.shard not in shards or len(shards) == 1:
                    raise
                self._dead.add(e.shard)
                shards = [k for k in shards if k != e.shard]

    def _sample(self, rng, batch, window, code, alpha, pad_left, shards, count, seed=None):
        ranked = code in _RANKED
        if not ranked and self._native:
            return self._sample_native(rng, batch, window, code, alpha, pad_left, shards, seed)
        uniform = {k: self._peer_layout(k, 0, 0.0) for k in shards}
        if ranked:  # no tree: the best items of all shards, ranked here
            layouts = uniform
            best = self._rank(layouts, shards, code, count)
            total, table_size = float(len(best["slot"])), best["size"]
        else:
            layouts = {k: self._peer_layout(k, code, alpha) for k in shards}
            snapshots = self._snapshot(layouts, uniform, shards)
            totals = np.array([snapshots[k].total for k in shards])
            sizes = np.array([snapshots[k].size for k in shards])
            total, table_size = float(totals.sum()), int(round(sizes.sum()))
        if not total > 0:
            raise ValueError("cannot sample: no shard holds anything this strategy can draw "
                             "(every shard is empty, or every priority is 0)")
        columns = list(self._local.columns.values())
        max_length = self._local.max_length
        width = window or max_length
        # The windows land straight in registered output buffers, one per
        # column, handed out as they are (no assembly copy, and none after:
        # see OUTPUT_BUFFERS); padding is written once, at the end.
        outputs, pooled = self._outputs(batch, width)
        out = {"keys": np.zeros(batch, np.int64), "start": np.zeros(batch, np.int32),
               "probability": np.zeros(batch, np.float32),
               "table_size": np.full(batch, table_size, np.int64),
               "valid": np.zeros(batch, np.int32), "shard": np.zeros(batch, np.int32)}
        step_bytes = np.array([c.step_bytes for c in columns], np.int64)
        todo = np.arange(batch)
        for round_ in range(MAX_ROUNDS):
            if len(todo) == 0:
                steps = np.arange(width)[None, :]
                padding = steps < (width - out["valid"])[:, None] if pad_left else \
                    steps >= out["valid"][:, None]
                for c, column in enumerate(columns):
                    if padding.any():
                        outputs[c][padding] = column.pad
                out["columns"] = self._handed_out(outputs, pooled)
                return out
            expected = None
            if ranked:
                if round_ > 0:  # a redraw: slots changed, so rank again
                    best = self._rank(layouts, shards, code, count)
                    if not len(best["slot"]):
                        raise ValueError("cannot sample: every shard is empty")
                    total = float(len(best["slot"]))
                    out["table_size"][:] = best["size"]
                pick = rng.integers(0, len(best["slot"]), len(todo))
                mine = {k: best["shard"][pick] == k for k in shards}
                rows_of = {k: todo[mine[k]] for k in shards}
                leaves = {k: best["slot"][pick][mine[k]] for k in shards}
                expected = {k: best["key"][pick][mine[k]] for k in shards}
                weights = {k: np.ones(len(rows_of[k])) for k in shards}
            else:
                if round_ > 0:  # a redraw: slots changed since the snapshot, so take another
                    snapshots = self._snapshot(layouts, uniform, shards)
                    totals = np.array([snapshots[k].total for k in shards])
                    if not totals.sum() > 0:
                        raise ValueError("cannot sample: every shard is empty")
                    total = float(totals.sum())
                targets = rng.random(len(todo)) * total
                which = np.minimum(np.searchsorted(np.cumsum(totals), targets, side="right"),
                                   len(shards) - 1)
                rows_of = {k: todo[which == i] for i, k in enumerate(shards)}
                u = {k: rng.random(len(rows_of[k])) * totals[i] for i, k in enumerate(shards)}
                leaves, weights = self._descend(layouts, u, rows_of, snapshots)
            starts_u = {k: rng.random(len(rows_of[k])) for k in shards}
            if ranked:
                records = self._records(layouts, leaves)
            else:  # from the snapshot where it holds the records, else read now
                records = self._records(layouts, {k: leaves[k] for k in shards
                                                  if snapshots[k].records is None})
                records.update({k: _fields(snapshots[k].records[np.maximum(leaves[k], 0)])
                                for k in shards if snapshots[k].records is not None})
            failed, plan, spans = [], {}, {}
            for k in shards:
                key, length, state = records[k]
                good = (leaves[k] >= 0) & (weights[k] > 0) & (state == _LIVE) & \
                    (length >= 1) & (length <= max_length)
                if expected is not None:  # the ranked item still holds its slot
                    good &= key == expected[k]
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
            again = self._records(layouts, {k: plan[k][1] for k in shards}, whole=True)
            for k in shards:
                rows, slots, key, start, valid, weight = plan[k]
                unchanged = (again[k][0] == key) & (again[k][2] == _LIVE)
                # Rewritten during the read: drawn again (its window and
                # padding are written again).
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

    def _rank(self, layouts, shards, code, count) -> dict[str, Any]:
        """TopK(count) or Recent(count) over the shards (sharding.h): every
        shard's slot records and insertion stamps, read whole (one transfer
        per shard), ranked here by (priority,) stamp, shard; returns the
        shard, slot and key of each of the min(count, live) best, and the
        number of live items."""
        capacity = {k: layouts[k]["slots_bytes"] // _SLOT_BYTES for k in shards}
        data = self.fetch({k: (np.array([layouts[k]["slots"], layouts[k]["stamps"]], np.uint64),
                               np.array([_SLOT_BYTES * capacity[k], 8 * capacity[k]], np.int64))
                           for k in shards}, "ranking")
        parts = []
        for k in shards:
            buffer, (records_at, stamps_at) = data[k]
            n = capacity[k]
            records = buffer[records_at:records_at + _SLOT_BYTES * n].view(_RECORD)
            stamps = buffer[stamps_at:stamps_at + 8 * n].view(np.int64)
            live = np.flatnonzero(records["state"] == _LIVE)
            parts.append((np.full(len(live), k), live, records["key"][live].copy(),
                          records["priority"][live].copy(), stamps[live].copy()))
        shard, slot, key, priority, stamp = (np.concatenate(x) for x in zip(*parts))
        # np.lexsort sorts by its last key first; ascending, so the best last.
        order = np.lexsort((shard, stamp, priority) if code == _TOPK else (shard, stamp))
        best = order[::-1][:count]
        return {"shard": shard[best], "slot": slot[best], "key": key[best],
                "size": int(len(slot))}

    def _snapshot(self, layouts, uniform, shards) -> dict[int, "_Snapshot"]:
        """Each shard's tree levels that fit WHOLE_READ_BYTES (from the root
        down), its size (Uniform's root) and, if they fit too, its slot
        records: one transfer per shard, every shard at once."""
        requests, plans = {}, {}
        for k in shards:
            layout = layouts[k]
            addresses, sizes, whole = [], [], []
            budget = WHOLE_READ_BYTES
            for level in range(len(layout["tree_offsets"]) - 1, -1, -1):
                size = 8 * _level_nodes(layout, level)
                if level < len(layout["tree_offsets"]) - 1 and size > budget:
                    break  # the root's line is always read
                budget -= size
                whole.append(level)
                addresses.append(layout["tree"] + 8 * layout["tree_offsets"][level])
                sizes.append(size)
            addresses.append(_root(uniform[k]))
            sizes.append(8)
            with_records = layout["slots_bytes"] <= WHOLE_READ_BYTES
            if with_records:
                addresses.append(layout["slots"])
                sizes.append(layout["slots_bytes"])
            requests[k] = (np.array(addresses, np.uint64), np.array(sizes, np.int64))
            plans[k] = (whole, with_records)
        data = self.fetch(requests, "snapshot")
        out = {}
        for k in shards:
            buffer, offsets = data[k]
            whole, with_records = plans[k]
            sizes = requests[k][1]
            parts = [buffer[o:o + n] for o, n in zip(offsets.tolist(), sizes.tolist())]
            levels = {level: parts[i].view(np.float64).copy() for i, level in enumerate(whole)}
            out[k] = _Snapshot(levels=levels, total=float(levels[whole[0]][0]),
                               size=float(parts[len(whole)].view(np.float64)[0]),
                               records=parts[-1].view(_RECORD).copy() if with_records else None)
        return out

    def _descend(self, layouts, targets, rows_of, snapshots):
        """Each row's leaf (slot; -1 if the path found no weight) and its
        weight: through the levels each shard's snapshot holds, then one tree
        level per transfer (all shards at once)."""
        nodes = {k: np.zeros(len(rows_of[k]), np.int64) for k in rows_of}
        target = {k: targets[k].copy() for k in rows_of}
        weight = {k: np.zeros(len(rows_of[k])) for k in rows_of}
        dead = {k: np.zeros(len(rows_of[k]), bool) for k in rows_of}
        levels = {k: len(layouts[k]["tree_offsets"]) for k in rows_of}
        line_bytes = 8 * _FANOUT
        for depth in range(max(levels.values()) - 1):
            requests, lines = {}, {}
            for k in rows_of:
                level = levels[k] - 2 - depth
                if level < 0 or len(rows_of[k]) == 0:
                    continue
                held = snapshots[k].levels.get(level)
                if held is not None:
                    lines[k] = held.reshape(-1, _FANOUT)[nodes[k]]
                    continue
                base = layouts[k]["tree"] + 8 * layouts[k]["tree_offsets"][level]
                requests[k] = ((base + line_bytes * nodes[k]).astype(np.uint64),
                               np.full(len(nodes[k]), line_bytes, np.int64))
            if requests:
                for k, (buffer, offsets) in self.fetch(requests, "tree").items():
                    lines[k] = buffer[offsets[0]:offsets[0] + line_bytes * len(offsets)].view(
                        np.float64).reshape(-1, _FANOUT)
            for k, line in lines.items():
                child, target[k], ok = _choose_children(line, target[k])
                dead[k] |= ~ok
                weight[k] = line[np.arange(len(child)), child]
                nodes[k] = nodes[k] * _FANOUT + child
        return ({k: np.where(dead[k], -1, nodes[k]) for k in rows_of}, weight)

    def _records(self, layouts, slots, whole: bool = False):
        """(keys, lengths, states) of the slots' records, read now: one
        descriptor a slot, or, with `whole`, the shard's whole record array in
        one where it fits WHOLE_READ_BYTES."""
        out = {k: _fields(np.zeros(0, _RECORD)) for k in slots if len(slots[k]) == 0}
        slots = {k: v for k, v in slots.items() if len(v)}
        in_one = {k for k in slots if whole and layouts[k]["slots_bytes"] <= WHOLE_READ_BYTES}
        requests = {k: ((layouts[k]["slots"] + _SLOT_BYTES * np.maximum(slots[k], 0))
                        .astype(np.uint64), np.full(len(slots[k]), _SLOT_BYTES, np.int64))
                    for k in slots if k not in in_one}
        requests.update({k: (np.array([layouts[k]["slots"]], np.uint64),
                             np.array([layouts[k]["slots_bytes"]], np.int64)) for k in in_one})
        data = self.fetch(requests, "records")
        for k, (buffer, offsets) in data.items():
            if k in in_one:
                every = buffer[offsets[0]:offsets[0] + layouts[k]["slots_bytes"]].view(_RECORD)
                out[k] = _fields(every[np.maximum(slots[k], 0)])
                continue
            n = len(offsets)
            raw = buffer[offsets[0]:offsets[0] + _SLOT_BYTES * n] if n else buffer[:0]
            out[k] = _fields(raw.view(_RECORD) if n else np.zeros(0, _RECORD))
        return out


class _Snapshot(NamedTuple):
    """What one transfer read of a shard (OneSidedReader._snapshot): tree
    levels by index, the total (root) and size, records (None: too large)."""
    levels: dict[int, np.ndarray]
    total: float
    size: float
    records: np.ndarray | None


def _choose_children(line: np.ndarray, target: np.ndarray):
    """SumTreeChild (xla_ffi/core/sum_tree.h, bound natively) for many lines
    at once: the child whose interval holds each target, never a zero-weight
    one; returns (child, target within it, whether a positive child existed)."""
    child, remaining, ok = _gearjax.sum_tree_children(
        np.ascontiguousarray(line, np.float64), np.ascontiguousarray(target, np.float64))
    return (np.asarray(child, np.int64), np.asarray(remaining, np.float64),
            np.asarray(ok, bool))
