"""The Python side of the native one-sided sampler (xla_ffi/core/one_sided.h)
that the ``nixl`` exchange uses for Uniform, Timestep and Prioritized: eager
samples in one native call with the GIL released, and plans for samples
inside compiled programs (one XLA FFI call each, gearjax/_ffi.py). A mixin of
:class:`gearjax.sharded.one_sided.OneSidedReader`, whose transport says
whether it serves (``_native``) and with which agent."""

from __future__ import annotations

from typing import Any

import numpy as np

from gearjax.sharded.one_sided_protocol import (_SLOT_BYTES, ShardUnavailable,
                                                _root)


class NativeSampling:
    """Native samples for a one-sided reader (see the module docstring)."""

    # Set by the transport: whether the native sampler serves its samples,
    # and through which agent (gearjax._gearjax.NixlAgent; None: every shard
    # in this process, copied). Without it (verbs) one_sided.py samples.
    _native = False

    def _native_agent(self) -> Any:
        return None

    def compiles(self, strategy) -> bool:
        """Whether a sample by `strategy` inside a program can be one FFI call
        of the native sampler (plan): a tree strategy, and no more columns
        than a plan stages."""
        from gearjax._gearjax import one_sided_plan_max_columns

        return (self._native and not strategy.ranks and
                len(self._local.columns) <= one_sided_plan_max_columns)

    def plan(self, batch: int, window: int | None, code: int, alpha: float,
             pad_left: bool) -> int:
        """The handle of a native plan for compiled samples of this shape and
        strategy over the live shards (registered once, at trace time; a plan
        leaves out shards that fail on its own with on_dead_shard="skip")."""
        from gearjax._gearjax import one_sided_plan

        key = (batch, window or 0, code, alpha, pad_left)
        with self._reading:
            self._check_open()
            plans = self._plans
            if key not in plans:
                shards = [k for k in range(self._shards) if k not in self._dead]
                plans[key] = one_sided_plan(
                    self._native_agent(), self._native_layouts(shards, code, alpha),
                    shards, self._shard_shift,
                    [(c.step_bytes, c.pad_step()) for c in self._local.columns.values()],
                    batch, window or 0, pad_left, self._timeout, self._on_dead_shard == "skip")
            return plans[key]

    def close_plans(self) -> None:
        """Closes every compiled-sample plan (each waits for a sample in
        flight; later runs of programs using them fail, saying so), keeping
        the shards they lost in ``_dead``. Before the agent goes."""
        from gearjax._gearjax import one_sided_plan_close

        plans, self._plans = self._plans, {}
        for handle in plans.values():
            self._dead.update(one_sided_plan_close(handle))

    def lost_shards(self) -> set[int]:
        """Shards left out, by Python samples and by compiled ones."""
        from gearjax._gearjax import one_sided_plan_lost

        lost = set(self._dead)
        for handle in list(self._plans.values()):
            lost.update(one_sided_plan_lost(handle))
        return lost

    def _native_layouts(self, shards, code, alpha) -> list[tuple]:
        """The shards' layouts for a strategy as the native sampler takes them."""
        uniform = {k: self._peer_layout(k, 0, 0.0) for k in shards}
        layouts = {k: self._peer_layout(k, code, alpha) for k in shards}
        return [("" if k == self._shard else self._peer_name(k), layouts[k]["arena"],
                 layouts[k]["column_offsets"], layouts[k]["slots"],
                 layouts[k]["slots_bytes"] // _SLOT_BYTES, layouts[k]["tree"],
                 layouts[k]["tree_offsets"], layouts[k]["tree_bytes"] // 8, _root(uniform[k]),
                 layouts[k]["max_length"]) for k in shards]

    def _sample_native(self, rng, batch, window, code, alpha, pad_left, shards, seed=None):
        """_sample for Uniform, Timestep and Prioritized, in one native call
        with the GIL released: the same protocol (module docstring), the
        rows straight into output buffers handed out as they are."""
        from gearjax._gearjax import one_sided_sample

        columns = list(self._local.columns.values())
        width = window or self._local.max_length
        outputs, pooled = self._outputs(batch, width)
        out = {"keys": np.empty(batch, np.int64), "start": np.empty(batch, np.int32),
               "probability": np.empty(batch, np.float32),
               "table_size": np.empty(batch, np.int64), "valid": np.empty(batch, np.int32),
               "shard": np.empty(batch, np.int32)}
        if seed is None:  # else the caller's, as compiled samples derive it
            seed = rng.integers(0, 1 << 32, 2, dtype=np.uint64)
        failed, why, trips, descriptors = one_sided_sample(
            self._native_agent(), self._native_layouts(shards, code, alpha), list(shards),
            self._shard_shift,
            [(column.step_bytes, column.pad_step()) for column in columns],
            int(seed[0]), int(seed[1]), batch, window or 0, pad_left, out["keys"], out["start"],
            out["probability"], out["table_size"], out["valid"], out["shard"],
            [a.reshape(-1).view(np.uint8) for a in outputs], self._timeout)
        if failed >= 0:
            raise ShardUnavailable(shards[failed], why)
        self.native_counts = (trips, descriptors)
        out["columns"] = self._handed_out(outputs, pooled)
        return out

    def _peer_name(self, shard: int) -> str:
        """The transport's name for a shard's owner (native samples)."""
        raise NotImplementedError
