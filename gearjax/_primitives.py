"""How a table call becomes a JAX primitive, ordered by the table state it threads.

Every table call that reads or changes a table from compiled code (sample,
update_priorities, insert_batch, a sharded table's exchange) takes the table
state (a uint32 scalar, ``gx.TableState``) as its first operand and returns
its successor as its first result, so a program orders its table calls by
passing the state from one to the next: plain data flow. The primitive
declares no JAX effect, so its programs keep JAX's C++ fast dispatch path.
What keeps every call written in a program running exactly once, each time
its part of the program runs:

- its custom call is marked ``has_side_effect``: XLA never drops, merges
  (CSE), rematerialises or moves it out of a loop; the result state aliases
  the operand (the handlers neither read nor write it);
- a DCE rule: JAX keeps the call when its results are unused;
- a partial-evaluation rule: under ``jax.checkpoint`` and ``grad`` it runs in
  the forward pass and its results are saved, never recomputed;
- differentiation: it runs once, on the primal values, with zero tangents;
- ``vmap``: one call per mapped element, in order, threading the state (a
  ``lax.scan``). A state that is itself batched is refused: ``vmap`` of
  ``cond``, ``switch`` or ``while_loop`` with a batched predicate makes one
  (every branch and iteration then runs for every element), and
  gearjax/_jax_fixes.py refuses those programs before it gets here;
- under a jit over several devices, one logical call (see
  :func:`one_logical_call`).

JAX's own dead-code elimination drops a whole ``cond``, loop, nested ``jit``
or ``checkpoint`` none of whose results is used, asking only whether it has
effects: gearjax/_jax_fixes.py makes a block with a table call inside count as
having one, so its calls run.

A table call without a state exists only outside traced code (the table
passes a fresh state itself, gearjax/_call_forms.py); inside it is refused.
Everything here is JAX's public API (``jax.extend.core``,
``jax.interpreters``); ``tests/test_effects.py`` checks every behaviour on the
JAX installed.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence

import jax
import numpy as np
from jax.extend import core
from jax.interpreters import ad, batching, mlir, xla
from jax.interpreters import partial_eval as pe


# Every table primitive (state first in, successor first out), for
# gearjax/_jax_fixes.py and gearjax/_forks.py.
TABLE_PRIMITIVES: set[core.Primitive] = set()


def _primitive(name: str) -> core.Primitive:
    primitive = core.Primitive(name)
    primitive.multiple_results = True
    primitive.def_impl(functools.partial(xla.apply_primitive, primitive))
    TABLE_PRIMITIVES.add(primitive)
    return primitive


ZEROS_TARGET = "gearjax_zeros"
_DEVICES_AXIS = "gearjax_devices"


def one_logical_call(primitive: core.Primitive, lowering):
    """Wraps a table call's lowering so that a jit over several devices
    without ``shard_map`` runs the call once, not once per device (XLA's SPMD
    partitioner would otherwise run it on every device: every device drawing
    the whole batch, a priority update applied once per device). The call
    runs on the first device and its results are broadcast to the others
    (``lax.pbroadcast``, bit for bit), as JAX does for its own callbacks; the
    program's shardings then slice them. (A sharding annotation alone does not
    do it: Shardy keeps single-device shardings for JAX's callbacks only.)
    Inside ``shard_map`` (and ``pmap``) every device runs its own call, as the
    program says; a ``shard_map`` that leaves some mesh axes automatic is
    refused."""

    def wrapped(ctx, *operands, **params):
        context = ctx.module_context.axis_context
        if isinstance(context, mlir.SPMDAxisContext):
            if context.manual_axes != frozenset(context.mesh.axis_names):
                raise NotImplementedError(
                    "gearjax table calls inside shard_map need every mesh axis manual (a call "
                    "over automatic axes would run once per device); put the table call outside "
                    "the shard_map or map over every axis")
        elif isinstance(context, mlir.ShardingContext) and context.num_devices > 1:
            on_gpu = all(p in ("cuda", "rocm") for p in ctx.module_context.platforms)
            return mlir.lower_fun(_on_first_device(primitive, context.num_devices,
                                                   ctx.avals_out, params, on_gpu),
                                  multiple_results=True)(ctx, *operands)
        return lowering(ctx, *operands, **params)

    return wrapped


def _on_first_device(primitive: core.Primitive, devices: int, avals_out, params,
                     on_gpu: bool):
    mesh = jax.sharding.AbstractMesh((devices,), (_DEVICES_AXIS,))
    # Zeros of the results' shapes take no operands: vmap gives them a batch axis.
    zeros = jax.ffi.ffi_call(ZEROS_TARGET, [jax.ShapeDtypeStruct(a.shape, a.dtype)
                                            for a in avals_out], vmap_method="broadcast_all")

    def from_first(x):
        # Bit for bit, any dtype (int64 without x64 included): a collective
        # broadcast where XLA has one (GPU), else an all-gather's first part.
        if on_gpu:
            return jax.lax.pbroadcast(x, (_DEVICES_AXIS,), 0)
        return jax.lax.all_gather(x, _DEVICES_AXIS)[0]

    def per_device(*operands):
        first = jax.lax.axis_index(_DEVICES_AXIS) == 0
        results = jax.lax.cond(first, lambda: primitive.bind(*operands, **params),
                               lambda: list(zeros()))
        return [from_first(r) for r in results]

    return jax.shard_map(per_device, mesh=mesh, in_specs=jax.sharding.PartitionSpec(),
                         out_specs=jax.sharding.PartitionSpec(), check_vma=False)


def _attributes(params: dict, not_attributes: Sequence[str]) -> dict:
    return {k: v for k, v in params.items() if k not in not_attributes}


def _not_differentiable(primitive: core.Primitive) -> None:
    """Table calls read or write the table, not their inputs' derivatives: the
    results get zero tangents and the call itself runs once, on the primals."""

    def jvp(primals, tangents, **params):
        del tangents
        results = primitive.bind(*primals, **params)
        return results, [ad.Zero(jax.typeof(r).to_tangent_aval()) for r in results]

    ad.primitive_jvps[primitive] = jvp


AbstractEval = Callable[..., list[jax.core.ShapedArray]]


STATE_DTYPE = np.dtype(np.uint32)
STATE_AVAL = jax.core.ShapedArray((), STATE_DTYPE)


def threaded_lowering(target: str, not_attributes: Sequence[str]):
    """The custom call of a table primitive: side-effecting, its state result
    aliasing its state operand, every parameter but `not_attributes` an
    attribute."""

    def lowering(ctx, state, *operands, **params):
        return jax.ffi.ffi_lowering(target, has_side_effect=True, operand_output_aliases={0: 0})(
            ctx, state, *operands, **_attributes(params, not_attributes))

    return lowering


def keep_when_unused(used_outputs: list[bool], *live_ins_and_eqn):
    """DCE rule: the call stays, and so does everything it reads. JAX 0.12
    passes (used_outputs, live_ins, eqn), earlier versions (used_outputs, eqn)."""
    del used_outputs
    eqn: core.JaxprEqn = live_ins_and_eqn[-1]
    return [True] * len(eqn.invars), eqn


def _run_once_under_remat(saveable, unknowns_in, instantiated_in, eqn: core.JaxprEqn):
    """Partial evaluation under jax.checkpoint: the call goes to one side
    only. With known operands (always, under grad: its operands are primal
    values) it runs in the forward pass and whatever the backward pass needs
    of its results is saved; it is never put in the rematerialised part."""
    del saveable
    outputs = len(eqn.outvars)
    if any(unknowns_in):
        residuals = [v for v, inst in zip(eqn.invars, instantiated_in)
                     if not inst and isinstance(v, core.Var)]
        return None, eqn, [True] * outputs, [True] * outputs, residuals
    return eqn, None, [False] * outputs, [False] * outputs, []


class BatchedStateError(ValueError):
    """A table state that differs between the elements of a vmap."""


def _threaded_batching(primitive: core.Primitive) -> None:
    def rule(args, dims, **params):
        (state, *operands), (state_dim, *operand_dims) = args, dims
        if state_dim is not None:
            raise BatchedStateError(
                "a gearjax table call got a table state batched by vmap. vmap of lax.cond, "
                "lax.switch or lax.while_loop whose predicate depends on the mapped values runs "
                "every branch and every iteration for every element, which would run table "
                "calls that the program does not take: such programs are refused. Move the "
                "table call out of the vmapped control flow, or map with lax.map/lax.scan")
        size = next(a.shape[d] for a, d in zip(operands, operand_dims) if d is not None)
        operands = [batching.bdim_at_front(a, d, size) for a, d in zip(operands, operand_dims)]

        def one(state, xs):
            state, *results = primitive.bind(state, *xs, **params)
            return state, results

        state, results = jax.lax.scan(one, state, operands)
        return [state, *results], [None] + [0] * len(results)

    batching.primitive_batchers[primitive] = rule


def threaded_primitive(name: str, target: str, abstract_eval: AbstractEval,
                       not_attributes: Sequence[str] = ()) -> core.Primitive:
    """A table call ordered by the table state it takes first and returns
    first. ``abstract_eval(*operands, **params)`` gives the avals of the
    results after the state (``operands`` exclude the state)."""
    primitive = _primitive(name)

    def abstract(state, *operands, **params):
        if state.shape != () or state.dtype != STATE_DTYPE:
            raise TypeError(f"a table state is a uint32 scalar, got {state.str_short()}")
        return [STATE_AVAL, *abstract_eval(*operands, **params)]

    primitive.def_abstract_eval(abstract)
    mlir.register_lowering(primitive, one_logical_call(
        primitive, threaded_lowering(target, not_attributes)))
    pe.dce_rules[primitive] = keep_when_unused
    pe.partial_eval_jaxpr_custom_rules[primitive] = _run_once_under_remat
    _not_differentiable(primitive)
    _threaded_batching(primitive)
    return primitive
