"""The Python side of the native one-sided sampler (xla_ffi/core/one_sided/one_sided.h),
which draws every one-sided sample: eager samples in one native call with
the GIL released (through the transport's NIXL agent, or calling a Python
transport back for its reads: PythonTransport),
and plans for samples inside compiled programs (one XLA FFI call each,
gearjax/_ffi.py; NIXL or this process's shards only: an FFI call never runs
Python). A mixin of :class:`gearjax.sharded.one_sided.OneSidedReader`."""

from __future__ import annotations

from typing import Any

import numpy as np

from gearjax import _gearjax
from gearjax._sample_args import SampleArgs
from gearjax.sharded.one_sided_protocol import _SLOT_BYTES, ShardUnavailable, _root
from gearjax.strategies import Uniform


class NativeSampling:
    """Native samples for a one-sided reader (see the module docstring)."""

    # Set by a transport whose reads need no Python (NIXL): compiled samples
    # run the native sampler inside the program (plan), else an io_callback.
    _compiles = False
    # Tree levels and slot records up to this many bytes a shard are read
    # whole rather than per row (xla_ffi/core/one_sided/one_sided.h Request).
    whole_read_bytes = _gearjax.one_sided_whole_read_bytes

    def _native_transport(self) -> Any:
        """What moves the sampler's bytes: a gearjax._gearjax.NixlAgent, None
        (every shard in this process, copied), or a PythonTransport."""
        return PythonTransport(self)

    def _peer_name(self, shard: int) -> str:
        """The transport's name for another process's shard's owner (never
        empty: "" names this process's shard, copied without the transport)."""
        return f"shard-{shard}"

    def compiles(self) -> bool:
        """Whether a sample inside a program can be one FFI call of the native
        sampler (plan), whatever its strategy: a transport that needs no
        Python, and no more columns than a plan stages."""
        return self._compiles and len(self._local.columns) <= _gearjax.one_sided_plan_max_columns

    def plan(self, args: SampleArgs) -> int:
        """The handle of a native plan for compiled samples of this shape and
        strategy over the live shards (registered once, at trace time; a plan
        leaves out shards that fail on its own with on_dead_shard="skip")."""
        if not self._compiles:
            raise RuntimeError("this transport's samples cannot be compiled (see compiles)")
        with self._reading:
            self._check_open()
            plans = self._plans
            if args not in plans:
                shards = [k for k in range(self._shards) if k not in self._dead]
                strategy = args.strategy
                plans[args] = _gearjax.one_sided_plan(
                    self._native_transport(), self._native_layouts(shards, strategy),
                    shards, self._shard_shift, self._columns(), strategy.code, strategy.count,
                    args.batch_size, args.window_code, args.pad_left, self._timeout,
                    self._on_dead_shard == "skip")
            return plans[args]

    def close_plans(self) -> None:
        """Closes every compiled-sample plan (each waits for a sample in
        flight; later runs of programs using them fail, saying so), keeping
        the shards they lost in ``_dead``. Before the agent goes."""
        plans, self._plans = self._plans, {}
        for handle in plans.values():
            self._dead.update(_gearjax.one_sided_plan_close(handle))

    def lost_shards(self) -> set[int]:
        """Shards left out, by eager samples and by compiled ones."""
        lost = set(self._dead)
        for handle in list(self._plans.values()):
            lost.update(_gearjax.one_sided_plan_lost(handle))
        return lost

    def _columns(self) -> list[tuple[int, bytes]]:
        return [(c.step_bytes, c.pad_step()) for c in self._local.columns.values()]

    def _native_layouts(self, shards, strategy) -> list[tuple]:
        """The shards' layouts for a strategy as the native sampler takes them
        (a ranking strategy has no tree: Uniform's, and the stamps)."""
        uniform = {k: self._peer_layout(k, Uniform.code, 0.0) for k in shards}
        layouts = uniform if strategy.ranks else {
            k: self._peer_layout(k, strategy.code, strategy.alpha) for k in shards}
        return [("" if k == self._shard else self._peer_name(k), layouts[k]["arena"],
                 layouts[k]["column_offsets"], layouts[k]["slots"],
                 layouts[k]["slots_bytes"] // _SLOT_BYTES, layouts[k]["tree"],
                 layouts[k]["tree_offsets"], layouts[k]["tree_bytes"] // 8, _root(uniform[k]),
                 layouts[k]["max_length"], layouts[k]["stamps"]) for k in shards]

    def _sample_native(self, seed, args: SampleArgs, shards):
        """One sample over `shards` in one native call with the GIL released
        (xla_ffi/core/one_sided/one_sided.h), the rows straight into output buffers
        handed out as they are. Raises ShardUnavailable naming a shard."""
        batch, strategy = args.batch_size, args.strategy
        outputs, pooled = self._outputs(batch, args.width)
        out = {"keys": np.empty(batch, np.int64), "start": np.empty(batch, np.int32),
               "probability": np.empty(batch, np.float32),
               "table_size": np.empty(batch, np.int64), "valid": np.empty(batch, np.int32),
               "shard": np.empty(batch, np.int32)}
        failed, why, trips, descriptors = _gearjax.one_sided_sample(
            self._native_transport(), self._native_layouts(shards, strategy), list(shards),
            self._shard_shift, self._columns(), strategy.code, strategy.count, int(seed[0]),
            int(seed[1]), batch, args.window_code, args.pad_left, out["keys"], out["start"],
            out["probability"], out["table_size"], out["valid"], out["shard"],
            [a.reshape(-1).view(np.uint8) for a in outputs], self._timeout,
            self.whole_read_bytes)
        if failed >= 0:
            raise ShardUnavailable(shards[failed], why)
        self.native_counts = (trips, descriptors)
        out["columns"] = self._handed_out(outputs, pooled)
        return out


class PythonTransport:
    """What the native sampler calls back, for a transport written in Python
    (verbs; tests' loopback ones), to move bytes: ``read`` (a round trip's
    spans of other processes' shards) and ``staging`` (registered buffers by
    use). See PythonReader, xla_ffi/python/one_sided_module.cc."""

    # The sampler's staging buffers by use (xla_ffi/core/one_sided/one_sided.h Use).
    STAGINGS = ("snapshot", "tree", "records")

    def __init__(self, reader: Any):
        self._reader = reader

    def read(self, requests: list[tuple[int, np.ndarray, np.ndarray, np.ndarray]],
             fixed: bool) -> tuple[int, str]:
        """Reads (shard, remote, local, sizes) spans; returns (-1, "") or the
        shard that failed and why."""
        del fixed  # a Python transport prepares nothing it could keep
        try:
            self._reader._read_remote({shard: (remote, sizes, local)
                                       for shard, remote, local, sizes in requests})
        except ShardUnavailable as e:
            return e.shard, e.why
        return -1, ""

    def staging(self, use: int, size: int) -> int:
        """The address of the registered buffer for `use`, of at least `size`
        bytes (the reader keeps it)."""
        return self._reader._staging(self.STAGINGS[use], size).ctypes.data
