"""Closes five holes that JAX (0.10 to 0.12) leaves around side-effecting
primitives, for programs with gearjax table calls only.

1. **Hoisting out of a loop under differentiation.** Scan's partial evaluation
   moves loop-invariant computations out of the loop (``_scan_known_hoisting``
   and the hoisting step of ``_scan_partial_eval_custom``; JAX issue 16637),
   effects or not: a table call whose operands are all loop-invariant would run
   once instead of once per iteration. While those passes run on a scan with a
   table call, the call's partial-evaluation rule keeps it (and what depends on
   it) in the loop; everything else still hoists.
2. **``vmap`` of ``cond``/``switch`` with a batched predicate** turns the branches
   into a select, running every branch for every element; 3. **``vmap`` of
   ``while_loop`` with a batched predicate** runs the body until every element
   is done. Either would run table calls that the program does not take, so
   programs with table calls there are refused, with the reason, as JAX
   refuses its own IO effects there.
4. **Dead-code elimination of blocks.** JAX drops a ``cond``, loop, nested
   ``jit``, ``checkpoint`` or custom-derivative block none of whose results
   is used, asking only whether it has effects: a block with a table call
   inside now counts as having one, so its calls run.
5. **Forked table states** pass JAX unseen (data flow has no notion of
   one use): every program with table calls is checked when it is
   lowered, and one that gives a state to two unordered calls is refused
   (gearjax/_forks.py).

Each fix wraps a JAX internal and changes nothing for programs without table
calls; ``tests/test_jax_fixes.py`` checks every one on the JAX installed. Each
internal is wrapped only in a form gearjax knows, recognised by its parameters
(``APPLIED`` says which form each fix found); an internal whose signature
changed in a JAX gearjax does not know is refused at import
(UnsupportedJaxError), never patched by guess or silently skipped.
"""

from __future__ import annotations

import inspect
import threading
from collections.abc import Iterable

import jax
from jax._src import core as jax_core
from jax._src.interpreters import batching, mlir
from jax._src.interpreters import partial_eval as pe
from jax._src.lax.control_flow import conditionals, loops

from gearjax._primitives import TABLE_PRIMITIVES

VMAP_REFUSED = (
    "gearjax table calls inside lax.cond, lax.switch or lax.while_loop under vmap with a "
    "predicate that depends on the mapped values: vmap runs every branch and every iteration "
    "for every element, which would run table calls the program does not take. Move the table "
    "call out of the control flow, make the predicate unbatched, or map with lax.map/lax.scan")


def has_table_call(jaxprs: Iterable[jax_core.Jaxpr]) -> bool:
    """Whether any of the jaxprs (or a jaxpr nested in them) has a table call.
    Takes Jaxprs and ClosedJaxprs alike (in jax 0.11 they are one type; both
    have ``eqns``)."""
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


# The JAX versions gearjax supports, as pyproject.toml declares them.
SUPPORTED_JAX = "jax>=0.10,<0.13"

# The signatures of JAX's scan hoisting this fix wraps, by JAX version: the
# counts after (jaxpr_known, known_consts) are passed through unchanged.
KNOWN_HOISTING_SIGNATURES = {
    ("jaxpr_known", "known_consts", "num_res"): "jax 0.10, 0.11.0",
    ("jaxpr_known", "known_consts", "num_ures", "num_sres"): "jax 0.11.1 to 0.12",
}

# The internals whose form every supported JAX shares.
ALL = "jax 0.10 to 0.12"

# What each fix found on the installed JAX: the internal it wraps -> the JAX
# versions whose form of it that is (tests/test_jax_fixes.py checks it per minor).
APPLIED: dict[str, str] = {}


class UnsupportedJaxError(ImportError):
    """The installed JAX changed an internal that gearjax patches."""


def require_signature(function, known: dict[tuple[str, ...], str], what: str) -> str:
    """Returns the JAX versions whose form of the internal ``what`` the
    installed one is, when its parameters are one of the forms in ``known``
    (parameters -> those versions); refuses (UnsupportedJaxError) any other
    form rather than guess what its arguments mean."""
    params = tuple(inspect.signature(function).parameters)
    if params not in known:
        forms = "; ".join(f"{form} ({versions})" for form, versions in known.items())
        raise UnsupportedJaxError(
            f"gearjax does not support jax {jax.__version__}: {what} takes {params}, where "
            f"gearjax knows only {forms}. Install a supported jax (pyproject.toml: "
            f"{SUPPORTED_JAX})")
    return known[params]


def _require(function, known: dict[tuple[str, ...], str], what: str) -> None:
    """require_signature, for an internal a fix is about to wrap: records in
    APPLIED which form it found."""
    APPLIED[what] = require_signature(function, known, what)


def wrap_known_hoisting(original):
    """Wraps scan's ``_scan_known_hoisting`` so that while it hoists a loop
    with a table call, the call stays in the loop. Refuses (UnsupportedJaxError)
    a signature it does not know rather than guess what the arguments mean."""
    # Without this fix a table call in a lax.scan under grad could run once
    # instead of once per step.
    require_signature(original, KNOWN_HOISTING_SIGNATURES, "loops._scan_known_hoisting")
    guarded = _while_hoisting(original)

    def scan_known_hoisting(jaxpr_known, known_consts, *counts):
        # Jaxpr (0.11) and ClosedJaxpr (0.10) both have .eqns.
        hoist = guarded if has_table_call([jaxpr_known]) else original
        return hoist(jaxpr_known, known_consts, *counts)

    scan_known_hoisting.__wrapped__ = original
    return scan_known_hoisting


