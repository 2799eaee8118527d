"""The XLA FFI custom calls behind sample, update_priorities and insert_batch,
as JAX primitives with one *ordered effect*.

Why an ordered effect: a custom call marked only as a side effect may still be
reordered against other side effects, and one that is not marked at all may be
dropped or merged with an identical call. An ordered effect makes JAX thread a
token through every gearjax call of a program, through ``scan``, ``while``,
``fori_loop`` and ``cond`` bodies (in their carries), and from one dispatched
program to the next (its runtime tokens, per Python thread). Each call takes
the token as its first operand and returns the next one as its first result,
so every call written in a program runs exactly once each time its part of the
program runs, in program order. The tokens carry no data.

JAX has no public API for ordered effects of custom primitives (only
``io_callback`` and ``debug.callback`` use them), so this module registers one
through ``jax._src.effects``, as those do; ``tests/test_effects.py`` checks the
behaviour on the JAX version installed.

``sample(ordered=False)`` is the opt-in exception: a plain ``jax.ffi.ffi_call``
without an effect, which XLA may drop, merge or reorder, and which keeps JAX's
C++ fast dispatch path.

Attribute types are normalised here, in one place: XLA FFI bindings need exact
types (int64, float64) and calls are cached by attribute value.
"""

from __future__ import annotations

import functools

import jax
import numpy as np
from jax._src import core as jax_core
from jax._src import dispatch, effects
from jax.extend import core
from jax.interpreters import ad, batching, mlir

from gearjax import _gearjax

SAMPLE_TARGET = "gearjax_sample"
SAMPLE_PURE_TARGET = "gearjax_sample_pure"
UPDATE_PRIORITIES_TARGET = "gearjax_update_priorities"
INSERT_BATCH_TARGET = "gearjax_insert_batch"


class TableEffect(core.Effect):
    """The ordered effect of every gearjax table call."""

    def __str__(self) -> str:
        return ("gearjax table effect (a sample, priority update or insert_batch is never run "
                "twice: inside jax.checkpoint/remat a differentiated program would rematerialise "
                "it and run it again, so call it outside the checkpointed function)")

    __repr__ = __str__


TABLE_EFFECT = TableEffect()
effects.lowerable_effects.add_type(TableEffect)
effects.control_flow_allowed_effects.add_type(TableEffect)
effects.ordered_effects.add_type(TableEffect)
# Programs over several local devices (shard_map, data parallel learners) keep
# one token per device; each device's calls stay in program order.
effects.shardable_ordered_effects.add_type(TableEffect)
# Deliberately not in effects.remat_allowed_effects: jax.checkpoint under
# differentiation raises, naming this effect (see TableEffect.__str__).


def clear_failed_token() -> bool:
    """Drops the table effect's token on this thread if the program that made it
    failed; returns whether it did.

    JAX threads an ordered effect's token from each dispatched program into the
    next; when a program fails (a rate-limiter timeout, a bad priority inside
    jit, a closed table), its token carries the error, and JAX fails every later
    program with table calls on the same thread with that error, without
    running it (JAX issue #37587). Dropping the token makes JAX start a fresh
    one. Only a finished, failed token is dropped: one still in flight is kept,
    so program order is never given up.
    """
    tokens = dispatch.runtime_tokens.current_tokens
    token = tokens.get(TABLE_EFFECT)
    if token is None or not token._buf.is_ready():
        return False
    try:
        token._buf.block_until_ready()
        return False
    except Exception:  # noqa: BLE001 - whatever error the failed program raised
        del tokens[TABLE_EFFECT]
    # effects_barrier() waits on the last program's runtime tokens: forget the
    # failed ones too, so it does not raise the old error again.
    runtime = dispatch.runtime_tokens.output_runtime_tokens
    for device, runtime_token in list(runtime.items()):
        try:
            runtime_token.block_until_ready()
        except Exception:  # noqa: BLE001
            del runtime[device]
    return True


def wait_for_dispatched_calls() -> None:
    """Blocks until the table calls of programs this thread has dispatched have
    run (JAX dispatches asynchronously). A failed program's error is not raised
    here: it belongs to that program's results."""
    token = dispatch.runtime_tokens.current_tokens.get(TABLE_EFFECT)
    if token is not None:
        try:
            token._buf.block_until_ready()
        except Exception:  # noqa: BLE001 - raised by the failed program's results
            pass
    clear_failed_token()


def _register() -> None:
    for name, capsule in _gearjax.ffi_targets().items():
        jax.ffi.register_ffi_target(name, capsule, platform="cpu")
    if _gearjax.cuda_built:  # harmless where there is no GPU
        for name, capsule in _gearjax.cuda_ffi_targets().items():
            jax.ffi.register_ffi_target(name, capsule, platform="CUDA")


