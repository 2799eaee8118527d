"""Closes four holes that JAX (0.10) leaves around side-effecting primitives,
for programs with gearjax table calls only.

1. **Hoisting out of a loop under differentiation.** Scan's partial evaluation
   moves loop-invariant computations out of the loop (``_scan_known_hoisting``
   and the hoisting step of ``_scan_partial_eval_custom``; JAX issue 16637),
   effects or not: a table call whose operands are all loop-invariant would run
   once instead of once per iteration. While those passes run on a scan with a
   table call, the call's partial-evaluation rule keeps it (and what depends on
   it) in the loop; everything else still hoists.
2. **Ahead-of-time compiled functions with ordered table calls.** The compiled
   object's C++ path passes no effect tokens, so its second call failed
   ("Execution supplied 1 arguments but compiled program expected 2"). Such
   executables take the Python path, which does (threaded calls keep the fast
   one).
3. **``vmap`` of ``cond``/``switch`` with a batched predicate** turns the branches
   into a select, running every branch for every element; 4. **``vmap`` of
   ``while_loop`` with a batched predicate** runs the body until every element
   is done. Either would run table calls that the program does not take, so
   programs with table calls there are refused, with the reason, as JAX
   refuses its own IO effects there.

Each fix wraps a JAX internal and changes nothing for programs without table
calls; ``tests/test_jax_fixes.py`` checks every one on the JAX installed.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable

from jax._src import core as jax_core
from jax._src.interpreters import batching, pxla
from jax._src.interpreters import partial_eval as pe
from jax._src.lax.control_flow import conditionals, loops

from gearjax._primitives import TABLE_PRIMITIVES, TableEffect

VMAP_REFUSED = (
    "gearjax table calls inside lax.cond, lax.switch or lax.while_loop under vmap with a "
    "predicate that depends on the mapped values: vmap runs every branch and every iteration "
    "for every element, which would run table calls the program does not take. Move the table "
    "call out of the control flow, make the predicate unbatched, or map with lax.map/lax.scan")


def has_table_call(jaxprs: Iterable[jax_core.Jaxpr]) -> bool:
    """Whether any of the jaxprs (or a jaxpr nested in them) has a table call."""
    stack = list(jaxprs)
    while stack:
        jaxpr = stack.pop()
        for eqn in jaxpr.eqns:
            if eqn.primitive in TABLE_PRIMITIVES:
                return True
            stack.extend(jax_core.jaxprs_in_params(eqn.params))
    return False


# ----------------------------------------------------------- 1. hoisting
_hoisting = threading.local()


def _stay_in_loop(primitive):
    """JaxprTrace rule: while a scan's invariants are being hoisted, the call
    is staged (kept in the loop) even when its operands are invariant;
    otherwise the default (all operands known: evaluate now)."""

    def rule(trace, *tracers, **params):
        if getattr(_hoisting, "depth", 0):
            tracers = [trace.instantiate_const(t) for t in tracers]
        return trace.default_process_primitive(primitive, tracers, params)

    return rule


def _while_hoisting(hoist):
    def wrapped(*args, **kwargs):
        _hoisting.depth = getattr(_hoisting, "depth", 0) + 1
        try:
            return hoist(*args, **kwargs)
        finally:
            _hoisting.depth -= 1

    return wrapped


def _install_hoisting_fix() -> None:
    for primitive in TABLE_PRIMITIVES:
        pe.custom_partial_eval_rules[primitive] = _stay_in_loop(primitive)
    original_known = loops._scan_known_hoisting
    guarded_known = _while_hoisting(original_known)

    def scan_known_hoisting(jaxpr_known, known_consts, num_res):
        if not has_table_call([jaxpr_known.jaxpr]):
            return original_known(jaxpr_known, known_consts, num_res)
        return guarded_known(jaxpr_known, known_consts, num_res)

    loops._scan_known_hoisting = scan_known_hoisting

    original_custom = pe.partial_eval_jaxpr_custom_rules[loops.scan_p]
    guarded_custom = _while_hoisting(original_custom)

    def scan_partial_eval_custom(saveable, unks_in, inst_in, eqn):
        if not has_table_call([eqn.params["jaxpr"].jaxpr]):
            return original_custom(saveable, unks_in, inst_in, eqn)
        return guarded_custom(saveable, unks_in, inst_in, eqn)

    pe.partial_eval_jaxpr_custom_rules[loops.scan_p] = scan_partial_eval_custom


# ------------------------------------------------------------------ 2. AOT
def _install_aot_fix() -> None:
    original = pxla.MeshExecutable.create_cpp_call

    def create_cpp_call(self, params):
        ordered = getattr(self.unsafe_call, "ordered_effects", None) or ()
        if any(isinstance(effect, TableEffect) for effect in ordered):
            return None  # stages.Compiled falls back to its Python call
        return original(self, params)

    pxla.MeshExecutable.create_cpp_call = create_cpp_call


# ----------------------------------------------------------- 3, 4. vmap
def _install_vmap_fixes() -> None:
    cond_rule = batching.fancy_primitive_batchers[conditionals.cond_p]

    def cond_batching_rule(axis_data, args, dims, *, branches, **params):
        if dims[0] is not None and has_table_call(b.jaxpr for b in branches):
            raise NotImplementedError(VMAP_REFUSED)
        return cond_rule(axis_data, args, dims, branches=branches, **params)

    batching.fancy_primitive_batchers[conditionals.cond_p] = cond_batching_rule

    while_rule = batching.fancy_primitive_batchers[loops.while_p]

    def while_batching_rule(axis_data, args, dims, *, cond_nconsts, cond_jaxpr, body_nconsts,
                            body_jaxpr):
        if any(d is not None for d in dims) and \
                has_table_call([cond_jaxpr.jaxpr, body_jaxpr.jaxpr]) and \
                _while_predicate_batched(axis_data, dims, cond_nconsts, cond_jaxpr,
                                         body_nconsts, body_jaxpr):
            raise NotImplementedError(VMAP_REFUSED)
        return while_rule(axis_data, args, dims, cond_nconsts=cond_nconsts,
                          cond_jaxpr=cond_jaxpr, body_nconsts=body_nconsts,
                          body_jaxpr=body_jaxpr)

    batching.fancy_primitive_batchers[loops.while_p] = while_batching_rule


def _while_predicate_batched(axis_data, dims, cond_nconsts, cond_jaxpr, body_nconsts,
                             body_jaxpr) -> bool:
    """Whether vmap makes the loop's predicate batched: the carries batched
    from the start or by the body (a fixpoint, as JAX's own rule finds it),
    then the predicate over them."""
    batched = [d is not None for d in dims]
    cond_consts = batched[:cond_nconsts]
    body_consts = batched[cond_nconsts:cond_nconsts + body_nconsts]
    carry = batched[cond_nconsts + body_nconsts:]
    for _ in range(1 + len(carry)):
        _, carry_out = batching.batch_jaxpr(body_jaxpr, axis_data, body_consts + carry,
                                            instantiate=carry)
        if carry_out == carry:
            break
        carry = [a or b for a, b in zip(carry, carry_out)]
    _, (predicate,) = batching.batch_jaxpr(cond_jaxpr, axis_data, cond_consts + carry,
                                           instantiate=False)
    return bool(predicate)


_install_hoisting_fix()
_install_aot_fix()
_install_vmap_fixes()
