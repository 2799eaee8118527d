"""The XLA FFI custom calls behind sample, update_priorities and insert_batch.

Each call is a primitive of gearjax/_primitives.py: the caller passes the
table state (gx.TableState's array) and gets its successor back first; no JAX
effect, JAX's fast dispatch path.

Attribute types are normalised here, in one place: XLA FFI bindings need exact
types (int64, float64) and calls are cached by attribute value.
"""

from __future__ import annotations

import functools
import os

import jax
import numpy as np
from jax.interpreters import mlir
from jax.interpreters import partial_eval as pe

from gearjax import _gearjax
from gearjax._primitives import (keep_when_unused, one_logical_call, threaded_lowering,
                                 threaded_primitive)
from gearjax._window_steps import window_steps

SAMPLE_TARGET = "gearjax_sample"
UPDATE_PRIORITIES_TARGET = "gearjax_update_priorities"
INSERT_BATCH_TARGET = "gearjax_insert_batch"
UPDATE_STEP_PRIORITIES_TARGET = "gearjax_update_step_priorities"
ONE_SIDED_SAMPLE_TARGET = "gearjax_one_sided_sample"


def _stages_wanted() -> bool:
    """Whether GEARJAX_FFI_STAGES (default "1") asks for the staged targets."""
    value = os.environ.get("GEARJAX_FFI_STAGES", "1")
    if value not in ("0", "1"):
        raise ValueError(f"GEARJAX_FFI_STAGES must be 0 or 1, got {value!r}")
    return value == "1"


def _cpu_types_register_at_once() -> bool:
    """Lets a CPU state type register before the CPU backend starts; returns
    whether it can.

    jax 0.10's CPU client, when it starts, registers the targets waiting for
    it before the types waiting for it, and refuses a target whose handler
    names a type not yet registered: a staged target registered before the
    backend started would make every CPU computation fail to start ("Types
    used by FFI handlers must be registered before the handler
    registration"). Installing the type handler the CPU client installs
    anyway registers types at once; where this JAX has no such handler, the
    CPU targets are registered per call instead. (The CUDA plugin installs
    its type handler first.)
    """
    from jax._src.lib import xla_client

    register = getattr(getattr(xla_client, "_xla", None), "register_custom_type", None)
    handler_installer = getattr(xla_client, "register_custom_type_handler", None)
    if register is None or handler_installer is None:
        return False
    handler_installer("cpu", register)  # a no-op where the CPU client installed it
    return True


def _register() -> dict[str, bool]:
    """Registers the targets per platform, staged where it can (see
    STAGED); returns which platforms got staged targets."""
    wanted = _stages_wanted()
    staged = {"cpu": wanted and _cpu_types_register_at_once(), "CUDA": False}
    if staged["cpu"]:
        try:
            for name, registration in _gearjax.ffi_types().items():
                jax.ffi.register_ffi_type(name, registration, platform="cpu")
        except Exception:  # noqa: BLE001 - a JAX whose type registration differs
            staged["cpu"] = False  # per-call targets need no type
    for name, target in _gearjax.ffi_targets(staged["cpu"]).items():
        jax.ffi.register_ffi_target(name, target, platform="cpu")
    if _gearjax.cuda_built:  # harmless where there is no GPU
        staged["CUDA"] = wanted
        if wanted:
            try:
                for name, registration in _gearjax.cuda_ffi_types().items():
                    jax.ffi.register_ffi_type(name, registration, platform="CUDA")
            except Exception:  # noqa: BLE001 - as for the CPU above
                staged["CUDA"] = False
        for name, target in _gearjax.cuda_ffi_targets(staged["CUDA"]).items():
            jax.ffi.register_ffi_target(name, target, platform="CUDA")
    return staged


#: Per platform ("cpu", "CUDA"), whether sample and update_priorities are
#: registered with XLA FFI execution stages: an instantiate stage resolves the
#: table, decodes the attributes and checks the request once per call site of
#: a compiled program, and each execution only selects and gathers
#: (xla_ffi/ffi/call_site.h). GEARJAX_FFI_STAGES=0 registers them per call
#: instead (each call looks its table up and checks its attributes); results
#: and errors are the same either way.
STAGED: dict[str, bool] = _register()