_register()


def _primitive(name: str) -> core.Primitive:
    primitive = core.Primitive(name)
    primitive.multiple_results = True
    primitive.def_impl(functools.partial(dispatch.apply_primitive, primitive))
    return primitive


def _ordered_lowering(target: str, not_attributes: tuple[str, ...] = ()):
    """Lowers a primitive to the custom call `target`, threading the effect's
    token through it (first operand, first result). Every parameter but those
    in `not_attributes` becomes an attribute of the call."""

    # Not marked has_side_effect: the token already keeps the call (its token
    # result is always used, by the next call or as the program's output),
    # keeps it from being merged (no two calls take the same token) and orders
    # it. The mark would add nothing but cost: XLA's CPU runtime runs marked
    # calls off its fast path (measured: about 5 us more per call in a scan).
    def lowering(ctx, *operands, **params):
        attributes = {k: v for k, v in params.items() if k not in not_attributes}
        token = ctx.tokens_in.get(TABLE_EFFECT)
        call_ctx = ctx.replace(avals_in=[jax_core.abstract_token, *ctx.avals_in],
                               avals_out=[jax_core.abstract_token, *ctx.avals_out])
        token_out, *results = jax.ffi.ffi_lowering(target, has_side_effect=False)(
            call_ctx, token, *operands, **attributes)
        ctx.set_tokens_out(mlir.TokenSet({TABLE_EFFECT: token_out}))
        return results

    return lowering


def _not_differentiable(primitive: core.Primitive):
    """Table calls read or write the table, not their inputs' derivatives: the
    results get zero tangents and the call itself runs once, on the primals."""

    def jvp(primals, tangents, **params):
        del tangents
        results = primitive.bind(*primals, **params)
        return results, [ad.Zero(jax.typeof(r).to_tangent_aval()) for r in results]

    ad.primitive_jvps[primitive] = jvp


def _sequential_batching(primitive: core.Primitive):
    """vmap: one call per mapped element, one after another (a lax.map, whose
    loop carries the effect's token), each with its own operands."""

    def rule(args, dims, **params):
        size = next(a.shape[d] for a, d in zip(args, dims) if d is not None)
        args = [batching.bdim_at_front(a, d, size) for a, d in zip(args, dims)]
        results = jax.lax.map(lambda xs: primitive.bind(*xs, **params), args)
        return results, [0] * len(results)

    batching.primitive_batchers[primitive] = rule


# ---------------------------------------------------------------- sample
sample_p = _primitive("gearjax_sample")
mlir.register_lowering(sample_p, _ordered_lowering(SAMPLE_TARGET, ("width", "columns")))
_not_differentiable(sample_p)
_sequential_batching(sample_p)

Columns = tuple[tuple[tuple[int, ...], np.dtype], ...]


def _sample_result_types(batch: int, width: int, columns: Columns) -> list[jax.ShapeDtypeStruct]:
    return [
        jax.ShapeDtypeStruct((batch,), np.int64),
        jax.ShapeDtypeStruct((batch,), np.int32),
        jax.ShapeDtypeStruct((batch,), np.float32),
        jax.ShapeDtypeStruct((batch,), np.int64),
        jax.ShapeDtypeStruct((batch,), np.int32),
    ] + [jax.ShapeDtypeStruct((batch, width, *shape), dtype) for shape, dtype in columns]


@sample_p.def_effectful_abstract_eval
def _sample_abstract_eval(seed, *, batch_size, width, columns, **_):
    del seed
    avals = [jax.core.ShapedArray(r.shape, r.dtype)
             for r in _sample_result_types(batch_size, width, columns)]
    return avals, {TABLE_EFFECT}


def sample_call(seed: jax.Array, *, handle: int, batch: int, strategy: int, alpha: float,
                count: int, window: int, width: int, pad_left: bool, columns: Columns,
                cut: int = 0, replace: bool = True, ordered: bool = True) -> list[jax.Array]:
    """Samples ``batch`` rows determined by ``seed`` (uint32[2]); returns (keys,
    start, probability, table_size, valid, *columns), where ``valid`` counts
    each row's real steps (the caller derives mask and timesteps from it, in
    XLA, where they fuse into their users or vanish unused). ``window=0``
    asks for whole trajectories of ``width`` (= max_length) steps. Every
    argument was checked by the caller (gearjax/_checks.py)."""
    attributes = dict(table_handle=np.int64(handle), batch_size=np.int64(batch),
                      strategy=np.int64(strategy), alpha=np.float64(alpha),
                      count=np.int64(count), window=np.int64(window),
                      pad_left=np.int64(pad_left), cut=np.int64(cut),
                      replace=np.int64(replace))
    if not ordered:
        call = jax.ffi.ffi_call(SAMPLE_PURE_TARGET, _sample_result_types(batch, width, columns),
                                has_side_effect=False, vmap_method="sequential")
        return call(seed, **attributes)
    return sample_p.bind(seed, width=width, columns=columns, **attributes)


