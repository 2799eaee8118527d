"""Sharded tables: one table over the processes of a JAX job, one shard per
process, sampled from the global distribution (see :class:`ShardedTable`)."""

from gearjax.sharded.coordination import RejoinError
from gearjax.sharded.exchange import ShardedBatch
from gearjax.sharded.table import ShardedTable

__all__ = ["RejoinError", "ShardedBatch", "ShardedTable"]
