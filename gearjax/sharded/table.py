"""ShardedTable: one trajectory table over the processes of a JAX job, one
shard per process, sampled from the global distribution.

Every process makes the table with the same arguments, in the same order as
its other sharded tables (construction is collective: the processes check
that they agree). Each process inserts into its own shard; a sample draws rows
from all shards exactly as one table holding every shard would (see
``gearjax.sharded.exchange`` and ``xla_ffi/core/sharding/sharding.h``).
"""

from __future__ import annotations

import json
import os
import time
import types
from collections.abc import Mapping, Sequence
from typing import Any, Callable, overload

import jax
import numpy as np
from jax.experimental import io_callback

from gearjax import (_call_forms, _checks, _ffi, _gearjax, _sample_args, _update_args,
                     checkpoint, rate_limiters)
from gearjax._signatures import first_overload
from gearjax import state as table_state
from gearjax.columns import Column
from gearjax.sharded import agreement, coordination, exchange, keys as keys_of, nixl, verbs
from gearjax.sharded.exchange import ShardedBatch, ShardSpec
from gearjax.sharded.prefetch import Prefetcher
from gearjax.strategies import Strategy, Uniform
from gearjax._sample import seed_words
from gearjax._window_steps import window_steps
from gearjax.state import TableState
from gearjax.table import Table

EXCHANGES = ("xla", "nixl", "verbs")
# The one-sided transports: the check that they can run here, and the class.
ONE_SIDED = {"nixl": types.SimpleNamespace(api=nixl.nixl_api, Transport=nixl.Transport),
             "verbs": types.SimpleNamespace(api=verbs.verbs_api, Transport=verbs.Transport)}
MANIFEST = "manifest.json"
MANIFEST_FORMAT = "gearjax-sharded-table/1"
# How often, at most, a process republishes its shard's stats on its own
# inserts, samples and updates (len() and stats() always publish first).
STATS_INTERVAL_SECONDS = 0.25
# What each owner counts of the xla exchange (Table.exchange_stats, native).
EXCHANGE_COUNTS = ("serves", "rows_asked", "rows_sent", "bytes_asked", "bytes_sent")


def _fields(rows: dict[str, Any], width: int, pad_left: bool) -> dict[str, Any]:
    """A one-sided sample's batch fields but its columns, from what the reader
    returned (keys and table_size as uint32 word pairs: _ffi.int64_array)."""
    mask, timestep = window_steps(rows["start"], rows["valid"], width, pad_left)
    return {"mask": mask, "timestep": timestep, "keys": _ffi.int64_from_words(rows["keys"]),
            "start": rows["start"], "probability": rows["probability"],
            "table_size": _ffi.int64_from_words(rows["table_size"]), "shard": rows["shard"]}


# _fields compiled, for eager samples: one dispatch instead of one per field
# (the columns stay out of it: passed through a program, they would be copied).
_eager_fields = jax.jit(_fields, static_argnums=(1, 2))


def _seed_mix(shard: int) -> np.uint32:
    """A word that makes each process's compiled one-sided draws its own."""
    return np.uint32((0x9E3779B9 * (shard + 1)) & 0xFFFFFFFF)


def _to_jax(rows: np.ndarray) -> jax.Array:
    """Rows read on the host as a JAX array: on a CPU backend aliased, not
    copied (the reader hands out buffers nothing else writes while JAX holds
    them; one-sided.py, OUTPUT_BUFFERS), elsewhere copied to the device."""
    if jax.default_backend() == "cpu" and rows.flags.c_contiguous and rows.nbytes >= 1 << 16:
        return jax.numpy.from_dlpack(rows)
    return jax.numpy.asarray(rows)