def _avals(types: list[jax.ShapeDtypeStruct]) -> list[jax.core.ShapedArray]:
    return [jax.core.ShapedArray(t.shape, t.dtype) for t in types]


# ---------------------------------------------------------------- sample
Columns = tuple[tuple[tuple[int, ...], np.dtype], ...]


def sample_result_types(batch: int, width: int, columns: Columns,
                        steps: bool = False) -> list[jax.ShapeDtypeStruct]:
    """keys, start, probability, table_size, valid, (mask and timestep, with
    ``steps``), then the columns."""
    window = [jax.ShapeDtypeStruct((batch, width), np.bool_),
              jax.ShapeDtypeStruct((batch, width), np.int32)] if steps else []
    return [
        jax.ShapeDtypeStruct((batch,), np.int64),
        jax.ShapeDtypeStruct((batch,), np.int32),
        jax.ShapeDtypeStruct((batch,), np.float32),
        jax.ShapeDtypeStruct((batch,), np.int64),
        jax.ShapeDtypeStruct((batch,), np.int32),
        *window,
    ] + [jax.ShapeDtypeStruct((batch, width, *shape), dtype) for shape, dtype in columns]


def _sample_avals(seed, *, batch_size, width, columns, steps=True, **_):
    del seed
    return _avals(sample_result_types(int(batch_size), width, columns, steps=steps))


# sample_p's parameters that are not attributes of its custom call.
_NOT_ATTRIBUTES = ("width", "columns", "steps")
sample_p = threaded_primitive("gearjax_sample", SAMPLE_TARGET, _sample_avals, _NOT_ATTRIBUTES)

# Where mask and timestep are among sample_p's results (after the state).
_MASK, _TIMESTEP = 6, 7


def _sample_dce(used_outputs: list[bool], *live_ins_and_eqn):
    """DCE rule: the call stays, as every table call does; a call none of
    whose mask and timestep is read loses them (``steps=False``), so the CPU
    handler does not write them (a lax.scan body that reads only the
    columns, say)."""
    used_inputs, eqn = keep_when_unused(used_outputs, *live_ins_and_eqn)
    if eqn.params.get("steps", True) and not (used_outputs[_MASK] or used_outputs[_TIMESTEP]):
        outvars = eqn.outvars[:_MASK] + eqn.outvars[_TIMESTEP + 1:]
        eqn = eqn.replace(outvars=outvars, params={**eqn.params, "steps": False})
    return used_inputs, eqn


pe.dce_rules[sample_p] = _sample_dce


_SAMPLE_CALL = threaded_lowering(SAMPLE_TARGET, _NOT_ATTRIBUTES)


def _sample_lowering_steps_in_xla(ctx, state, seed, *, width, steps=True, **params):
    """sample_p on a GPU: the CUDA handler returns no mask or timestep, XLA
    derives them from start and valid (gearjax/_window_steps.py says why the
    CPU handler writes them instead), where the program reads them."""
    if not steps:
        return _SAMPLE_CALL(ctx, state, seed, width=width, **params)
    avals = list(ctx.avals_out)  # state, keys, start, probability, table_size, valid,
    #                              mask, timestep, *columns
    results = list(_SAMPLE_CALL(ctx.replace(avals_out=avals[:_MASK] + avals[_TIMESTEP + 1:]),
                                state, seed, width=width, **params))
    derive = mlir.lower_fun(
        functools.partial(window_steps, width=width, pad_left=bool(params["pad_left"])),
        multiple_results=True)
    mask, timestep = derive(ctx.replace(avals_in=[avals[2], avals[5]], avals_out=avals[6:8]),
                            results[2], results[5])
    return results[:6] + [mask, timestep] + results[6:]