def _install_hoisting_fix() -> None:
    for primitive in TABLE_PRIMITIVES:
        pe.custom_partial_eval_rules[primitive] = _stay_in_loop(primitive)
    _require(loops._scan_known_hoisting, KNOWN_HOISTING_SIGNATURES, "loops._scan_known_hoisting")
    loops._scan_known_hoisting = wrap_known_hoisting(loops._scan_known_hoisting)

    original_custom = pe.partial_eval_jaxpr_custom_rules[loops.scan_p]
    _require(original_custom, {("saveable", "unks_in", "inst_in", "eqn"): ALL},
             "scan's partial_eval_jaxpr_custom rule")
    guarded_custom = _while_hoisting(original_custom)

    def scan_partial_eval_custom(saveable, unks_in, inst_in, eqn):
        if not has_table_call([eqn.params["jaxpr"]]):
            return original_custom(saveable, unks_in, inst_in, eqn)
        return guarded_custom(saveable, unks_in, inst_in, eqn)

    pe.partial_eval_jaxpr_custom_rules[loops.scan_p] = scan_partial_eval_custom


# ------------------------------------------------------ 4. dead-code removal
def _install_dce_fix() -> None:
    """JAX's dead-code elimination drops an eqn none of whose outputs is used
    unless ``pe.has_effects(eqn)``; every rule for a block (cond, scan, nested
    jit, checkpoint, custom_jvp/vjp, shard_map) asks it the same way, before
    looking inside. Table calls declare no JAX effect
    (that keeps JAX's fast dispatch path), so a block whose results were all
    unused lost its table calls: a cond branch returning its input state, a
    scan or fori_loop whose carry was dropped. ``has_effects`` now also says
    yes for a block with a table call inside: the block stays, and the rules
    then keep the calls in it (their own DCE rule) and what they read."""
    original = pe.has_effects
    # 0.12 added live_ins (which operands are read later: a write to a Ref
    # nobody reads is no effect); a table call keeps its block either way.
    _require(original, {("eqn",): "jax 0.10, 0.11", ("eqn", "live_ins"): "jax 0.12"},
             "partial_eval.has_effects")

    def has_effects(eqn, *live_ins) -> bool:
        if original(eqn, *live_ins):
            return True
        if eqn.primitive in TABLE_PRIMITIVES:
            return True
        nested = list(jax_core.jaxprs_in_params(eqn.params))
        return bool(nested) and has_table_call(nested)

    pe.has_effects = has_effects


# ------------------------------------------------------------------ 5. forks
def _install_fork_check() -> None:
    """Every program is checked for forked table states (gearjax/_forks.py)
    when JAX lowers it to XLA: once per compilation, for programs with
    table calls only."""
    from gearjax import _forks

    original = mlir.lower_jaxpr_to_module
    params = tuple(inspect.signature(original).parameters)
    # Only the first two are read; the rest pass through as given.
    if params[:2] != ("module_name", "jaxpr"):
        raise UnsupportedJaxError(
            f"gearjax does not support jax {jax.__version__}: mlir.lower_jaxpr_to_module takes "
            f"{params}, where gearjax wraps it as taking (module_name, jaxpr, ...) ({ALL}). "
            f"Install a supported jax (pyproject.toml: {SUPPORTED_JAX})")
    APPLIED["mlir.lower_jaxpr_to_module"] = ALL

    def lower_jaxpr_to_module(module_name, jaxpr, *args, **kwargs):
        if has_table_call([jaxpr]):
            _forks.check(jaxpr)
        return original(module_name, jaxpr, *args, **kwargs)

    mlir.lower_jaxpr_to_module = lower_jaxpr_to_module


# ----------------------------------------------------------- 2, 3. vmap
def _install_vmap_fixes() -> None:
    cond_rule = batching.fancy_primitive_batchers[conditionals.cond_p]
    _require(cond_rule, {("axis_data", "args", "dims", "branches", "params"): ALL},
             "cond's batching rule")

    def cond_batching_rule(axis_data, args, dims, *, branches, **params):
        if dims[0] is not None and has_table_call(branches):
            raise NotImplementedError(VMAP_REFUSED)
        return cond_rule(axis_data, args, dims, branches=branches, **params)

    batching.fancy_primitive_batchers[conditionals.cond_p] = cond_batching_rule

    while_rule = batching.fancy_primitive_batchers[loops.while_p]
    _require(while_rule, {("axis_data", "args", "dims", "cond_nconsts", "cond_jaxpr",
                           "body_nconsts", "body_jaxpr"): ALL}, "while's batching rule")

    def while_batching_rule(axis_data, args, dims, *, cond_nconsts, cond_jaxpr, body_nconsts,
                            body_jaxpr):
        if any(d is not None for d in dims) and \
                has_table_call([cond_jaxpr, body_jaxpr]) and \
                _while_predicate_batched(axis_data, dims, cond_nconsts, cond_jaxpr,
                                         body_nconsts, body_jaxpr):
            raise NotImplementedError(VMAP_REFUSED)
        return while_rule(axis_data, args, dims, cond_nconsts=cond_nconsts,
                          cond_jaxpr=cond_jaxpr, body_nconsts=body_nconsts,
                          body_jaxpr=body_jaxpr)

    batching.fancy_primitive_batchers[loops.while_p] = while_batching_rule
    # _while_predicate_batched calls it as the while rule does.
    _require(batching.batch_jaxpr,
             {("closed_jaxpr", "axis_data", "in_batched", "instantiate"): ALL},
             "batching.batch_jaxpr")


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
_install_vmap_fixes()
_install_dce_fix()
_install_fork_check()