class ShardedTable:
    """A trajectory table split over the processes of a JAX job.

    ``columns``, ``capacity``, ``max_length``, ``remover``, ``rate_limiter``,
    ``placement``, ``name``: as for :class:`gearjax.Table`, per shard: every
    process holds a shard of ``capacity`` slots, and the rate limiter and
    remover act on each shard alone. Every process makes the table with the
    same arguments, in the same order as its other sharded tables
    (construction is collective: the processes check that they agree).

    Args:
      columns: column name -> :class:`gearjax.Column`, as for
        :class:`gearjax.Table`.
      capacity: trajectory slots of each shard.
      max_length: steps per slot.
      exchange: how rows move between processes. ``"xla"`` (the default):
        JAX collectives in the sampling program (gloo between CPU processes,
        NCCL between GPUs); it needs nothing beyond jax. ``"nixl"``: one-sided
        reads of the other shards through NVIDIA NIXL, with no call into
        their owners, eagerly or inside a per-process jit (see
        :mod:`gearjax.sharded.nixl`). ``"verbs"``: the
        same reads as RDMA READs through pyverbs (:mod:`gearjax.sharded.verbs`;
        unverified on hardware). A one-sided table takes no rate limiter.
      exchange_timeout: ``nixl``, ``verbs``: seconds any one transfer may take
        before the sample fails naming the shard (or skips it, below).
      on_dead_shard: ``nixl``, ``verbs``: ``"raise"`` (a dead or unreachable
        shard fails the sample with
        :class:`gearjax.sharded.one_sided.ShardUnavailable`) or
        ``"skip"`` (go on over the live shards, probabilities renormalised,
        the loss in ``stats()["lost_shards"]``).
      remover: as for :class:`gearjax.Table`, acting on each shard alone.
      rate_limiter: as for :class:`gearjax.Table`, acting on each shard
        alone; ``None`` with a one-sided exchange.
      placement: as for :class:`gearjax.Table`, for this process's shard.
      name: a name for error messages and ``repr`` (each shard's own name is
        ``"<name> shard <k>"``, or ``"shard <k>"``).
      step_priorities: as for :class:`gearjax.Table`, per shard: a priority
        per stored step, for :class:`gearjax.PrioritizedSteps` (global
        samples, every exchange) and ``update_priorities(..., steps=...)``.

    Raises:
      TypeError: ``name`` is not a string; an argument of the shard fails
        :class:`gearjax.Table`'s type checks; ``exchange_timeout`` is not a
        real number.
      ValueError: ``exchange`` is not ``"xla"``, ``"nixl"`` or ``"verbs"``; a
        one-sided exchange with a rate limiter; ``exchange_timeout`` outside
        [0.001, 1e6]; ``on_dead_shard`` is not ``"raise"`` or ``"skip"``; the
        one-sided exchange's transport is missing here (the message says
        how to get it); the processes passed different arguments (columns
        in another order included; the message names the process that
        differs and how); an argument of the shard fails
        :class:`gearjax.Table`'s checks.
      gearjax.sharded.RejoinError: this process was restarted into a job
        whose earlier process of the same index made sharded tables (see
        :class:`gearjax.sharded.RejoinError`).

    Keys are global (:mod:`gearjax.sharded.keys`): ``key = shard << (63 -
    shard_bits) | shard_key``, where ``shard`` is the owning process's index,
    ``shard_bits`` the fewest bits that hold every process index (at least
    one), and ``shard_key`` the shard's own key (``sequence << slot_bits | slot``, see
    :attr:`gearjax.Table.slot_bits`). Keys are unique over the job, increase
    with insertion order within a shard, and are never reused.

    Needs ``jax.distributed.initialize(...)`` in every process first when the
    job has more than one process.
    """

    def __init__(self, columns: Mapping[str, Column], capacity: int, max_length: int, *,
                 exchange: str = "xla", remover: str = "fifo",
                 rate_limiter: rate_limiters.RateLimiter | None = None,
                 placement: str = "auto", name: str = "", exchange_timeout: float = 10.0,
                 on_dead_shard: str = "raise", step_priorities: bool = False):
        if not isinstance(exchange, str) or exchange not in EXCHANGES:
            raise ValueError(f"exchange must be one of {EXCHANGES}, got {exchange!r}")
        if not isinstance(name, str):
            raise TypeError(f"name must be a string, got {name!r}")
        if exchange in ONE_SIDED:
            ONE_SIDED[exchange].api()  # a clear error now if the transport is missing
            if rate_limiter is not None:
                raise ValueError(f"exchange={exchange!r} reads shards one-sidedly, which no "
                                 f"owner's rate limiter sees: use rate_limiter=None, or "
                                 f"exchange='xla'")
        exchange_timeout = _checks.real("exchange_timeout", exchange_timeout, 1e-3, 1e6)
        if on_dead_shard not in ("raise", "skip"):
            raise ValueError(f"on_dead_shard must be 'raise' or 'skip', got {on_dead_shard!r}")
        shard = jax.process_index()
        # The local shard checks every argument (and raises before anything
        # is published if one is bad).
        local = Table(columns, capacity, max_length, placement=placement, remover=remover,
                      rate_limiter=rate_limiter,
                      name=f"{name} shard {shard}" if name else f"shard {shard}",
                      step_priorities=step_priorities,
                      _key_bits=keys_of.shard_shift(jax.process_count()))
        self._become(local, name, exchange, exchange_timeout, on_dead_shard)

    def _become(self, local: Table, name: str, exchange: str, exchange_timeout: float,
                on_dead_shard: str) -> None:
        """Becomes the sharded table whose shard in this process is `local`
        (made, or loaded): the collective part of construction and of load
        (agreement, the job token, the transport, the first stats). Closes
        `local` if it fails."""
        self._processes, self._shard = jax.process_count(), jax.process_index()
        self._eager_calls = 0  # eager collective calls so far (check_same_call numbers them)
        self._shard_shift = keys_of.shard_shift(self._processes)
        self._local, self._name, self._exchange = local, name, exchange
        self._exchange_timeout, self._on_dead_shard = exchange_timeout, on_dead_shard
        self._path = coordination.next_table_path()
        self._spec = ShardSpec(local.handle, self._shard, self._processes, self._shard_shift,
                               local.capacity, local.max_length,
                               tuple((n, c.shape, c.dtype) for n, c in local.columns.items()))
        self._transport = None
        try:
            coordination.join(self._shard)  # a restarted process is refused here
            coordination.agree(self._path, "spec", self._agreed_spec(), self._shard,
                               self._processes, agreement.differences)
            self._token = coordination.job_token(self._path, self._shard)
            if self._exchange in ONE_SIDED:
                self._transport = ONE_SIDED[self._exchange].Transport(
                    self._local, self._shard, self._processes, self._shard_shift, self._path,
                    self._token, self._exchange_timeout, self._on_dead_shard)
                self._prefetcher = Prefetcher(f"gearjax-prefetch-{self._shard}")
        except BaseException:
            self._local.close()
            raise
        self._published_at = 0.0
        self._saves = 0
        self._publish(force=True)

    def _agreed_spec(self) -> dict:
        """What every process must have passed alike (the columns in order)."""
        return agreement.table_spec(self._local.columns, self._local.capacity,
                                    self._local.max_length, self._local.remover,
                                    self._local.rate_limiter, self._exchange, self._name,
                                    self._processes, self._local.step_priorities)

    # ------------------------------------------------------------------ info
    @property
    def shard(self) -> int:
        """This process's shard (its process index)."""
        return self._shard

    @property
    def num_shards(self) -> int:
        """The number of shards: the job's processes."""
        return self._processes

    @property
    def local(self) -> Table:
        """This process's shard, a :class:`gearjax.Table` with its own keys
        (use it to inspect the shard; insert and sample through the sharded
        table)."""
        return self._local

    @property
    def columns(self) -> dict[str, Column]:
        """The columns, name -> :class:`gearjax.Column` (a copy)."""
        return self._local.columns

    @property
    def exchange(self) -> str:
        """How rows move between processes: ``"xla"``, ``"nixl"`` or ``"verbs"``."""
        return self._exchange

    @property
    def spec(self) -> ShardSpec:
        """What compiled global samples know of this process's shard."""
        return self._spec

    @property
    def shard_shift(self) -> int:
        """Global keys are ``shard << shard_shift | shard_key``."""
        return self._shard_shift

    def shard_of(self, key: int) -> int:
        """The shard that owns (or owned) a global key.

        Args:
          key: a global key, an integer in [0, 2**63 - 1].

        Returns:
          The owning shard's number (its process index): the key's top
            bits, which may name no process (a number at or beyond
            :attr:`num_shards`) for a key no shard issued.

        Raises:
          TypeError: ``key`` is not an integer (bools are refused).
          ValueError: ``key`` is negative or beyond int64.
        """
        return _checks.integer("key", key, 0, _checks.INT64_MAX) >> self._shard_shift

    def __repr__(self) -> str:
        state = "closed" if self.closed else f"shard {self._shard} of {self._processes}"
        name = f"{self._name!r}, " if self._name else ""
        return (f"gearjax.ShardedTable({name}{state}, exchange={self._exchange!r}, "
                f"capacity={self._local.capacity} per shard)")

    def __len__(self) -> int:
        """Trajectories over all shards, as last published (never waits for
        another process; see :meth:`stats`)."""
        return int(self.stats()["size"])

    def stats(self) -> dict[str, Any]:
        """Global totals and every shard's latest stats, without waiting for any other process.

        Each process publishes its shard's stats through JAX's key-value
        store when it inserts, samples or updates (at most every
        ``STATS_INTERVAL_SECONDS``) and when it calls ``len`` or ``stats``.

        Returns:
          A new ``dict``: ``size``, ``num_steps``, ``inserts``, ``samples``,
            ``evictions``, ``priority_updates`` and ``skipped_updates`` summed
            over the shards that published; what the owners served to the
            ``xla`` exchange, summed likewise: ``exchange_serves`` (owner
            calls), ``exchange_rows_asked`` and ``exchange_bytes_asked`` (the
            rows requesters asked for), ``exchange_rows_sent`` and
            ``exchange_bytes_sent`` (the whole blocks the all-to-all moved,
            the owner's own block included; on GPU and TPU, where a ragged
            all-to-all moves exactly the rows asked, those),
            ``exchange_serves_by_block`` (block size -> serves; 0 for the
            ragged all-to-all) and ``exchange_bytes_per_useful_byte`` (sent
            over asked; None before any; the one-sided exchanges read exactly
            the rows asked and count nothing here); ``shards``, the list of
            per-shard stats (None for a shard that published nothing yet);
            ``age_seconds``, how old each shard's figures are;
            ``stale_seconds``, the largest of those; and ``shard``,
            ``num_shards``, ``exchange`` and ``closed``. With a one-sided
            exchange also ``lost_shards`` (the shards skipped as dead),
            ``refused_updates``, ``sent_updates``, ``prefetch_hits`` and
            ``prefetch_misses``.
        """
        self._publish(force=True)
        shards = coordination.latest_stats(self._path, self._processes)
        now = time.time()
        ages = [None if s is None else max(0.0, now - s["published_at"]) for s in shards]
        out: dict[str, Any] = {k: sum(s[k] for s in shards if s is not None) for k in (
            "size", "num_steps", "inserts", "samples", "evictions", "priority_updates",
            "skipped_updates", *(f"exchange_{k}" for k in EXCHANGE_COUNTS))}
        by_block: dict[int, int] = {}
        for shard in shards:
            for block, serves in (shard or {}).get("exchange_serves_by_block", {}).items():
                by_block[int(block)] = by_block.get(int(block), 0) + serves
        out["exchange_serves_by_block"] = dict(sorted(by_block.items()))
        out["exchange_bytes_per_useful_byte"] = (
            out["exchange_bytes_sent"] / out["exchange_bytes_asked"]
            if out["exchange_bytes_asked"] else None)
        if self._transport is not None:
            out.update(lost_shards=sorted(self._transport.lost_shards()),
                       refused_updates=self._transport.refused_updates,
                       sent_updates=self._transport.sent_updates,
                       prefetch_hits=self._prefetcher.hits,
                       prefetch_misses=self._prefetcher.misses)
        out.update(shards=shards, age_seconds=ages,
                   stale_seconds=max((a for a in ages if a is not None), default=0.0),
                   shard=self._shard, num_shards=self._processes, exchange=self._exchange,
                   closed=self.closed)
        return out

    def _publish(self, force: bool = False) -> None:
        now = time.monotonic()
        if self.closed or (not force and now - self._published_at < STATS_INTERVAL_SECONDS):
            return
        self._published_at = now
        s = self._local.stats()
        served = self._local._native.exchange_stats()
        coordination.publish_stats(self._path, self._shard, {
            **{k: s[k] for k in ("size", "num_steps", "inserts", "samples", "evictions",
                                 "priority_updates", "skipped_updates", "capacity")},
            **{f"exchange_{k}": served[k] for k in EXCHANGE_COUNTS},
            # JSON keys are strings.
            "exchange_serves_by_block": {str(b): n for b, n in
                                         served["serves_by_block"].items()}})

    # ------------------------------------------------------------- lifecycle
    @property
    def closed(self) -> bool:
        return self._local.closed

    def close(self) -> None:
        """Closes this process's shard and withdraws what it published.

        See :meth:`gearjax.Table.close`. Other processes' samples that reach
        it afterwards fail naming it. A one-sided exchange first waits for
        this process's sample in progress: ``nixl`` until it ends, ``verbs``
        at most the exchange's timeout (a sample still running then fails at
        its next read of another shard; the buffers it copies into stay with
        the transport). A one-sided sample holds this process's shard, which
        it copies from, so closing the shard waits for it as
        :meth:`gearjax.Table.close` waits for a sample inside (and, as there,
        where the sample outlives the wait, a later ``close()`` frees the
        shard's memory once it has left). Idempotent; ``with table:`` closes
        it on exit.
        """
        if self.closed:
            self._local.close()  # frees what a sample inside kept past the first close
            return
        if self._transport is not None:
            self._prefetcher.close()  # a read in flight ends first
            self._transport.close()  # peers' reads stop before the memory goes
        self._local.close()
        coordination.forget(self._path, self._shard)

    def __enter__(self) -> "ShardedTable":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ---------------------------------------------------------------- insert
    def insert(self, trajectory: Mapping[str, Any], priority: float = 1.0) -> int:
        """Inserts into this process's shard and returns the global key.

        See :meth:`gearjax.Table.insert`.

        Args:
          trajectory: column name -> array ``[T, *shape]``, as
            :meth:`gearjax.Table.insert` takes it.
          priority: as for :meth:`gearjax.Table.insert`.

        Returns:
          The trajectory's global key (an ``int``).

        Raises:
          TypeError: as :meth:`gearjax.Table.insert`.
          ValueError: as :meth:`gearjax.Table.insert`.
          TimeoutError: this shard's rate limiter held the insert back past
            its timeout.
          RuntimeError: the table is closed.
        """
        key = self._local.insert(trajectory, priority)
        self._publish()
        return int(keys_of.global_keys(self._shard, key, self._shard_shift))

    def insert_many(self, trajectories: Sequence[Mapping[str, Any]],
                    priorities: Sequence[float] | np.ndarray | None = None) -> np.ndarray:
        """Inserts into this process's shard and returns the global keys.

        See :meth:`gearjax.Table.insert_many`.

        Args:
          trajectories: a sequence of trajectories, as
            :meth:`gearjax.Table.insert_many` takes them.
          priorities: one priority per trajectory, or ``None``: 1.0 each.

        Returns:
          The global keys, a NumPy int64 array ``[N]``, in the order given.

        Raises:
          TypeError: as :meth:`gearjax.Table.insert_many`.
          ValueError: as :meth:`gearjax.Table.insert_many`.
          TimeoutError: as :meth:`gearjax.Table.insert_many` (the error says
            how many went in).
          RuntimeError: the table is closed.
        """
        keys = self._local.insert_many(trajectories, priorities)
        self._publish()
        return keys_of.global_keys(self._shard, keys, self._shard_shift)

    @overload
    def insert_batch(self, state: TableState, columns: Mapping[str, Any], lengths: Any,
                     priorities: Any = None) -> tuple[TableState, jax.Array]: ...

    @overload
    def insert_batch(self, columns: Mapping[str, Any], lengths: Any,
                     priorities: Any = None) -> jax.Array: ...

    @first_overload
    def insert_batch(self, *args: Any, **kwargs: Any) -> Any:
        """Inserts into this process's shard, from inside jit too, and returns the global keys.

        The two forms of :meth:`gearjax.Table.insert_batch`: ``state, keys =
        insert_batch(state, columns, lengths, priorities=None)`` in compiled
        code, ``keys = insert_batch(columns, lengths, priorities=None)``
        eagerly.

        Arguments (both forms):

        * ``state`` (``TableState``, first form only): the table state.
        * ``columns``: column name -> ``[N, T, *shape]``, as
          :meth:`gearjax.Table.insert_batch` takes them.
        * ``lengths``: integers ``[N]``: the first ``lengths[i]`` steps of
          row i are real.
        * ``priorities``: real numbers ``[N]``, or ``None``: 1.0 each.

        Returns:
          The global keys, int64 ``[N]``; ``(state, keys)``, the state's
            successor first, when given a state.

        Raises:
          TypeError: as :meth:`gearjax.Table.insert_batch`.
          ValueError: as :meth:`gearjax.Table.insert_batch`.
          RuntimeError: the table is closed; errors found when the call runs
            as :meth:`gearjax.Table.insert_batch`.
        """
        state, args = _call_forms.split_insert_batch_state(args, kwargs)
        local = self._local.insert_batch(*args, **kwargs) if state is None else \
            self._local.insert_batch(state, *args, **kwargs)
        state, keys = (None, local) if state is None else local
        if isinstance(keys, np.ndarray):  # an eager call on a host shard: NumPy keys
            keys = keys_of.global_keys(self._shard, keys, self._shard_shift)
        else:
            keys = _ffi.shard_keys_call(keys, shard=self._shard, shard_shift=self._shard_shift,
                                        to_local=False)
        return keys if state is None else (state, keys)

    def get(self, key: int) -> dict[str, np.ndarray]:
        """Returns a copy of the stored trajectory with a global key.

        This process's shard is read as :meth:`gearjax.Table.get` reads it.
        Another shard is read one-sidedly with ``exchange="nixl"`` or
        ``"verbs"`` (record, data, record again: a trajectory rewritten
        meanwhile is gone, so KeyError); the ``xla`` exchange moves data only
        inside collective programs, so there a key of another shard raises
        ValueError naming its owner.

        Args:
          key: a global key (a Python or NumPy integer).

        Returns:
          A new ``dict``, column name -> NumPy array ``[T, *shape]``.

        Raises:
          KeyError: no shard holds the key (or, read one-sidedly, it was
            rewritten meanwhile).
          ValueError: with the ``xla`` exchange, the key belongs to another
            process's shard (the message names it); ``key`` is negative or
            beyond int64.
          TypeError: ``key`` is not an integer.
          RuntimeError: the table is closed.
        """
        owner = self.shard_of(key)
        local_key = int(keys_of.local_keys(key, self._shard_shift))
        if owner == self._shard:
            return self._local.get(local_key)
        if owner >= self._processes:
            raise KeyError(f"no trajectory with key {key} is stored (no shard {owner})")
        if self._transport is None:
            raise ValueError(f"key {key} belongs to shard {owner}; with exchange='xla' a process "
                             f"reads only its own shard ({self._shard}): call get in process "
                             f"{owner}")
        self._local._check_open()
        found = self._transport.get(owner, local_key)
        if found is None:
            raise KeyError(f"no trajectory with key {key} is stored")
        return found

    # ---------------------------------------------------------------- sample
    @overload
    def sample(self, state: TableState, rng_key: jax.Array, batch_size: int,
               window: int | None = None, strategy: Strategy = Uniform(),
               pad: str | None = None, *, cut: str = "start", replace: bool = True,
               axis_name: str | None = None,
               prefetch: bool = False) -> tuple[TableState, ShardedBatch]: ...

    @overload
    def sample(self, rng_key: jax.Array, batch_size: int, window: int | None = None,
               strategy: Strategy = Uniform(), pad: str | None = None, *,
               cut: str = "start", replace: bool = True, axis_name: str | None = None,
               prefetch: bool = False) -> ShardedBatch: ...

    @first_overload
    def sample(self, *args: Any, **kwargs: Any) -> Any:
        """Samples ``batch_size`` rows for this process from the global distribution.

        ``state, batch = sample(state, rng_key, batch_size, window=None,
        strategy=Uniform(), pad=None, *, cut="start", replace=True,
        axis_name=None, prefetch=False)``, the two forms of
        :meth:`gearjax.Table.sample`: with a table state (from :meth:`state`),
        the form for compiled code (inside ``jax.shard_map`` or a per-process
        ``jax.jit``), or without (``batch = sample(rng_key, ...)``), eager
        calls only.

        Arguments (both forms):

        * ``state`` (``TableState``, first form only): the table state, from
          :meth:`state` or the previous table call. Called eagerly, the
          sample runs once the program that returned it has run (its
          failure is raised here), as a :class:`gearjax.Table`'s does.
        * ``rng_key``, ``batch_size``, ``window``, ``strategy``, ``pad``: as
          for :meth:`gearjax.Table.sample`; ``batch_size`` is this process's
          rows (``batch_size`` times the number of processes at most
          2**31 - 1).
        * ``cut`` (keyword): ``"start"`` only.
        * ``replace`` (keyword): ``True`` only.
        * ``axis_name`` (``str | None``, keyword, default ``None``): the mesh
          axis inside ``jax.shard_map`` (below), or ``None``.
        * ``prefetch`` (``bool``, keyword, default ``False``; ``nixl`` and
          ``verbs``): read the next batch in the background (below).

        Returns:
          The batch, a :class:`gearjax.sharded.ShardedBatch` (this process's
            rows, or its block of the global batch inside ``shard_map``);
            ``(state, batch)``, the state's successor first, when given a
            state.

        Raises:
          TypeError: an argument fails :meth:`gearjax.Table.sample`'s type
            checks; ``prefetch`` is not a bool; the stateless form traced.
          ValueError: an argument fails :meth:`gearjax.Table.sample`'s range
            checks; another ``cut`` or ``replace=False``; ``prefetch=True`` with the
            ``xla`` exchange; the ``xla`` exchange with ``axis_name=None``
            inside a per-process ``jax.jit``; an ``axis_name`` that is not an
            axis of the enclosing ``shard_map`` or not one device per
            process; a JAX backend other than CPU or CUDA (``xla``); processes
            that disagree on the call (``xla``, eager).
          RuntimeError: the table is closed;
            :class:`gearjax.sharded.one_sided.ShardUnavailable` (a
            ``RuntimeError``) for a dead or unreachable shard with
            ``on_dead_shard="raise"``; errors found when the sample runs,
            or, called eagerly, in the program that returned ``state``
            (``jax.errors.JaxRuntimeError``).

        Each row's trajectory is drawn with exactly the probability it would
        have in one table holding every shard; ``probability``,
        ``table_size`` and ``keys`` are global, and processes that pass the
        same key still get different rows (docs: Multi-host, "The global
        distribution"). ``axis_name=None`` runs a collective program, called
        eagerly in every process at the same call; ``axis_name="..."`` runs
        inside ``jax.shard_map`` over one device per process (docs:
        Multi-host). Compiled one-sided samples, ``prefetch=True`` and what
        reads through a host callback: docs, Exchanges.
        """
        state, args = _call_forms.split_state(args)
        return self._sample(state, *args, **kwargs)

    def state(self) -> TableState:
        """Returns a fresh table state for the compiled calls of :meth:`sample`,
        :meth:`update_priorities` and :meth:`insert_batch` (see
        :meth:`gearjax.Table.state`).

        Returns:
          A fresh table state: a uint32 scalar ``jax.Array``.

        Raises:
          RuntimeError: the table is closed.
        """
        self._local._check_open()
        return table_state.initial()

    def _sample(self, state: TableState | None, rng_key: jax.Array, batch_size: int,
                window: int | None = None, strategy: Strategy = Uniform(),
                pad: str | None = None, *, cut: str = "start", replace: bool = True,
                axis_name: str | None = None, prefetch: bool = False) -> Any:
        self._local._check_open()
        given = state is not None
        state = table_state.consume(state, self) if given else _call_forms.eager_state(
            "ShardedTable.sample(rng_key, ...)",
            "state, batch = table.sample(state, rng_key, ...)")
        eager = not isinstance(rng_key, jax.core.Tracer) and not isinstance(state, jax.core.Tracer)
        try:
            if given and eager:
                self._local._wait_for_state(state)  # as a Table's eager calls do
            args = self._checked_sample_args(rng_key, batch_size, window, strategy, pad, cut,
                                             replace, prefetch)
        except Exception as e:  # refused arguments, or the given state's program failed
            if self._transport is None and axis_name is None and eager:
                self._refuse_eager_call("sample", e)
            raise
        if self._transport is not None:
            state, batch = self._sample_one_sided(state, rng_key, args, axis_name, prefetch)
            return (state, batch) if given else batch
        _check_platform()
        if axis_name is not None:
            exchange.check_axis(axis_name, self._spec)
            return exchange.sample(state, rng_key, spec=self._spec, args=args,
                                   axis_name=axis_name)
        if not eager:
            raise ValueError("ShardedTable.sample with exchange='xla' and axis_name=None runs a "
                             "collective program of its own, which cannot run inside a "
                             "per-process jax.jit: call it eagerly, or inside jax.shard_map "
                             "over a mesh with one device per process with "
                             "axis_name=<that axis>")
        self._eager_calls += 1
        coordination.check_same_call(
            self._path, self._eager_calls,
            {"call": "sample", "batch_size": args.batch_size, "window": args.window,
             "strategy": repr(args.strategy), "pad": args.pad}, self._shard, self._processes,
            exchange.gather_words)
        batch = exchange.eager_sample(rng_key, spec=self._spec, args=args)
        self._publish()
        return (state, batch) if given else batch

    def _checked_sample_args(self, rng_key, batch_size, window, strategy, pad, cut, replace,
                             prefetch) -> _sample_args.SampleArgs:
        """A sharded sample's arguments, checked here (TypeError, ValueError)."""
        if not isinstance(prefetch, bool):
            raise TypeError(f"prefetch must be True or False, got {prefetch!r}")
        if prefetch and self._transport is None:
            raise ValueError("prefetch=True needs a one-sided exchange ('nixl' or 'verbs'): "
                             "with 'xla' every process takes part in every sample")
        args = _sample_args.check(rng_key, batch_size, window, strategy, pad, cut, replace,
                                  max_length=self._local.max_length, rows=self._processes)
        if args.cut != "start" or not args.replace:
            raise ValueError(f"a ShardedTable samples with cut='start' and replacement only "
                             f"(got cut={args.cut!r}, replace={args.replace}): sample one "
                             f"process's table (table.local) for the other modes")
        if args.strategy.draws_steps:
            if not self._local.step_priorities:
                raise ValueError(f"{args.strategy!r} draws steps by their own priorities: make "
                                 f"the sharded table with step_priorities=True")
        _sample_args.check_room("a sharded sample", args, self._local.columns,
                                self._local.rate_limiter, rows=self._processes)
        return args

    def _refuse_eager_call(self, call: str, error: Exception) -> None:
        """An eager ``xla`` call whose arguments this process refused still
        takes its place in the check that every process makes the same call
        (coordination.check_same_call), saying so: the others raise
        ValueError naming the refusal rather than wait for this process in
        the collective (where every process refused alike, none waits).
        The caller then raises ``error``."""
        if self._processes == 1:
            return
        self._eager_calls += 1
        try:
            coordination.check_same_call(
                self._path, self._eager_calls,
                {"call": call, "refused": f"{type(error).__name__}: {error}"}, self._shard,
                self._processes, exchange.gather_words)
        except ValueError:
            pass  # this process raises its own error

    def _sample_one_sided(self, state, rng_key, args: _sample_args.SampleArgs, axis_name,
                          prefetch) -> Any:
        """nixl, verbs: eagerly, the reads run now; inside a per-process
        jax.jit (the data-loader pattern) or inside shard_map (each process
        reads its own block), one FFI call of the native sampler where its
        reads need no Python (nixl, every strategy, CPU backend, no
        prefetch), else an io_callback around it, ordered by the state it
        takes and returns. Returns the state's successor and the batch."""
        if axis_name is not None:  # mode 2: this process reads its block itself
            exchange.check_axis(axis_name, self._spec)
        words = seed_words(rng_key)
        if isinstance(rng_key, jax.core.Tracer) or isinstance(state, jax.core.Tracer):
            if (self._transport.compiles() and not prefetch and
                    jax.default_backend() == "cpu"):
                return self._one_sided_native_call(state, words, args)
            return self._one_sided_callback(state, words, args,
                                            self._one_sided_reader(args, prefetch))
        rows = self._one_sided_reader(args, prefetch)(np.asarray(words))
        self._publish()
        # The small fields in one dispatch; the columns aliased where JAX can.
        small = {k: rows[k] for k in ("start", "valid", "keys", "probability", "table_size",
                                      "shard")}
        batch = ShardedBatch(columns={n: _to_jax(rows[f"column-{c}"])
                                      for c, n in enumerate(self._local.columns)},
                             **_eager_fields(small, args.width, args.pad_left))
        return state, batch

    def _one_sided_reader(self, args: _sample_args.SampleArgs, prefetch):
        """The host side of a one-sided sample: seed words in, the rows read
        by the transport out (64-bit fields as word pairs, columns by index),
        drawn as a compiled sample draws them, so a key gives the same rows in
        and out of jit; through the prefetcher where asked."""

        def draw(words: np.ndarray) -> dict[str, Any]:
            seed = (int(words[0]), int(words[1]) ^ int(_seed_mix(self._shard)))
            return self._transport.sample(seed, args)

        def read(words: np.ndarray) -> dict[str, np.ndarray]:
            words = np.asarray(words, np.uint32)
            rows = self._prefetcher.take(args, words, draw) \
                if prefetch else draw(words)
            out = {k: rows[k] for k in ("start", "probability", "valid", "shard")}
            for k in ("keys", "table_size"):  # 64-bit: as word pairs (see _ffi.int64_array)
                out[k] = np.ascontiguousarray(rows[k], np.int64).view(np.uint32).reshape(-1, 2)
            out.update({f"column-{c}": a for c, a in enumerate(rows["columns"])})
            return out

        return read

    def _one_sided_native_call(self, state, words, args: _sample_args.SampleArgs):
        """The compiled sample as one FFI call of the native sampler."""
        plan = self._transport.plan(args)
        # Processes given the same key draw different rows.
        seed = words ^ jax.numpy.array([0, _seed_mix(self._shard)], np.uint32)
        state, (keys, start, probability, table_size, valid, shard, *columns) = \
            _ffi.one_sided_sample_call(
                state, seed, plan=plan, batch=args.batch_size, width=args.width,
                columns=tuple((c.shape, c.dtype) for c in self._local.columns.values()))
        mask, timestep = window_steps(start, valid, args.width, args.pad_left)
        batch = ShardedBatch(columns=dict(zip(self._local.columns, columns)), mask=mask,
                             timestep=timestep, keys=keys, start=start,
                             probability=probability, table_size=table_size, shard=shard)
        return state, batch

    def _one_sided_callback(self, state, words, args: _sample_args.SampleArgs, read):
        """The compiled sample as an io_callback around `read`: it takes the
        state and returns it, so it is ordered by data, as the FFI call is,
        and kept (io_callback has a side effect)."""
        batch_size, width = args.batch_size, args.width
        shapes = {"keys": ((batch_size, 2), np.uint32), "start": ((batch_size,), np.int32),
                  "probability": ((batch_size,), np.float32),
                  "table_size": ((batch_size, 2), np.uint32),
                  "valid": ((batch_size,), np.int32), "shard": ((batch_size,), np.int32),
                  **{f"column-{c}": ((batch_size, width) + column.shape, column.dtype)
                     for c, column in enumerate(self._local.columns.values())}}
        state, rows = io_callback(
            lambda st, w: (st, read(w)),
            (jax.ShapeDtypeStruct((), np.uint32),
             {k: jax.ShapeDtypeStruct(shape, dtype) for k, (shape, dtype) in shapes.items()}),
            state, words)
        batch = ShardedBatch(columns={n: rows[f"column-{c}"]
                                      for c, n in enumerate(self._local.columns)},
                             **_fields(rows, width, args.pad_left))
        return state, batch

    # ------------------------------------------------------------ priorities
    @overload
    def update_priorities(self, state: TableState, keys: Any, priorities: Any, *,
                          axis_name: str | None = None,
                          steps: Any = None) -> tuple[TableState, Any]: ...

    @overload
    def update_priorities(self, keys: Any, priorities: Any, *,
                          axis_name: str | None = None, steps: Any = None) -> int: ...

    @first_overload
    def update_priorities(self, *args: Any, axis_name: str | None = None, **kwargs: Any) -> Any:
        """Sets priorities by global key.

        ``update_priorities(keys, priorities, *, axis_name=None)`` eagerly, or
        ``state, count = update_priorities(state, keys, priorities, *,
        axis_name)`` inside ``jax.shard_map`` (the table state orders it with
        the program's other table calls, as for :meth:`sample`).

        Each entry is applied by the shard that owns the key (never written
        into another process's memory), and one whose trajectory was evicted
        meanwhile is skipped and counted (``stats()["skipped_updates"]``).
        Priorities as for :meth:`gearjax.Table.update_priorities`.

        With the ``xla`` exchange, like :meth:`sample`: eagerly, every process
        calls it at the same call (each with its own keys, any number of
        them); or inside shard_map with ``axis_name``. Entries of all
        processes are applied in process order. With a one-sided exchange
        (``nixl``, ``verbs``) and ``axis_name=None`` it is not collective: the
        entries of this process's shard are applied here, the others sent to
        their owners as messages, which their progress threads apply.

        Arguments (both forms):

        * ``state`` (``TableState``): the table state (inside shard_map;
          eagerly it may be given too: the update runs once the program that
          returned it has run, its failure raised here, and the state is
          returned as it came).
        * ``keys``: int64 global keys, any number (flattened); eagerly, any
          integers but uint64.
        * ``priorities``: real numbers, as many as ``keys``.
        * ``axis_name`` (keyword): the mesh axis inside ``jax.shard_map``
          (one device per process), or ``None``: eagerly.
        * ``steps`` (keyword; tables made with ``step_priorities=True``):
          per-step priorities, as for :meth:`gearjax.Table.update_priorities`:
          ``keys`` ``[B]``, ``priorities`` and ``steps`` ``[B, W]``, a step
          below 0 skipped. The owner checks each named step against its
          trajectory's length: one past it refuses that owner's entries (the
          other shards apply theirs). With ``xla`` every process passes the
          same ``W`` and, eagerly, every process then raises ``ValueError``
          (inside shard_map the owner's program fails). With a one-sided
          exchange, eagerly only: this shard's refusal raises ``ValueError``
          here; another owner counts what it refuses
          (``stats()["refused_updates"]``).

        Returns:
          The number of entries applied over all processes: an ``int``, or an
            int32 scalar inside shard_map (after the state's successor, when
            given a state). With a one-sided exchange and
            ``axis_name=None``, the number applied by this process's own shard
            (the entries sent to other shards are not counted).

        Raises:
          TypeError: ``keys`` are not integers (inside shard_map: not int64);
            ``priorities`` are not real numbers (eagerly); no state inside
            shard_map.
          ValueError: ``keys`` and ``priorities`` differ in size (inside
            shard_map: or the priorities are not floating); a priority is out
            of range (eagerly); traced arguments with ``axis_name=None``
            (inside a per-process ``jax.jit``); an ``axis_name`` that is not
            an axis of the enclosing ``shard_map`` or not one device per
            process; a JAX backend other than CPU or CUDA (with
            ``axis_name``); with ``xla`` eagerly, another process's own
            arguments, or the state it was given, were refused (it raised
            why; nothing changed on any shard, and no process waits for it).
          RuntimeError: the table is closed.
          jax.errors.JaxRuntimeError: called eagerly, the program that
            returned ``state`` failed (nothing changed).
        """
        state, args = _call_forms.split_update_state(args, kwargs)
        return self._update_priorities(state, *args, axis_name=axis_name, **kwargs)

    def _update_priorities(self, state: TableState | None, keys: Any, priorities: Any, *,
                           axis_name: str | None, steps: Any = None) -> Any:
        self._local._check_open()
        given = state is not None
        state = table_state.consume(state, self) if given else _call_forms.eager_state(
            "ShardedTable.update_priorities(keys, priorities)",
            "state, count = table.update_priorities(state, keys, priorities, axis_name=...)")
        if steps is not None:
            state, count = self._update_step_priorities(state, keys, priorities, steps,
                                                        axis_name, given)
            return (state, count) if given else count
        if axis_name is not None:
            _check_platform()
            exchange.check_axis(axis_name, self._spec)
            keys, priorities = jax.numpy.ravel(keys), jax.numpy.ravel(priorities)
            if keys.dtype != np.int64:
                raise TypeError(f"keys of a ShardedTable are int64 global keys, got {keys.dtype}")
            if keys.shape != priorities.shape or not jax.numpy.issubdtype(
                    priorities.dtype, jax.numpy.floating):
                raise ValueError(f"need as many real priorities as keys, got "
                                 f"{priorities.dtype}{list(priorities.shape)} for "
                                 f"{list(keys.shape)}")
            if priorities.dtype not in (jax.numpy.float32, jax.numpy.float64):
                priorities = priorities.astype(jax.numpy.float32)
            state, count = exchange.update_priorities(state, keys, priorities, spec=self._spec,
                                                      axis_name=axis_name)
            return (state, count) if given else count
        if isinstance(keys, jax.core.Tracer) or isinstance(priorities, jax.core.Tracer):
            raise ValueError("ShardedTable.update_priorities with axis_name=None runs a "
                             "collective program of its own, which cannot run inside a "
                             "per-process jax.jit: call it eagerly, or inside jax.shard_map "
                             "with axis_name")
        keys, checked = self._checked_eagerly(_eager_operands, keys, priorities,
                                              wait_for=state if given else None)
        if self._transport is not None:
            updated = self._update_one_sided(keys, checked)
        else:
            updated = exchange.eager_update_priorities(keys, checked, self)
            self._publish()
        return (state, updated) if given else updated

    def _checked_eagerly(self, check: Callable[..., tuple], *args: Any,
                         wait_for: TableState | None = None) -> tuple:
        """``check(*args)``, the checks of an eager update's arguments, once
        the program that returned ``wait_for`` (a state the call was given)
        has run, as a :class:`gearjax.Table`'s eager calls wait. With the
        ``xla`` exchange the update is collective: a process whose arguments
        are refused, or whose state's program failed, still joins its first
        gather, saying so, before it raises, so that every process raises
        (ValueError, naming it) and none waits for it (a NaN TD error in one
        process's priorities, say)."""
        try:
            if wait_for is not None:
                self._local._wait_for_state(wait_for)
            return check(*args)
        except Exception:
            if self._transport is None:
                exchange.eager_update_refused()
            raise

    def _update_step_priorities(self, state: TableState, keys: Any, priorities: Any,
                                steps: Any, axis_name: str | None,
                                given: bool) -> tuple[TableState, Any]:
        """update_priorities(..., steps=...): with xla routed in shard_map
        (axis_name) or eagerly, with a one-sided exchange eagerly as messages;
        (the state's successor, the count)."""
        if not self._local.step_priorities:
            raise ValueError("this sharded table keeps one priority per trajectory: steps= "
                             "needs one made with step_priorities=True")
        traced = any(isinstance(x, jax.core.Tracer) for x in (keys, priorities, steps))
        if self._transport is not None and (axis_name is not None or traced):
            raise ValueError(f"exchange={self._exchange!r} updates step priorities eagerly "
                             f"(axis_name=None, concrete arrays): its owners apply messages")
        if axis_name is not None:
            _check_platform()
            exchange.check_axis(axis_name, self._spec)
            keys, priorities, steps = _update_args.operands(jax.numpy, keys, priorities, steps)
            if keys.dtype != np.int64:
                raise TypeError(f"keys of a ShardedTable are int64 global keys, got {keys.dtype}")
            if priorities.dtype not in (jax.numpy.float32, jax.numpy.float64):
                priorities = priorities.astype(jax.numpy.float32)
            if steps.dtype not in (jax.numpy.int32, jax.numpy.int64):
                steps = steps.astype(jax.numpy.int32)
            return exchange.update_step_priorities(state, keys, steps, priorities,
                                                   spec=self._spec, axis_name=axis_name)
        if traced:
            raise ValueError("ShardedTable.update_priorities with axis_name=None runs a "
                             "collective program of its own, which cannot run inside a "
                             "per-process jax.jit: call it eagerly, or inside jax.shard_map "
                             "with axis_name")
        keys, values, steps = self._checked_eagerly(_eager_step_operands, keys, priorities,
                                                    steps, wait_for=state if given else None)
        if self._transport is not None:  # nixl, verbs: routed as a trajectory's are
            return state, self._update_one_sided(keys, values, steps)
        updated = exchange.eager_update_priorities(keys, values, self, steps=steps)
        self._publish()
        return state, updated

    def _update_one_sided(self, keys: np.ndarray, priorities: np.ndarray,
                          steps: np.ndarray | None = None) -> int:
        """nixl, verbs: entries of this shard applied here (a step past its
        trajectory's length raises ValueError, changing nothing here), the
        others sent to their owners as messages (applied there by their
        progress threads, which count what they refuse). An update with rows
        for other shards that no message holds is refused before any of it is
        applied."""
        owners = keys_of.owners(keys, self._shard_shift)
        mine = owners == self._shard
        if not mine.all():
            self._transport.check_updates(None if steps is None else steps.shape[1])
        local_keys = keys_of.local_keys(keys[mine], self._shard_shift)
        if steps is None:
            applied = self._local.update_priorities(local_keys, priorities[mine])
        else:
            applied = self._local.update_priorities(local_keys, priorities[mine],
                                                    steps=steps[mine])
        for owner in np.unique(owners[~mine]):
            if 0 <= owner < self._processes:
                chosen = owners == owner
                self._transport.send_updates(int(owner), keys[chosen], priorities[chosen],
                                             None if steps is None else steps[chosen])
        self._publish()
        return int(applied)

    # ------------------------------------------------------------ persistence
    def save(self, directory: str | os.PathLike) -> None:
        """Saves every shard into a directory; every process calls it.

        Writes ``shard-<k>.gx`` per shard (a :meth:`gearjax.Table.save`
        checkpoint, atomic) and, once every shard is written,
        ``manifest.json`` (written atomically by process 0).

        Args:
          directory: the directory (created if missing; shared by the
            processes, or the same path on each host).

        Raises:
          RuntimeError: the table is closed.
          OSError: the directory or a file cannot be written (as
            :meth:`gearjax.Table.save`).
        """
        self._local._check_open()
        directory = os.fspath(directory)
        os.makedirs(directory, exist_ok=True)
        self._local.save(os.path.join(directory, _shard_file(self._shard)))
        self._saves += 1  # every process saves in the same order: barrier names agree
        coordination.barrier(self._path, f"save-{self._saves}", self._processes)
        if self._shard == 0:
            manifest = {"format": MANIFEST_FORMAT, "num_shards": self._processes,
                        "shard_shift": self._shard_shift, "exchange": self._exchange,
                        "name": self._name,
                        "shards": [_shard_file(k) for k in range(self._processes)]}
            checkpoint.write_atomically(os.path.join(directory, MANIFEST),
                                        json.dumps(manifest, indent=1).encode())
        coordination.barrier(self._path, f"saved-{self._saves}", self._processes)

    @classmethod
    def load(cls, directory: str | os.PathLike, placement: str | None = None, *,
             exchange_timeout: float = 10.0, on_dead_shard: str = "raise") -> "ShardedTable":
        """Restores a table saved with :meth:`save` into a job with as many processes.

        Process k loads shard k, exactly (see :meth:`gearjax.Table.load`),
        with the exchange it was saved with. Every process calls it.

        Args:
          directory: the directory :meth:`save` wrote.
          placement: overrides the saved placement of this process's shard
            (as for :meth:`gearjax.Table.load`); ``None``: as saved.
          exchange_timeout: as for :class:`ShardedTable`.
          on_dead_shard: as for :class:`ShardedTable`.

        Returns:
          The restored :class:`ShardedTable`.

        Raises:
          FileNotFoundError: the directory has no ``manifest.json`` (or the
            shard's file is missing).
          gearjax.CheckpointError: the manifest is malformed or names another
            number of shards than this job's processes; the shard's
            checkpoint fails :meth:`gearjax.Table.load`'s checks.
          TypeError: ``exchange_timeout`` is not a real number.
          ValueError: ``exchange_timeout`` is outside [0.001, 1e6];
            ``on_dead_shard`` is not ``"raise"`` or ``"skip"``; ``placement``
            is not a placement; the processes disagree (as
            :class:`ShardedTable`).
          gearjax.sharded.RejoinError: as :class:`ShardedTable`.
        """
        exchange_timeout = _checks.real("exchange_timeout", exchange_timeout, 1e-3, 1e6)
        if on_dead_shard not in ("raise", "skip"):
            raise ValueError(f"on_dead_shard must be 'raise' or 'skip', got {on_dead_shard!r}")
        directory = os.fspath(directory)
        manifest = _read_manifest(directory)
        processes = jax.process_count()
        if manifest["num_shards"] != processes:
            raise checkpoint.CheckpointError(
                f"{directory}: saved from {manifest['num_shards']} shards; this job has "
                f"{processes} processes (one shard each)")
        shard = jax.process_index()
        local = Table.load(os.path.join(directory, manifest["shards"][shard]), placement,
                           _key_bits=keys_of.shard_shift(processes))
        table = cls.__new__(cls)
        table._become(local, manifest["name"], manifest["exchange"], exchange_timeout,
                      on_dead_shard)
        return table