# -------------------------------------------------------- update_priorities
update_priorities_p = _primitive("gearjax_update_priorities")
mlir.register_lowering(update_priorities_p, _ordered_lowering(UPDATE_PRIORITIES_TARGET))
_not_differentiable(update_priorities_p)
_sequential_batching(update_priorities_p)


@update_priorities_p.def_effectful_abstract_eval
def _update_priorities_abstract_eval(keys, priorities, **_):
    del keys, priorities
    return [jax.core.ShapedArray((), np.int32)], {TABLE_EFFECT}


def update_priorities_call(keys: jax.Array, priorities: jax.Array, *, handle: int) -> jax.Array:
    """Sets priorities from inside traced code; returns how many keys were live
    (an int32 scalar). The caller has checked the dtypes (int32, uint32 or
    int64 keys; float32 or float64 priorities) and shapes."""
    return update_priorities_p.bind(keys, priorities, table_handle=np.int64(handle))[0]


# ------------------------------------------------------------- insert_batch
insert_batch_p = _primitive("gearjax_insert_batch")
mlir.register_lowering(insert_batch_p, _ordered_lowering(INSERT_BATCH_TARGET))
_not_differentiable(insert_batch_p)
_sequential_batching(insert_batch_p)


@insert_batch_p.def_effectful_abstract_eval
def _insert_batch_abstract_eval(lengths, priorities, *columns, rows, **_):
    del lengths, priorities, columns
    return [jax.core.ShapedArray((int(rows),), np.int64)], {TABLE_EFFECT}


def insert_batch_call(columns: list[jax.Array], lengths: jax.Array, priorities: jax.Array, *,
                      handle: int) -> jax.Array:
    """Inserts trajectories given as padded [N, T, ...] arrays from inside
    traced code; returns their keys (int64 [N]). The caller has checked the
    dtypes and shapes."""
    rows, steps = columns[0].shape[:2]
    return insert_batch_p.bind(lengths, priorities, *columns, table_handle=np.int64(handle),
                               rows=np.int64(rows), steps=np.int64(steps))[0]


# ------------------------------------------------- sharded tables (gearjax.sharded)
# The three steps of a global sample (xla_ffi/core/sharding.h): this shard's
# summary (a table effect), the shard of each row (pure: it reads no table),
# and the owner's draws for every requester (a table effect).
SHARD_TOTALS_TARGET = "gearjax_shard_totals"
SHARD_PLAN_TARGET = "gearjax_shard_plan"
SHARD_SERVE_TARGET = "gearjax_shard_serve"
SHARD_KEYS_TARGET = "gearjax_shard_keys"
SHARD_TOPS_TARGET = "gearjax_shard_tops"
SHARD_RANK_TARGET = "gearjax_shard_rank"
SUMMARY_WORDS = 8  # a shard's summary: four float64 as uint32 words

shard_totals_p = _primitive("gearjax_shard_totals")
mlir.register_lowering(shard_totals_p, _ordered_lowering(SHARD_TOTALS_TARGET))
_not_differentiable(shard_totals_p)
_sequential_batching(shard_totals_p)


@shard_totals_p.def_effectful_abstract_eval
def _shard_totals_abstract_eval(**_):
    return [jax.core.ShapedArray((SUMMARY_WORDS,), np.uint32)], {TABLE_EFFECT}


def shard_totals_call(*, handle: int, strategy: int, alpha: float, shard: int) -> jax.Array:
    """This shard's summary for the strategy: uint32[SUMMARY_WORDS]."""
    return shard_totals_p.bind(table_handle=np.int64(handle), strategy=np.int64(strategy),
                               alpha=np.float64(alpha), shard=np.int64(shard))[0]


ENTRY_WORDS = 4  # an entry of a shard's best list (TopK, Recent): float64 and int64 as words

shard_tops_p = _primitive("gearjax_shard_tops")
mlir.register_lowering(shard_tops_p, _ordered_lowering(SHARD_TOPS_TARGET, ("per_shard",)))
_not_differentiable(shard_tops_p)
_sequential_batching(shard_tops_p)


@shard_tops_p.def_effectful_abstract_eval
def _shard_tops_abstract_eval(*, per_shard, **_):
    return [jax.core.ShapedArray((SUMMARY_WORDS,), np.uint32),
            jax.core.ShapedArray((int(per_shard) * ENTRY_WORDS,), np.uint32)], {TABLE_EFFECT}


