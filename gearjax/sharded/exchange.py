"""The ``xla`` exchange: a global sample and routed priority updates made of
JAX collectives inside one program, over a mesh axis with one device per
process (gloo between CPU processes, NCCL between GPUs).

A global sample of B rows per process (see xla_ffi/core/sharding/sharding.h for the
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
   all-to-all (a row's small fields packed into one array of words, each
   large window on its own: gearjax/sharded/row_words.py), and each process
   puts its rows back in order.

XLA's shapes are static, so the all-to-all moves blocks of one size from
every owner to every requester: the owner writes the rows asked of it at the
top of each block, and the rest of the block travels unread. Every process
holds the whole plan (``counts[P, P]``: rows requester i asks of shard k), so
every process knows the largest pair count and takes the same branch of a
``lax.switch`` over all-to-alls compiled at a few block sizes
(:func:`block_sizes`: B/P growing by 1.1x up to the cap). A block never drops
a row (the smallest block that holds the largest count is chosen), and the
rows moved per process are P x block instead of P x B
(``scripts/bench_exchange_scaling.py`` measures them against P; a coarser
growth would compile fewer branches but move more). Each owner counts what it
sent (rows asked, rows in the blocks sent, their bytes, and how often each
block size ran): ``ShardedTable.stats()`` sums them.

Blocks stop at a cap (:func:`block_cap`: about 3 B / P rows, and never more
than B), and a plan whose largest pair count is above it moves in rounds of
capped blocks: round r carries the rows of rank r x cap to (r + 1) x cap - 1
of every pair, served with the pair's seed folded with r (rows stay
independent draws; round 0 is the only round of every plan that fits, and
its draws are the ones a single block would give). Every process knows the
number of rounds from the plan, so all run the same ones. Why: XLA plans a
program's buffers for its largest branch, so blocks of up to B rows made
every device hold P x B rows of send and receive buffers whether they ran or
not (67 MB a device at P = 16, B = 1024 and windows of 1,360 bytes, 16 times
the batch; allocated and faulted in on every call). Capped, they hold about
3 B + 16 P rows; only plans far from their expected counts (a mass ratio of
tens between shards) take more than one round, and a plan of every row from
one shard moves P x B rows in all, as one full block did.

On GPU and TPU the rows travel by ``jax.lax.ragged_all_to_all`` instead
(NCCL sends of exact sizes; XLA:CPU does not implement it): the offsets and
sizes come from the plan each process already holds (:func:`ragged_plan`), the
receive buffer is exactly B rows, the owners count only the rows asked as
sent, and the rounds are the same.

Several shards in one process (one per local device, as a benchmark or a
multi-GPU host runs them) are the same program: pass a tuple of specs, one
per device of the mesh axis in order, and each device calls its own shard's
handle (a ``lax.switch`` on its axis index).
"""

from __future__ import annotations

import dataclasses
import fractions
import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from gearjax import _ffi
from gearjax import state as state_module
from gearjax.batch import Batch
from gearjax.sharded import keys as keys_of
from gearjax.sharded import row_words
from gearjax._sample import seed_words
from gearjax._window_steps import window_steps
from gearjax._sample_args import SampleArgs