def register_sample_lowering_for_cuda() -> None:
    """Lowers sample_p for CUDA with mask and timestep derived in XLA (done
    at import; gearjax/_cuda.py replaces it with a refusal in a build
    without CUDA handlers)."""
    mlir.register_lowering(sample_p, one_logical_call(sample_p, _sample_lowering_steps_in_xla),
                           platform="cuda")


register_sample_lowering_for_cuda()


def sample_call(state: jax.Array, seed: jax.Array, *, handle: int, batch: int, strategy: int,
                alpha: float, count: int, window: int, width: int, pad_left: bool,
                columns: Columns, cut: int = 0, replace: bool = True
                ) -> tuple[jax.Array, list[jax.Array]]:
    """Samples ``batch`` rows determined by ``seed`` (uint32[2]); returns the
    successor of ``state`` and (keys, start, probability, table_size, valid,
    mask, timestep, *columns), where ``valid`` counts each row's real steps
    and mask and timestep are [batch, width] (the CPU handler writes them; on
    a GPU, XLA derives them: gearjax/_window_steps.py). ``window=0`` asks for
    whole trajectories of ``width`` (= max_length) steps. Every argument was
    checked by the caller (gearjax/_checks.py)."""
    attributes = dict(table_handle=np.int64(handle), batch_size=np.int64(batch),
                      strategy=np.int64(strategy), alpha=np.float64(alpha),
                      count=np.int64(count), window=np.int64(window),
                      pad_left=np.int64(pad_left), cut=np.int64(cut),
                      replace=np.int64(replace))
    state, *results = sample_p.bind(state, seed, width=width, columns=columns, **attributes)
    return state, results


# ------------------------------------------------ one-sided sharded sample
def _one_sided_avals(seed, *, batch, width, columns, **_):
    del seed
    return _avals(sample_result_types(int(batch), width, columns)[:4] + [
        jax.ShapeDtypeStruct((int(batch),), np.int32),
        jax.ShapeDtypeStruct((int(batch),), np.int32),
    ] + sample_result_types(int(batch), width, columns)[5:])


one_sided_sample_p = threaded_primitive("gearjax_one_sided_sample", ONE_SIDED_SAMPLE_TARGET,
                                        _one_sided_avals, ("batch", "width", "columns"))


def one_sided_sample_call(state: jax.Array, seed: jax.Array, *, plan: int, batch: int,
                          width: int, columns: Columns) -> tuple[jax.Array, list[jax.Array]]:
    """A sharded table's one-sided sample inside a program: the registered
    plan (xla_ffi/core/one_sided/one_sided_plan.h) run with ``seed`` (uint32[2]);
    returns the successor of ``state`` and (keys, start, probability,
    table_size, valid, shard, *columns)."""
    state, *results = one_sided_sample_p.bind(state, seed, plan_handle=np.int64(plan),
                                              batch=int(batch), width=int(width),
                                              columns=columns)
    return state, results


# -------------------------------------------------------- update_priorities
def _update_priorities_avals(keys, priorities, **_):
    del keys, priorities
    return [jax.core.ShapedArray((), np.int32)]


update_priorities_p = threaded_primitive("gearjax_update_priorities", UPDATE_PRIORITIES_TARGET,
                                         _update_priorities_avals)


def update_priorities_call(state: jax.Array, keys: jax.Array, priorities: jax.Array, *,
                           handle: int) -> tuple[jax.Array, jax.Array]:
    """Sets priorities from inside traced code; returns the successor of
    ``state`` and how many keys were live (an int32 scalar). The caller has
    checked the dtypes (int32, uint32 or int64 keys; float32 or float64
    priorities) and shapes."""
    state, count = update_priorities_p.bind(state, keys, priorities,
                                            table_handle=np.int64(handle))
    return state, count


update_step_priorities_p = threaded_primitive(
    "gearjax_update_step_priorities", UPDATE_STEP_PRIORITIES_TARGET,
    lambda keys, steps, priorities, **_: [jax.core.ShapedArray((), np.int32)])


