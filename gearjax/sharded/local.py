"""Shards on the devices of one process: the ``xla`` exchange's program over P
local devices, each device the owner of one :class:`gearjax.Table`, with the
keys, plan and blocks of a :class:`gearjax.ShardedTable` over P processes.

P host devices (``--xla_force_host_platform_device_count=P``) stand in for P
processes, so the exchange's distribution and its traffic against P can be
checked and measured on one machine (``tests/test_exchange_blocks.py``,
``scripts/bench_exchange_scaling.py``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh
from jax.sharding import PartitionSpec as P

from gearjax import _sample_args
from gearjax import state as state_module
from gearjax.columns import Column
from gearjax.sharded import exchange
from gearjax.sharded import keys as keys_of
from gearjax.strategies import Strategy, Uniform
from gearjax.table import Table


def shard_tables(columns: Mapping[str, Column], capacity: int, max_length: int, shards: int,
                 **table_kwargs: Any) -> list[Table]:
    """``shards`` tables whose keys leave room for the shard's number (as the
    shards of a ShardedTable over ``shards`` processes)."""
    shift = keys_of.shard_shift(shards)
    return [Table(columns, capacity, max_length, name=f"local shard {k}", _key_bits=shift,
                  **table_kwargs) for k in range(shards)]


def specs(tables: Sequence[Table]) -> tuple[exchange.ShardSpec, ...]:
    """Every shard's spec, shard k being tables[k]."""
    shift = keys_of.shard_shift(len(tables))
    return tuple(exchange.ShardSpec(t.handle, k, len(tables), shift, t.capacity, t.max_length,
                                    tuple((n, c.shape, c.dtype) for n, c in t.columns.items()))
                 for k, t in enumerate(tables))


def sample_program(tables: Sequence[Table], batch_size: int, window: int | None = None,
                   strategy: Strategy = Uniform(), pad: str = "left",
                   devices: Sequence[jax.Device] | None = None, ragged: bool | None = None,
                   max_block: int | None = None):
    """A jitted global sample over one device per table (the first len(tables)
    local devices unless given): ``program(seeds, min_block=0)`` with uint32
    seeds of shape [P, 2] (one PRNG key's data per device) returns a
    ShardedBatch of P x ``batch_size`` rows, device k's rows k * B ... (k +
    1) * B - 1. ``min_block`` (traced: one compilation for every value)
    forces a block of at least that many rows (see
    :func:`gearjax.sharded.exchange.sample`, as are ``ragged`` and
    ``max_block``)."""
    devices = list(devices if devices is not None else jax.local_devices()[:len(tables)])
    if len(devices) != len(tables):
        raise ValueError(f"{len(tables)} shards need as many local devices, found "
                         f"{len(devices)} (set --xla_force_host_platform_device_count)")
    mesh = Mesh(np.array(devices), (exchange.AXIS,))
    every_spec = specs(tables)

    args = _sample_args.normalise(batch_size, window, strategy, pad,
                                  max_length=tables[0].max_length, rows=len(tables))

    def body(seed, min_block):
        # One call per program: a fresh state orders it (as an eager call's does).
        _, batch = exchange.sample(state_module.initial(), seed[0], spec=every_spec, args=args,
                                   axis_name=exchange.AXIS, min_block=min_block, ragged=ragged,
                                   max_block=max_block)
        return batch

    mapped = jax.jit(jax.shard_map(body, mesh=mesh, in_specs=(P(exchange.AXIS), P()),
                                   out_specs=P(exchange.AXIS)))

    def program(seeds, min_block=0):
        return mapped(jnp.asarray(seeds, jnp.uint32), jnp.int32(min_block))

    program.lower = lambda seeds, min_block=0: mapped.lower(jnp.asarray(seeds, jnp.uint32),
                                                            jnp.int32(min_block))
    return program