# The mesh axis of the programs that eager calls run.
AXIS = "gearjax_shards"


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class ShardedBatch(Batch):
    """A :class:`gearjax.Batch` from a sharded table: ``keys`` are global,
    ``probability`` and ``table_size`` are over all shards, and ``shard``
    says which shard owned each row.

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


# Each block size is at least this much larger than the one before it (a
# Fraction: exact arithmetic, the same sizes on every machine).
BLOCK_GROWTH = fractions.Fraction(11, 10)


# The cap on a block is this many times the mean pair count B / P, plus
# CAP_SLACK rows: far above the largest pair count of equal shards (the mean
# plus a few standard deviations of a binomial) and of shards whose masses
# differ tenfold.
CAP_SHARE = 3
CAP_SLACK = 16


def _check_sizes(batch_size: int, shards: int) -> None:
    if batch_size < 1 or shards < 1:
        raise ValueError(f"batch_size and shards must be >= 1, got {batch_size}, {shards}")


def block_cap(batch_size: int, shards: int) -> int:
    """The largest block of an exchange of ``batch_size`` rows per process over
    ``shards`` shards: min(B, ceil(CAP_SHARE x B / P) + CAP_SLACK). Plans
    with a larger pair count move in rounds of blocks of this size."""
    _check_sizes(batch_size, shards)
    return min(batch_size, -(-CAP_SHARE * batch_size // shards) + CAP_SLACK)


def block_sizes(batch_size: int, shards: int, cap: int | None = None) -> tuple[int, ...]:
    """The block sizes an exchange of ``batch_size`` rows per process over
    ``shards`` shards is compiled at: from ceil(B / P), each at least
    ``BLOCK_GROWTH`` times the last, ending at the cap (default
    :func:`block_cap`; at most B). No plan needs a block below ceil(B / P)
    (some shard gets at least that many of a requester's B rows)."""
    _check_sizes(batch_size, shards)
    cap = block_cap(batch_size, shards) if cap is None else cap
    if not 1 <= cap <= batch_size:
        raise ValueError(f"the block cap must be in [1, batch_size = {batch_size}], got {cap}")
    size = min(-(-batch_size // shards), cap)
    sizes = []
    while size < cap:
        sizes.append(size)
        size = max(size + 1, math.ceil(size * BLOCK_GROWTH))
    return (*sizes, cap)


def rounds_needed(need: jax.Array, cap: int) -> jax.Array:
    """Rounds of blocks of ``cap`` rows that carry a largest pair count of
    ``need`` (at least one)."""
    return jnp.maximum((need + cap - 1) // cap, 1)


def round_counts(asked: jax.Array, offset: jax.Array, block: int) -> jax.Array:
    """The rows of each pair that a round carrying ranks ``offset`` ...
    ``offset + block - 1`` moves: clip(asked - offset, 0, block)."""
    return jnp.clip(asked - offset, 0, block).astype(jnp.int32)


def round_index(shard_of_row: jax.Array, rank: jax.Array, offset: jax.Array,
                block: int) -> tuple[jax.Array, jax.Array]:
    """Which of a requester's rows a blocked round carrying ranks ``offset``
    ... ``offset + block - 1`` delivers, and where each lies in the P x
    block rows it receives (shard k's block, then the rank within it)."""
    taken = (rank >= offset) & (rank < offset + block)
    return taken, shard_of_row * block + jnp.clip(rank - offset, 0, block - 1)


def ragged_plan(counts: jax.Array, me: int | jax.Array, block: int):
    """What device ``me`` sends and receives in a ragged all-to-all of a global
    sample, from the plan ``counts[i, k]`` (rows requester i asks of shard k),
    which every process holds. The operand is the owner's blocks of ``block``
    rows (requester j's rows at the top of block j); each requester's output
    holds its rows by shard, then by rank within the shard.

    Returns (input_offsets, send_sizes, output_offsets, recv_sizes,
    row_offsets), int32 [P] each: the first four as
    :func:`jax.lax.ragged_all_to_all` takes them (output offsets are where the
    rows land in each receiver's output), and row_offsets[k], where shard k's
    rows start in this device's output."""
    counts = jnp.asarray(counts, jnp.int32)
    shards = counts.shape[0]
    before = jnp.cumsum(counts, axis=1, dtype=jnp.int32) - counts  # rows of lower shards
    return (jnp.arange(shards, dtype=jnp.int32) * block, counts[:, me], before[:, me],
            counts[me], before[me])


def ragged_round_plan(counts: jax.Array, me: int | jax.Array, offset: jax.Array, cap: int,
                      shard_of_row: jax.Array, rank: jax.Array):
    """A ragged round carrying ranks ``offset`` ... ``offset + cap - 1`` of
    every pair, for device ``me``: the rows it serves each requester
    (int32 [P]), the ragged all-to-all's (input_offsets, send_sizes,
    output_offsets, recv_sizes) over owners' blocks of ``cap`` rows, which of
    its own rows (shard_of_row[b], the rank-th it asked of that shard) the
    round delivers, and where each lies in the B rows received."""
    counts_now = round_counts(jnp.asarray(counts, jnp.int32), offset, cap)
    *sizes, row_offsets = ragged_plan(counts_now, me, cap)
    taken = (rank >= offset) & (rank < offset + cap)
    return (counts_now[:, me], tuple(sizes), taken,
            row_offsets[shard_of_row] + jnp.clip(rank - offset, 0, cap - 1))


def ragged_default() -> bool:
    """Whether samples use the ragged all-to-all when not told: on GPU and
    TPU backends, where XLA implements it."""
    return jax.default_backend() in ("gpu", "tpu")


def sample(state: jax.Array, rng_key: jax.Array, *, spec: ShardSpec | tuple[ShardSpec, ...],
           args: SampleArgs, axis_name: str, min_block: int | jax.Array = 0,
           ragged: bool | None = None,
           max_block: int | None = None) -> tuple[jax.Array, ShardedBatch]:
    """A global sample, traced inside shard_map over ``axis_name``: the
    successor of the table state ``state``, which orders this device's table
    calls (the shard's summary, then each round's draws), and this
    device's ``args.batch_size`` rows (``args``: the sample's arguments,
    checked; gearjax/_sample_args.py). ``spec`` is the local shard's, or a tuple
    of every shard's when the shards are the devices of one process (see the
    module docstring). ``min_block`` (an int, or a traced int32 scalar, the
    same in every process) forces a block of at least that many rows: the
    smallest of :func:`block_sizes` that holds both it and the largest count
    runs (tests run every size this way). ``max_block`` sets the cap on a
    block (default :func:`block_cap`; B gives one round for every plan, as
    the exchange was before rounds). ``ragged`` chooses the ragged all-to-all
    (default: :func:`ragged_default`); ``min_block`` then does nothing."""
    specs = spec if isinstance(spec, tuple) else (spec,)
    batch_size, shards = args.batch_size, specs[0].shards
    cap = block_cap(batch_size, shards) if max_block is None else int(max_block)
    if not 1 <= cap <= batch_size:
        raise ValueError(f"max_block must be in [1, batch_size = {batch_size}], got {max_block}")
    if len(specs) > 1 and [s.shard for s in specs] != list(range(shards)):
        raise ValueError("a tuple of specs must hold every shard, in order")
    # This device's shard: a number known at trace time, or its axis index.
    me = specs[0].shard if len(specs) == 1 else jax.lax.axis_index(axis_name)
    state, plan = _plan(state, rng_key, specs, args, axis_name, me)
    # How a served row travels: its small fields packed into one collective.
    layout = row_words.Layout.of(_ffi.sample_result_types(
        1, args.width, tuple((shape, dtype) for _, shape, dtype in specs[0].columns)))
    rounds = _Rounds(specs, args, axis_name, me, cap, plan, layout)
    # Every process holds the same counts, so every process takes the same
    # branch and the same number of rounds.
    if ragged_default() if ragged is None else ragged:
        state, _, received = rounds.ragged(jnp.int32(0), plan.serve_seeds, state)
        later_round = rounds.ragged
    else:
        state, received = rounds.first_blocked(state, min_block)
        later_round = functools.partial(rounds.blocked, cap)
    state, received = rounds.later(state, received, later_round)
    keys, start, probability, table_size, valid, *columns = layout.unpack(received)
    mask, timestep = window_steps(start, valid, args.width, args.pad_left)
    return state, ShardedBatch(columns={n: c for (n, _, _), c in zip(specs[0].columns, columns)},
                               mask=mask, timestep=timestep, keys=keys, start=start,
                               probability=probability, table_size=table_size,
                               shard=plan.shard_of_row)


def _own(specs: tuple[ShardSpec, ...], me, call, state: jax.Array):
    """call(state, spec) on this device's own shard: the one spec, or the
    device's of every shard's (a switch on its axis index)."""
    if len(specs) == 1:
        return call(state, specs[0])
    return jax.lax.switch(me, [functools.partial(lambda s, st: call(st, s), s)
                               for s in specs], state)


@dataclasses.dataclass(frozen=True)
class _Plan:
    """What every process knows after the one gather of a global sample:
    every shard's summary, the owner asked for each of this process's rows
    and its rank there, and how many rows each process asks of this shard;
    with the key that seeds this shard's draws for each requester."""

    summaries: jax.Array     # every shard's (ranked: with its share of the best)
    counts: jax.Array        # [P, P]: rows requester i asks of shard j
    shard_of_row: jax.Array  # [B]: the shard each of this process's rows comes from
    rank: jax.Array          # [B]: that row's rank among those asked of its shard
    asked: jax.Array         # [P]: rows each process asks of this shard
    need: jax.Array          # the largest of counts: what the rounds must carry
    serve_key: jax.Array
    serve_seeds: jax.Array   # [P, 2]: round 0's seed of each requester's draws


def _plan(state: jax.Array, rng_key: jax.Array, specs: tuple[ShardSpec, ...], args: SampleArgs,
          axis_name: str, me) -> tuple[jax.Array, _Plan]:
    """Steps 1 and 2: this shard's summary (and best list, for a ranking
    strategy), one gather of every shard's and of every process's plan seed,
    and every process's plan drawn from it, so that each owner knows what is
    asked of it without a second exchange."""
    strategy, shards = args.strategy, specs[0].shards
    # The same key in every process still gives each its own rows and each
    # owner its own draws: the shard's number is folded in.
    plan_seed = seed_words(jax.random.fold_in(jax.random.fold_in(rng_key, 0), me))
    serve_key = jax.random.fold_in(jax.random.fold_in(rng_key, 1), me)
    # One vectorised op for every requester's seed, not P of them.
    serve_seeds = jax.vmap(lambda j: seed_words(jax.random.fold_in(serve_key, j)))(
        jnp.arange(shards, dtype=jnp.uint32))
    if strategy.ranks:
        per_shard = min(strategy.count, specs[0].capacity)
        state, summary, entries = _own(specs, me, lambda st, s: _ffi.shard_tops_call(
            st, handle=s.handle, strategy=strategy.code, count=strategy.count, shard=s.shard,
            per_shard=per_shard), state)
    else:
        state, summary = _own(specs, me, lambda st, s: _ffi.shard_totals_call(
            st, handle=s.handle, strategy=strategy.code, alpha=strategy.alpha,
            shard=s.shard), state)
        entries = jnp.zeros((0,), jnp.uint32)
    words = _ffi.SUMMARY_WORDS
    gathered = jax.lax.all_gather(jnp.concatenate([summary, plan_seed, entries]), axis_name)
    summaries = gathered[:, :words].reshape(-1)
    if strategy.ranks:
        summaries = _ffi.shard_rank_call(summaries, gathered[:, words + 2:].reshape(-1),
                                         strategy=strategy.code, count=strategy.count)
    shard_of_rows, ranks, counts = _ffi.shard_plan_call(
        gathered[:, words:words + 2], summaries, batch=args.batch_size, shards=shards)
    # Row b of this process is the rank[b]-th row it asked of shard
    # shard_of_row[b] (the plan counts them as it draws: O(B), not the O(B P)
    # of a cumulative sum over a [B, P] one-hot).
    return state, _Plan(summaries, counts, shard_of_rows[me], ranks[me], counts[:, me],
                        counts.max(), serve_key, serve_seeds)


@dataclasses.dataclass(frozen=True)
class _Rounds:
    """Step 3, in rounds: each owner draws what each requester asked of it,
    and one all-to-all per round brings each requester its rows. A round
    carries the ranks offset ... offset + block - 1 of every (requester,
    owner) pair, in blocks of ``block`` rows (or exactly its rows, ragged)."""

    specs: tuple[ShardSpec, ...]
    args: SampleArgs
    axis_name: str
    me: object  # this device's shard: an int, or its traced axis index
    cap: int
    plan: _Plan
    layout: row_words.Layout

    def seeds(self, r: jax.Array) -> jax.Array:
        """Each requester's seed in round r >= 1 (round 0 takes serve_seeds)."""
        key = self.plan.serve_key
        return jax.vmap(lambda j: seed_words(jax.random.fold_in(
            jax.random.fold_in(key, j), r)))(jnp.arange(self.specs[0].shards, dtype=jnp.uint32))

    def serve(self, state: jax.Array, block: int, is_ragged: bool, asked_now: jax.Array,
              seeds: jax.Array):
        """(the state's successor, the owner's rows)."""
        args, strategy = self.args, self.args.strategy

        def call(st, s):
            st, rows = _ffi.shard_serve_call(
                st, seeds, asked_now, self.plan.summaries, handle=s.handle, block=block,
                strategy=strategy.code, alpha=strategy.alpha, window=args.window_code,
                width=args.width, pad_left=args.pad_left, shard=s.shard,
                shard_shift=s.shard_shift,
                columns=tuple((shape, dtype) for _, shape, dtype in s.columns),
                ragged=is_ragged)
            return st, tuple(rows)

        return _own(self.specs, self.me, call, state)

    def blocked(self, block: int, offset: jax.Array, seeds: jax.Array, state: jax.Array):
        """(the state's successor, rows taken, the rows' packed parts) of
        the round carrying ranks offset ... offset + block - 1 in blocks of
        ``block`` rows."""
        plan, shards = self.plan, self.specs[0].shards
        state, served = self.serve(state, block, False, round_counts(plan.asked, offset, block),
                                   seeds)
        taken, index = round_index(plan.shard_of_row, plan.rank, offset, block)

        def receive(x: jax.Array) -> jax.Array:
            blocks = x.reshape(shards, block, *x.shape[1:])
            received = jax.lax.all_to_all(blocks, self.axis_name, 0, 0, tiled=False)
            return received.reshape(shards * block, *x.shape[1:])[index]

        return state, taken, tuple(receive(x) for x in self.layout.pack(served))

    def ragged(self, offset: jax.Array, seeds: jax.Array, state: jax.Array):
        """The same by a ragged all-to-all: exactly the round's rows move."""
        plan, batch_size = self.plan, self.args.batch_size
        served_now, sizes, taken, index = ragged_round_plan(
            plan.counts, self.me, offset, self.cap, plan.shard_of_row, plan.rank)

        def receive_ragged(x: jax.Array) -> jax.Array:
            # full_like keeps x's dtype: jnp.zeros(..., int64) is int32 without
            # x64, and a ragged all-to-all from int64 keys into an int32 buffer
            # delivered garbage keys on the GPU (the first GPU run).
            output = jax.lax.full_like(x, 0, shape=(batch_size, *x.shape[1:]))
            return jax.lax.ragged_all_to_all(x, output, *sizes,
                                             axis_name=self.axis_name)[index]

        state, served = self.serve(state, self.cap, True, served_now, seeds)
        return state, taken, tuple(receive_ragged(x) for x in self.layout.pack(served))

    def first_blocked(self, state: jax.Array, min_block):
        """Round 0 in blocks: the smallest block that holds the largest count
        (and min_block), or the cap."""
        sizes = block_sizes(self.args.batch_size, self.specs[0].shards, self.cap)
        wanted = jnp.minimum(jnp.maximum(self.plan.need, jnp.asarray(min_block, jnp.int32)),
                             self.cap)
        branch = jnp.minimum(jnp.searchsorted(jnp.asarray(sizes, jnp.int32), wanted),
                             len(sizes) - 1)
        state, _, received = jax.lax.switch(
            branch, [functools.partial(self.blocked, b, jnp.int32(0), self.plan.serve_seeds)
                     for b in sizes], state)
        return state, received

    def later(self, state: jax.Array, received, later_round):
        """Rounds 1 ...: only plans whose largest pair count is above the cap;
        each round's rows replace the rows it took."""
        def next_round(r, carry):
            state, rows = carry
            state, taken, new = later_round(r * self.cap, self.seeds(r), state)
            return state, tuple(jnp.where(taken.reshape(-1, *(1,) * (n.ndim - 1)), n, old)
                                for n, old in zip(new, rows))

        return jax.lax.fori_loop(1, rounds_needed(self.plan.need, self.cap),
                                 next_round, (state, received))


def update_priorities(state: jax.Array, keys: jax.Array, priorities: jax.Array, *,
                      spec: ShardSpec, axis_name: str) -> tuple[jax.Array, jax.Array]:
    """Routed priority updates, traced inside shard_map over ``axis_name``:
    every process's entries reach every owner, which applies those of its
    shard, in process order (a key set by two processes takes the value of the
    later process). Returns the successor of the table state ``state`` and
    the number of entries applied over all processes (an int32 scalar)."""
    all_keys = jax.lax.all_gather(keys, axis_name).reshape(-1)
    all_priorities = jax.lax.all_gather(priorities, axis_name).reshape(-1)
    local = _ffi.shard_keys_call(all_keys, shard=spec.shard, shard_shift=spec.shard_shift,
                                 to_local=True)
    state, updated = _ffi.update_priorities_call(state, local, all_priorities,
                                                 handle=spec.handle)
    return state, jax.lax.psum(updated, axis_name)


def update_step_priorities(state: jax.Array, keys: jax.Array, steps: jax.Array,
                           priorities: jax.Array, *, spec: ShardSpec,
                           axis_name: str) -> tuple[jax.Array, jax.Array]:
    """Routed step priority updates, as update_priorities routes a
    trajectory's: keys [B], steps and priorities [B, W] of every process
    reach every owner, which sets the named steps of its own keys' windows (a
    step below 0 is padding)."""
    width = steps.shape[1]
    all_keys = jax.lax.all_gather(keys, axis_name).reshape(-1)
    all_steps = jax.lax.all_gather(steps, axis_name).reshape(-1, width)
    all_priorities = jax.lax.all_gather(priorities, axis_name).reshape(-1, width)
    local = _ffi.shard_keys_call(all_keys, shard=spec.shard, shard_shift=spec.shard_shift,
                                 to_local=True)
    state, updated = _ffi.update_step_priorities_call(state, local, all_steps, all_priorities,
                                                      handle=spec.handle)
    return state, jax.lax.psum(updated, axis_name)


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
def _eager_sample_program(spec: ShardSpec, args: SampleArgs):
    def body(seed):
        # Eager: a fresh state, as an eager Table call takes (gearjax/_call_forms.py).
        _, batch = sample(state_module.initial(), seed[0], spec=spec, args=args,
                          axis_name=AXIS)
        return batch

    return jax.jit(jax.shard_map(body, mesh=process_mesh(), in_specs=P(AXIS), out_specs=P(AXIS)))


def eager_sample(rng_key: jax.Array, *, spec: ShardSpec, args: SampleArgs) -> ShardedBatch:
    """A global sample called eagerly: runs the collective program that every
    process runs at the same call (in the same order), and returns this
    process's rows as arrays on its own device."""
    seed = np.asarray(seed_words(rng_key), dtype=np.uint32)
    program = _eager_sample_program(spec, args)
    return jax.tree.map(_local_block, program(_global_rows(seed)))


def _gather_update_shapes(entries: int, width: int, has_steps: bool,
                          refused: bool) -> np.ndarray:
    """The first gather of an eager update: every process's [entries, W,
    steps given, arguments refused]. Where another process's arguments were
    refused, raises ValueError before anything is applied (that process
    raises its own error after this gather)."""
    from jax.experimental import multihost_utils

    shape = np.asarray(multihost_utils.process_allgather(
        np.array([entries, width, has_steps, refused], np.int32))).reshape(-1, 4)
    refusing = np.flatnonzero(shape[:, 3])
    if refusing.size and not refused:
        raise ValueError(f"process(es) {refusing.tolist()} refused their own arguments to this "
                         f"update_priorities call, or the state they were given (its program "
                         f"failed; each raised why); nothing was changed on any shard")
    return shape


def eager_update_refused() -> None:
    """Joins an eager update's first gather for a process whose arguments
    were refused, so that the others raise rather than wait for it."""
    _gather_update_shapes(0, 0, False, refused=True)


def eager_update_priorities(keys: np.ndarray, priorities: np.ndarray, table,
                            steps: np.ndarray | None = None) -> int:
    """Routed priority updates called eagerly: every process runs it at the
    same call, in the same order, with any number of entries. The entries of
    every process are gathered on the host (as uint32 words: JAX without x64
    would narrow int64 keys, steps and float64 priorities), and each owner
    applies those of its shard to its local :class:`gearjax.Table` (``table``
    is the ShardedTable), in process order. With ``steps`` (``[B, W]``, like
    ``priorities``; every process's ``W`` the same, else ``ValueError`` in
    every process) the named steps' priorities. Returns the number of entries
    applied over all processes."""
    from jax.experimental import multihost_utils

    spec: ShardSpec = table.spec
    width = 1 if steps is None else steps.shape[1]
    shape = _gather_update_shapes(keys.shape[0], width, steps is not None, refused=False)
    if (shape[:, 2] != (steps is not None)).any():
        raise ValueError(f"every process passes steps= or none does; processes "
                         f"{np.flatnonzero(shape[:, 2]).tolist()} passed steps")
    if (shape[:, 1] != width).any():
        raise ValueError(f"every process passes steps of one width W (priorities and steps "
                         f"[B, W]); the processes passed W = {shape[:, 1].tolist()}")
    count = max(int(shape[:, 0].max()), 1)
    # A row: the key, then W priorities, then (with steps) W steps; 2 words each.
    fields = [keys.astype(np.int64)[:, None],
              priorities.astype(np.float64).reshape(keys.shape[0], width)]
    if steps is not None:
        fields.append(steps.astype(np.int64))
    rows = np.zeros((count, sum(f.shape[1] for f in fields) * 2), np.uint32)
    rows[:keys.shape[0]] = np.concatenate([f.view(np.uint32) for f in fields], axis=1)
    gathered = np.asarray(multihost_utils.process_allgather(rows)).reshape(-1, count,
                                                                           rows.shape[1])
    every_row = np.concatenate([np.ascontiguousarray(gathered[p, :n]) for p, n in
                                enumerate(shape[:, 0])])  # every process's, in process order
    all_keys = every_row[:, :2].copy().view(np.int64).reshape(-1)
    all_priorities = every_row[:, 2:2 + 2 * width].copy().view(np.float64)
    owned = keys_of.owners(all_keys, spec.shard_shift) == spec.shard
    local_keys = keys_of.local_keys(all_keys[owned], spec.shard_shift)
    if steps is None:
        updated = table.local.update_priorities(local_keys, all_priorities[owned].reshape(-1))
    else:
        # Only the owner knows its trajectories' lengths: one that refuses a
        # step still joins the gather below, so every process raises and
        # none waits for it.
        all_steps = every_row[:, 2 + 2 * width:].copy().view(np.int64)
        try:
            updated = table.local.update_priorities(local_keys, all_priorities[owned],
                                                    steps=all_steps[owned])
        except ValueError:
            updated = -1
    results = np.asarray(multihost_utils.process_allgather(np.array([updated], np.int32)))
    refused = np.flatnonzero(results.reshape(-1) < 0)
    if refused.size:
        raise ValueError(f"shard(s) {refused.tolist()} refused their entries (a step past its "
                         f"trajectory's length; nothing changed there, the other shards "
                         f"applied theirs)")
    return int(results.sum())