def update_step_priorities_call(state: jax.Array, keys: jax.Array, steps: jax.Array,
                                priorities: jax.Array, *,
                                handle: int) -> tuple[jax.Array, jax.Array]:
    """Sets step priorities from inside traced code (keys [B]; steps and
    priorities [B, W]; steps < 0 skipped); returns the successor of ``state``
    and how many keys were live. The caller has checked dtypes and shapes."""
    state, count = update_step_priorities_p.bind(state, keys, steps, priorities,
                                                 table_handle=np.int64(handle))
    return state, count


# ------------------------------------------------------------- insert_batch
def _insert_batch_avals(lengths, priorities, *columns, rows, **_):
    del lengths, priorities, columns
    return [jax.core.ShapedArray((int(rows),), np.int64)]


insert_batch_p = threaded_primitive("gearjax_insert_batch", INSERT_BATCH_TARGET,
                                    _insert_batch_avals)


def insert_batch_call(state: jax.Array, columns: list[jax.Array], lengths: jax.Array,
                      priorities: jax.Array, *, handle: int) -> tuple[jax.Array, jax.Array]:
    """Inserts trajectories given as padded [N, T, ...] arrays from inside
    traced code; returns the successor of ``state`` and their keys (int64
    [N]). The caller has checked the dtypes and shapes."""
    rows, steps = columns[0].shape[:2]
    state, keys = insert_batch_p.bind(state, lengths, priorities, *columns,
                                      table_handle=np.int64(handle), rows=np.int64(rows),
                                      steps=np.int64(steps))
    return state, keys


# ------------------------------------------------- sharded tables (gearjax.sharded)
# The three steps of a global sample (xla_ffi/core/sharding/sharding.h): this shard's
# summary (a table call, threading the state), the shard of each row (pure:
# it reads no table), and the owner's draws for every requester (a table call).
SHARD_TOTALS_TARGET = "gearjax_shard_totals"
SHARD_PLAN_TARGET = "gearjax_shard_plan"
SHARD_SERVE_TARGET = "gearjax_shard_serve"
SHARD_KEYS_TARGET = "gearjax_shard_keys"
SHARD_TOPS_TARGET = "gearjax_shard_tops"
SHARD_RANK_TARGET = "gearjax_shard_rank"
SUMMARY_WORDS = 8  # a shard's summary: four float64 as uint32 words

def _shard_totals_avals(**_):
    return [jax.core.ShapedArray((SUMMARY_WORDS,), np.uint32)]


shard_totals_p = threaded_primitive("gearjax_shard_totals", SHARD_TOTALS_TARGET,
                                    _shard_totals_avals)


def shard_totals_call(state: jax.Array, *, handle: int, strategy: int, alpha: float,
                      shard: int) -> tuple[jax.Array, jax.Array]:
    """The state's successor and this shard's summary for the strategy:
    uint32[SUMMARY_WORDS]."""
    state, summary = shard_totals_p.bind(state, table_handle=np.int64(handle),
                                         strategy=np.int64(strategy), alpha=np.float64(alpha),
                                         shard=np.int64(shard))
    return state, summary


ENTRY_WORDS = 4  # an entry of a shard's best list (TopK, Recent): float64 and int64 as words

def _shard_tops_avals(*, per_shard, **_):
    return [jax.core.ShapedArray((SUMMARY_WORDS,), np.uint32),
            jax.core.ShapedArray((int(per_shard) * ENTRY_WORDS,), np.uint32)]


shard_tops_p = threaded_primitive("gearjax_shard_tops", SHARD_TOPS_TARGET, _shard_tops_avals,
                                  ("per_shard",))


def shard_tops_call(state: jax.Array, *, handle: int, strategy: int, count: int, shard: int,
                    per_shard: int) -> tuple[jax.Array, jax.Array, jax.Array]:
    """For TopK(count) or Recent(count): the state's successor, this shard's
    summary (uint32 [SUMMARY_WORDS]) and its best list of ``per_shard`` =
    min(count, capacity) entries (uint32 [per_shard * ENTRY_WORDS]), read in
    one snapshot."""
    state, summary, entries = shard_tops_p.bind(
        state, table_handle=np.int64(handle), strategy=np.int64(strategy),
        count=np.int64(count), shard=np.int64(shard), per_shard=per_shard)
    return state, summary, entries


