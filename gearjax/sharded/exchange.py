"""The ``xla`` exchange: a global sample and routed priority updates made of
JAX collectives inside one program, over a mesh axis with one device per
process (gloo between CPU processes, NCCL between GPUs).

A global sample of B rows per process (see xla_ffi/core/sharding.h for the
arithmetic):

1. each shard's summary (``shard_totals``) and each process's plan seed are
   all-gathered, in one gather; for TopK(k) and Recent(n) each shard's best
   list (``shard_tops``: its min(k, capacity) best entries) goes in the same
   gather, and every process ranks the lists (``shard_rank``) into each
   shard's share of the global best;
2. each process draws the shard of each row of every process
   (``shard_plan``), so it knows what every process asks of its shard;
3. each owner draws the rows every process asked of it into one block per
   process (``shard_serve``), the blocks go to their processes in one
   all-to-all, and each process puts its rows back in order.

Blocks are B rows each, whatever was asked, because XLA's shapes are static:
the all-to-all moves P x B rows per process (P processes), of which B are
real. The owner writes only the rows asked of it.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from gearjax import _ffi
from gearjax.batch import Batch
from gearjax.sharded import keys as keys_of
from gearjax.strategies import Recent, Strategy, TopK
from gearjax._sample import seed_words, window_steps

# The mesh axis of the programs that eager calls run.
AXIS = "gearjax_shards"


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class ShardedBatch(Batch):
    """A :class:`gearjax.Batch` from a sharded table. ``keys`` are global,
    ``probability`` and ``table_size`` are over all shards, and

    Attributes:
      shard: ``[B]`` int32, the shard (process) that owned each row.
    """

    shard: jax.Array


@dataclasses.dataclass(frozen=True)
class ShardSpec:
    """What a compiled global sample needs of the local shard (hashable: a
    static argument)."""

    handle: int        # the local shard's table handle
    shard: int         # this process's shard number (its process index)
    shards: int        # the number of shards (processes)
    shard_shift: int   # global key = shard << shard_shift | the shard's own key
    capacity: int      # of each shard
    max_length: int
    columns: tuple[tuple[str, tuple[int, ...], np.dtype], ...]


def check_axis(axis_name: str, spec: ShardSpec) -> None:
    """Refuses an axis that is not one device per process: its collectives
    would not pair the shards."""
    try:
        size = jax.lax.axis_size(axis_name)
    except (NameError, KeyError, ValueError) as e:
        raise ValueError(f"axis_name={axis_name!r} is not an axis of the enclosing shard_map "
                         f"({e}); sample a ShardedTable with axis_name inside "
                         f"jax.shard_map over a mesh with one device per process") from None
    if size != spec.shards:
        raise ValueError(f"the mesh axis {axis_name!r} has {size} devices, but the table has "
                         f"{spec.shards} shards (one per process): sample over a mesh axis "
                         f"with exactly one device per process, in process order")


def sample(rng_key: jax.Array, *, spec: ShardSpec, batch_size: int, window: int | None,
           strategy: Strategy, pad: str, axis_name: str) -> ShardedBatch:
    """A global sample, traced inside shard_map over ``axis_name``: this
    process's ``batch_size`` rows."""
    shards, block = spec.shards, batch_size
    # The same key in every process still gives each its own rows and each
    # owner its own draws: the shard's number is folded in.
    plan_seed = seed_words(jax.random.fold_in(jax.random.fold_in(rng_key, 0), spec.shard))
    serve_key = jax.random.fold_in(jax.random.fold_in(rng_key, 1), spec.shard)
    serve_seeds = jnp.stack([seed_words(jax.random.fold_in(serve_key, j))
                             for j in range(shards)])
    ranked = isinstance(strategy, (TopK, Recent))
    if ranked:
        per_shard = min(strategy.count, spec.capacity)
        summary, entries = _ffi.shard_tops_call(handle=spec.handle, strategy=strategy.code,
                                                count=strategy.count, shard=spec.shard,
                                                per_shard=per_shard)
    else:
        summary = _ffi.shard_totals_call(handle=spec.handle, strategy=strategy.code,
                                         alpha=strategy.alpha, shard=spec.shard)
        entries = jnp.zeros((0,), jnp.uint32)
    # One gather brings every shard's summary (and best list) and every
    # process's plan seed: each process then draws every process's plan, so
    # each owner knows what is asked of it without a second exchange.
    words = _ffi.SUMMARY_WORDS
    gathered = jax.lax.all_gather(jnp.concatenate([summary, plan_seed, entries]), axis_name)
    summaries = gathered[:, :words].reshape(-1)
    if ranked:
        summaries = _ffi.shard_rank_call(summaries, gathered[:, words + 2:].reshape(-1),
                                         strategy=strategy.code, count=strategy.count)
    shard_of_rows, counts = _ffi.shard_plan_call(gathered[:, words:words + 2], summaries,
                                                 batch=batch_size, shards=shards)
    shard_of_row = shard_of_rows[spec.shard]  # this process's rows
    asked = counts[:, spec.shard]  # rows each process asks of this shard
    width = window or spec.max_length
    served = _ffi.shard_serve_call(
        serve_seeds, asked, summaries, handle=spec.handle, block=block, strategy=strategy.code,
        alpha=strategy.alpha, window=window or 0, width=width, pad_left=pad == "left",
        shard=spec.shard, shard_shift=spec.shard_shift,
        columns=tuple((shape, dtype) for _, shape, dtype in spec.columns))

    # Row b is the rank-th row this process asked of shard k = shard_of_row[b].
    mine = shard_of_row[:, None] == jnp.arange(shards, dtype=jnp.int32)[None, :]
    rank = jnp.take_along_axis(jnp.cumsum(mine, axis=0, dtype=jnp.int32) - 1,
                               shard_of_row[:, None], axis=1)[:, 0]
    index = shard_of_row * block + rank

    def receive(x: jax.Array) -> jax.Array:
        blocks = x.reshape(shards, block, *x.shape[1:])
        received = jax.lax.all_to_all(blocks, axis_name, 0, 0, tiled=False)
        return received.reshape(shards * block, *x.shape[1:])[index]

    keys, start, probability, table_size, valid, *columns = (receive(x) for x in served)
    mask, timestep = window_steps(start, valid, width, pad == "left")
    return ShardedBatch(columns={n: c for (n, _, _), c in zip(spec.columns, columns)},
                        mask=mask, timestep=timestep, keys=keys, start=start,
                        probability=probability, table_size=table_size, shard=shard_of_row)