def _shard_file(shard: int) -> str:
    return f"shard-{shard:05d}.gx"


def _read_manifest(directory: str) -> dict:
    path = os.path.join(directory, MANIFEST)
    try:
        with open(path, "rb") as f:
            text = f.read(1 << 20)
        manifest = checkpoint.decode_json(text, MANIFEST)
    except FileNotFoundError:
        raise
    except (OSError, checkpoint.CheckpointError) as e:
        raise checkpoint.CheckpointError(f"{path}: not a sharded table manifest ({e})") from None
    ok = (isinstance(manifest, dict) and manifest.get("format") == MANIFEST_FORMAT and
          isinstance(manifest.get("num_shards"), int) and
          not isinstance(manifest.get("num_shards"), bool) and
          1 <= manifest["num_shards"] <= 1 << 16 and
          manifest.get("exchange") in EXCHANGES and isinstance(manifest.get("name"), str) and
          manifest.get("shards") == [_shard_file(k) for k in range(manifest["num_shards"])])
    if not ok:
        raise checkpoint.CheckpointError(f"{path}: not a manifest of format {MANIFEST_FORMAT}")
    return manifest


def _check_platform() -> None:
    """The shard calls have CPU handlers, and CUDA handlers where the extension
    was built with them (xla_ffi/cuda/ffi_cuda_shard.cu)."""
    backend = jax.default_backend()
    if backend == "cpu" or (backend == "gpu" and _gearjax.cuda_built):
        return
    raise ValueError(f"ShardedTable samples in CPU or CUDA programs; JAX's default backend "
                     f"here is {backend!r} (and this build has CUDA handlers: "
                     f"{_gearjax.cuda_built}). Run the sampling program on CPU devices "
                     f"(jax.config.update('jax_platforms', 'cpu'))")


def _eager_operands(keys: Any, priorities: Any) -> tuple[np.ndarray, np.ndarray]:
    """An eager update's keys (int64) and priorities (float64, checked), or
    TypeError / ValueError saying what is wrong with them."""
    keys, priorities = np.ravel(np.asarray(keys)), np.ravel(np.asarray(priorities))
    if keys.dtype == object or not np.issubdtype(keys.dtype, np.integer) or \
            keys.dtype == np.uint64:
        raise TypeError(f"keys must be integers (int64 global keys), got {keys.dtype}")
    if keys.shape != priorities.shape:
        raise ValueError(f"got {priorities.shape[0]} priorities for {keys.shape[0]} keys")
    return keys.astype(np.int64), _checks.priorities(priorities)


def _eager_step_operands(keys: Any, priorities: Any,
                         steps: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """An eager step update's keys and steps (int64) and checked priorities
    (float64, [B, W]), or TypeError / ValueError."""
    keys, priorities, steps = _update_args.operands(np, keys, priorities, steps)
    values = _update_args.step_values(priorities, steps)
    return keys.astype(np.int64), values, steps.astype(np.int64)