def shard_rank_call(summaries: jax.Array, entries: jax.Array, *, strategy: int,
                    count: int) -> jax.Array:
    """The gathered summaries with each shard's weight replaced by its share of
    the global best ``count`` (uint32 [shards * SUMMARY_WORDS]), from the
    gathered best lists (uint32 [shards * per_shard * ENTRY_WORDS])."""
    call = jax.ffi.ffi_call(SHARD_RANK_TARGET, jax.ShapeDtypeStruct(summaries.shape, np.uint32),
                            vmap_method="sequential")
    return call(summaries, entries, strategy=np.int64(strategy), count=np.int64(count))


def shard_plan_call(seeds: jax.Array, summaries: jax.Array, *, batch: int,
                    shards: int) -> tuple[jax.Array, jax.Array, jax.Array]:
    """For each requester j (seeds uint32 [R, 2]): the shard of each of its
    ``batch`` rows (int32 [R, batch]), each row's rank among the requester's
    rows from that shard (int32 [R, batch]: the rows before it drawn from the
    same shard) and its rows per shard (int32 [R, shards]), drawn in
    proportion to the gathered summaries' weights (uint32 [shards *
    SUMMARY_WORDS])."""
    requesters = seeds.shape[0]
    call = jax.ffi.ffi_call(SHARD_PLAN_TARGET,
                            (jax.ShapeDtypeStruct((requesters, batch), np.int32),
                             jax.ShapeDtypeStruct((requesters, batch), np.int32),
                             jax.ShapeDtypeStruct((requesters, shards), np.int32)),
                            vmap_method="sequential")
    return call(seeds, summaries)


def _shard_serve_avals(seeds, counts, summaries, *, block, width, columns, **_):
    del seeds, summaries
    return _avals(sample_result_types(counts.shape[0] * int(block), width, columns))


shard_serve_p = threaded_primitive("gearjax_shard_serve", SHARD_SERVE_TARGET,
                                   _shard_serve_avals, ("width", "columns"))


def shard_serve_call(state: jax.Array, seeds: jax.Array, counts: jax.Array,
                     summaries: jax.Array, *, handle: int, block: int, strategy: int,
                     alpha: float, window: int, width: int, pad_left: bool, shard: int,
                     shard_shift: int, columns: Columns, ragged: bool = False
                     ) -> tuple[jax.Array, list[jax.Array]]:
    """The owner's draws: for requester j, counts[j] rows with seeds[j] in block
    j of ``block`` rows (the rest padding); returns the state's successor and
    (keys, start, probability, table_size, valid, *columns) over shards *
    block rows, keys, sizes and probabilities global. ``ragged``: the rows go
    out by a ragged all-to-all (the owner counts the rows asked as sent, not
    whole blocks)."""
    state, *results = shard_serve_p.bind(
        state, seeds, counts, summaries, table_handle=np.int64(handle), block=np.int64(block),
        strategy=np.int64(strategy), alpha=np.float64(alpha), window=np.int64(window),
        pad_left=np.int64(pad_left), shard=np.int64(shard), shard_shift=np.int64(shard_shift),
        ragged=np.int64(ragged), width=width, columns=columns)
    return state, results


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
    # Elementwise over the leading axes: a vmapped call converts the batch at once.
    call = jax.ffi.ffi_call("gearjax_int64_from_words",
                            jax.ShapeDtypeStruct(words.shape[:-1], np.int64),
                            vmap_method="expand_dims")
    return call(words)


# After every table primitive exists: the fixes find them in TABLE_PRIMITIVES,
# and so does the refusal of GPU programs where there are no CUDA handlers.
from gearjax import _cuda, _jax_fixes  # noqa: E402,F401

if not _gearjax.cuda_built:
    _cuda.refuse_gpu_programs()