def update_priorities(keys: jax.Array, priorities: jax.Array, *, spec: ShardSpec,
                      axis_name: str) -> jax.Array:
    """Routed priority updates, traced inside shard_map over ``axis_name``:
    every process's entries reach every owner, which applies those of its
    shard, in process order (a key set by two processes takes the value of the
    later process). Returns the number of entries applied over all processes
    (an int32 scalar)."""
    all_keys = jax.lax.all_gather(keys, axis_name).reshape(-1)
    all_priorities = jax.lax.all_gather(priorities, axis_name).reshape(-1)
    local = _ffi.shard_keys_call(all_keys, shard=spec.shard, shard_shift=spec.shard_shift,
                                 to_local=True)
    _, updated = _ffi.update_priorities_call(local, all_priorities, handle=spec.handle)
    return jax.lax.psum(updated, axis_name)


@functools.cache
def process_mesh() -> Mesh:
    """One device per process (each process's first), in process order."""
    first: dict[int, jax.Device] = {}
    for device in jax.devices():
        first.setdefault(device.process_index, device)
    return Mesh(np.array([first[p] for p in sorted(first)]), (AXIS,))


def _global_rows(local: np.ndarray) -> jax.Array:
    """This process's rows as its block of a global array over process_mesh()."""
    return jax.make_array_from_process_local_data(
        NamedSharding(process_mesh(), P(AXIS)), local[None])


def _local_block(x: jax.Array) -> jax.Array:
    return x.addressable_data(0)


@functools.cache
def _gather_program():
    # Each process's block holds the whole gather: out_specs P(AXIS) with a
    # leading axis of 1 (P() would need replication shard_map cannot infer).
    return jax.jit(jax.shard_map(lambda x: jax.lax.all_gather(x[0], AXIS)[None],
                                 mesh=process_mesh(), in_specs=P(AXIS), out_specs=P(AXIS)))


def gather_words(local: np.ndarray) -> np.ndarray:
    """Every process's `local` (a small uint32 array of the same shape in every
    process), in process order: one small compiled all-gather, cached, which
    costs less per call than multihost_utils.process_allgather."""
    return np.asarray(_local_block(_gather_program()(_global_rows(local))))[0]


@functools.cache
def _eager_sample_program(spec: ShardSpec, batch_size: int, window: int | None,
                          strategy: Strategy, pad: str):
    def body(seed):
        return sample(seed[0], spec=spec, batch_size=batch_size, window=window,
                      strategy=strategy, pad=pad, axis_name=AXIS)

    return jax.jit(jax.shard_map(body, mesh=process_mesh(), in_specs=P(AXIS), out_specs=P(AXIS)))


def eager_sample(rng_key: jax.Array, *, spec: ShardSpec, batch_size: int, window: int | None,
                 strategy: Strategy, pad: str) -> ShardedBatch:
    """A global sample called eagerly: runs the collective program that every
    process runs at the same call (in the same order), and returns this
    process's rows as arrays on its own device."""
    seed = np.asarray(seed_words(rng_key), dtype=np.uint32)
    program = _eager_sample_program(spec, batch_size, window, strategy, pad)
    return jax.tree.map(_local_block, program(_global_rows(seed)))


def eager_update_priorities(keys: np.ndarray, priorities: np.ndarray, table) -> int:
    """Routed priority updates called eagerly: every process runs it at the
    same call, in the same order, with any number of entries. The entries of
    every process are gathered on the host (as uint32 words: JAX without x64
    would narrow int64 keys and float64 priorities), and each owner applies
    those of its shard to its local :class:`gearjax.Table` (``table`` is the
    ShardedTable), in process order. Returns the number of entries applied
    over all processes."""
    from jax.experimental import multihost_utils

    spec: ShardSpec = table.spec
    counts = np.asarray(multihost_utils.process_allgather(np.array([keys.shape[0]], np.int32)))
    count = max(int(counts.max()), 1)
    words = np.zeros((count, 4), np.uint32)
    words[:keys.shape[0], :2] = keys.astype(np.int64).view(np.uint32).reshape(-1, 2)
    words[:keys.shape[0], 2:] = priorities.astype(np.float64).view(np.uint32).reshape(-1, 2)
    gathered = np.asarray(multihost_utils.process_allgather(words)).reshape(-1, count, 4)
    all_keys, all_priorities = [], []
    for process, n in enumerate(counts.reshape(-1)):
        rows = np.ascontiguousarray(gathered[process, :n])
        all_keys.append(rows[:, :2].copy().view(np.int64).reshape(-1))
        all_priorities.append(rows[:, 2:].copy().view(np.float64).reshape(-1))
    all_keys = np.concatenate(all_keys)
    mine = keys_of.owners(all_keys, spec.shard_shift) == spec.shard
    updated = table.local.update_priorities(
        keys_of.local_keys(all_keys[mine], spec.shard_shift), np.concatenate(all_priorities)[mine])
    return int(np.asarray(multihost_utils.process_allgather(np.array([updated], np.int32))).sum())