def shard_tops_call(*, handle: int, strategy: int, count: int, shard: int,
                    per_shard: int) -> tuple[jax.Array, jax.Array]:
    """For TopK(count) or Recent(count): this shard's summary (uint32
    [SUMMARY_WORDS]) and its best list of ``per_shard`` = min(count, capacity)
    entries (uint32 [per_shard * ENTRY_WORDS]), read in one snapshot."""
    summary, entries = shard_tops_p.bind(table_handle=np.int64(handle),
                                         strategy=np.int64(strategy), count=np.int64(count),
                                         shard=np.int64(shard), per_shard=per_shard)
    return summary, entries


def shard_rank_call(summaries: jax.Array, entries: jax.Array, *, strategy: int,
                    count: int) -> jax.Array:
    """The gathered summaries with each shard's weight replaced by its share of
    the global best ``count`` (uint32 [shards * SUMMARY_WORDS]), from the
    gathered best lists (uint32 [shards * per_shard * ENTRY_WORDS])."""
    call = jax.ffi.ffi_call(SHARD_RANK_TARGET, jax.ShapeDtypeStruct(summaries.shape, np.uint32),
                            vmap_method="sequential")
    return call(summaries, entries, strategy=np.int64(strategy), count=np.int64(count))


def shard_plan_call(seeds: jax.Array, summaries: jax.Array, *, batch: int,
                    shards: int) -> tuple[jax.Array, jax.Array]:
    """For each requester j (seeds uint32 [R, 2]): the shard of each of its
    ``batch`` rows (int32 [R, batch]) and its rows per shard (int32 [R,
    shards]), drawn in proportion to the gathered summaries' weights (uint32
    [shards * SUMMARY_WORDS])."""
    requesters = seeds.shape[0]
    call = jax.ffi.ffi_call(SHARD_PLAN_TARGET,
                            (jax.ShapeDtypeStruct((requesters, batch), np.int32),
                             jax.ShapeDtypeStruct((requesters, shards), np.int32)),
                            vmap_method="sequential")
    return call(seeds, summaries)


shard_serve_p = _primitive("gearjax_shard_serve")
mlir.register_lowering(shard_serve_p, _ordered_lowering(SHARD_SERVE_TARGET, ("width", "columns")))
_not_differentiable(shard_serve_p)
_sequential_batching(shard_serve_p)


@shard_serve_p.def_effectful_abstract_eval
def _shard_serve_abstract_eval(seeds, counts, summaries, *, block, width, columns, **_):
    del seeds, summaries
    rows = counts.shape[0] * int(block)
    return [jax.core.ShapedArray(r.shape, r.dtype)
            for r in _sample_result_types(rows, width, columns)], {TABLE_EFFECT}


def shard_serve_call(seeds: jax.Array, counts: jax.Array, summaries: jax.Array, *, handle: int,
                     block: int, strategy: int, alpha: float, window: int, width: int,
                     pad_left: bool, shard: int, shard_shift: int,
                     columns: Columns) -> list[jax.Array]:
    """The owner's draws: for requester j, counts[j] rows with seeds[j] in block
    j of ``block`` rows (the rest padding); returns (keys, start, probability,
    table_size, valid, *columns) over shards * block rows, keys, sizes and
    probabilities global."""
    return shard_serve_p.bind(seeds, counts, summaries, table_handle=np.int64(handle),
                              block=np.int64(block), strategy=np.int64(strategy),
                              alpha=np.float64(alpha), window=np.int64(window),
                              pad_left=np.int64(pad_left), shard=np.int64(shard),
                              shard_shift=np.int64(shard_shift), width=width, columns=columns)


def shard_keys_call(keys: jax.Array, *, shard: int, shard_shift: int,
                    to_local: bool) -> jax.Array:
    """Global keys of ``shard`` to its own keys (others -1), or the reverse."""
    call = jax.ffi.ffi_call(SHARD_KEYS_TARGET, jax.ShapeDtypeStruct(keys.shape, np.int64),
                            vmap_method="expand_dims")
    return call(keys, shard=np.int64(shard), shard_shift=np.int64(shard_shift),
                to_local=np.int64(to_local))


def int64_array(values: np.ndarray) -> jax.Array:
    """A JAX int64 array of host int64 values, also where JAX without x64 would
    narrow them to int32 (through their uint32 words and a copying custom call
    on the CPU)."""
    values = np.ascontiguousarray(values, np.int64)
    return int64_from_words(values.view(np.uint32).reshape(*values.shape, 2))


def int64_from_words(words: jax.Array) -> jax.Array:
    """int64 [...] from uint32 [..., 2] (little-endian words), in or out of jit."""
    call = jax.ffi.ffi_call("gearjax_int64_from_words",
                            jax.ShapeDtypeStruct(words.shape[:-1], np.int64))
    return call(words)
