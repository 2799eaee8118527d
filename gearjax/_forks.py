"""Refuses programs that fork a table state: two table calls given the same
state are not ordered against each other (XLA follows data only), so a sample
could run before the update written above it.

``gearjax/state.py`` refuses the simplest fork while tracing (one tracer given
to two calls). This finds the rest in the whole program, once, when it is
lowered: the state used inside a nested ``jit``, ``vmap``, ``checkpoint``,
``cond`` branch, custom-derivative block or loop and also outside it, passed
through arithmetic (``s + 0``, ``lax.stop_gradient(s)``) or a block that
returns it untouched.

The model: every value of a state's type (a uint32 scalar) carries the
versions of the state chains it comes from. A program input, a closed-over
constant and a literal each start a chain; a threaded table call consumes its
state's versions and returns a new version of the same chains; other
operations pass versions through. A version consumed twice is a fork. A block
(``jit``, ``cond``, a loop, ...) is looked into with its operands' versions;
its outputs get new versions of every chain consumed inside it (their values
come out of the block, after its calls). The branches of a ``cond`` are
alternatives: each may consume what the others do. Loop iterations run one
after another: a loop body consuming a state the loop does not carry consumes
it once per iteration, in order.

What this cannot see: two states made by ``table.state()`` inside one
program are literals, separate chains that nothing orders against each other
(state.py refuses two consumed in one trace); and table calls of the
stateless form, which JAX orders with its own tokens.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Sequence
from typing import Any

from jax.extend import core as jax_core
from jax.extend import source_info_util

from gearjax._primitives import STATE_DTYPE, TABLE_PRIMITIVES

Version = tuple[Any, int]  # (chain, version number)

# Where a call was written, for the messages: the user's line, not gearjax's
# (JAX skips its own frames and, with this, gearjax's).
source_info_util.register_exclusion(os.path.dirname(os.path.abspath(__file__)) + os.sep)


class ForkError(ValueError):
    """Two table calls of one program were given the same table state."""


def _is_state_aval(aval: Any) -> bool:
    return getattr(aval, "shape", None) == () and getattr(aval, "dtype", None) == STATE_DTYPE


def _where(eqn: Any, enclosing: Sequence[Any]) -> str:
    """A call for a message: its name, its table and the user's line that
    made it. A call traced inside gearjax's own jitted function has only
    gearjax's frames (JAX 0.11 and later trace a nested jit apart), so the
    line is then that of the innermost enclosing block with a user's frame."""
    table = eqn.params.get("table_handle")
    name = eqn.primitive.name.replace("gearjax_", "")
    place = next((p for p in (source_info_util.summarize(e.source_info)
                              for e in [eqn, *reversed(enclosing)]) if p), "an unknown line")
    return f"{name} (table handle {int(table) if table is not None else '?'}) at {place}"


class _Program:
    """The chains of one program being checked."""

    def __init__(self):
        self.consumed: dict[Version, str] = {}
        self.numbers = itertools.count(1)
        self.enclosing: list[Any] = []  # the block eqns being run, outermost first

    def fresh(self, chain: Any) -> frozenset[Version]:
        return frozenset({(chain, next(self.numbers))})

    def consume(self, versions: frozenset[Version], eqn: Any) -> frozenset[Version]:
        """A table call takes `versions`; returns its successor's."""
        where = _where(eqn, self.enclosing)
        for version in versions:
            first = self.consumed.get(version)
            if first is not None:
                raise ForkError(
                    f"a table state was given to two table calls that nothing orders against "
                    f"each other: {first}, and {where}. XLA orders table calls by data only, so "
                    f"either may run first (a sample may miss the update written before it). "
                    f"Pass each call the state the previous call returned, through every jit, "
                    f"vmap, cond, loop and checkpoint (return it from the block and use what "
                    f"the block returns)")
            self.consumed[version] = where
        return frozenset((chain, next(self.numbers)) for chain, _ in versions)

    def chains_consumed_since(self, mark: dict[Version, str]) -> set[Any]:
        return {chain for (chain, _) in self.consumed.keys() - mark.keys()}


def check(jaxpr: Any) -> None:
    """Raises ForkError if a state of the program `jaxpr` (a Jaxpr or
    ClosedJaxpr) reaches two table calls unordered."""
    program = _Program()
    inputs = [program.fresh(("input", i)) if _is_state_aval(v.aval) else frozenset()
              for i, v in enumerate(jaxpr.invars)]
    consts = [program.fresh(("const", i)) if _is_state_aval(v.aval) else frozenset()
              for i, v in enumerate(getattr(jaxpr, "constvars", ()))]
    _run(program, jaxpr, consts + inputs, with_consts=True)


def _run(program: _Program, jaxpr: Any, operands: Sequence[frozenset[Version]],
         with_consts: bool = False) -> list[frozenset[Version]]:
    """Runs the analysis over `jaxpr` whose invars (constvars first when
    `with_consts`) hold `operands`; returns its outvars' versions."""
    env: dict[Any, frozenset[Version]] = {}
    variables = list(getattr(jaxpr, "constvars", ())) + list(jaxpr.invars) if with_consts \
        else list(jaxpr.invars)
    for var, versions in zip(variables, operands):
        env[var] = versions

    def read(atom: Any) -> frozenset[Version]:
        if isinstance(atom, jax_core.Literal):
            return program.fresh(("literal", id(atom))) if _is_state_aval(atom.aval) \
                else frozenset()
        return env.get(atom, frozenset())

    for eqn in jaxpr.eqns:
        ins = [read(v) for v in eqn.invars]
        if eqn.primitive in TABLE_PRIMITIVES:
            outs = [program.consume(ins[0], eqn)] + [frozenset()] * (len(eqn.outvars) - 1)
        elif any(_nested(eqn)):
            outs = _block(program, eqn, ins)
        else:
            passed = frozenset().union(*ins) if ins else frozenset()
            outs = [passed if _is_state_aval(v.aval) else frozenset() for v in eqn.outvars]
        for var, versions in zip(eqn.outvars, outs):
            env[var] = versions if _is_state_aval(var.aval) else frozenset()
    return [read(v) for v in jaxpr.outvars]


def _nested(eqn: Any) -> list[Any]:
    return list(jax_core.jaxprs_in_params(eqn.params))


def _block(program: _Program, eqn: Any, ins: list[frozenset[Version]]
           ) -> list[frozenset[Version]]:
    """A higher-order eqn: its inner jaxprs run with their operands' versions;
    its outputs get new versions of the chains consumed inside it."""
    program.enclosing.append(eqn)
    try:
        return _block_outputs(program, eqn, ins)
    finally:
        program.enclosing.pop()


def _block_outputs(program: _Program, eqn: Any, ins: list[frozenset[Version]]
                   ) -> list[frozenset[Version]]:
    mark = dict(program.consumed)
    name = eqn.primitive.name
    params = eqn.params
    if name == "cond":
        outs = _cond(program, params["branches"], ins[1:])
    elif name == "while":
        nc, nb = params["cond_nconsts"], params["body_nconsts"]
        cond_consts, body_consts, carry = ins[:nc], ins[nc:nc + nb], ins[nc + nb:]
        _run(program, params["cond_jaxpr"], cond_consts + carry)
        # One run of the body stands for every iteration (they run in order).
        outs = _run(program, params["body_jaxpr"], body_consts + carry)
    elif name == "scan":
        # One run of the body stands for every iteration; its outputs are the
        # carries and the stacked ys, in that order, as the scan's are.
        outs = _run(program, params["jaxpr"], ins)
    else:
        inner = [j for j in _nested(eqn) if len(j.invars) == len(ins)]
        if len(inner) != 1 or len(inner[0].outvars) != len(eqn.outvars):
            # A block of a shape this does not know: its states flow through
            # as through any operation (no table call of ours is expected in it).
            passed = frozenset().union(*ins) if ins else frozenset()
            return [passed] * len(eqn.outvars)
        outs = _run(program, inner[0], ins)
    consumed = program.chains_consumed_since(mark)
    renewed: dict[Any, int] = {}

    def after(versions: frozenset[Version]) -> frozenset[Version]:
        return frozenset(
            (chain, renewed.setdefault(chain, next(program.numbers))) if chain in consumed
            else (chain, number) for chain, number in versions)

    return [after(v) for v in outs]


def _cond(program: _Program, branches: Sequence[Any], ins: list[frozenset[Version]]
          ) -> list[frozenset[Version]]:
    """Branches are alternatives: each starts from what was consumed before
    the cond; what any of them consumed is consumed after it."""
    before = dict(program.consumed)
    after = dict(before)
    outs: list[frozenset[Version]] | None = None
    for branch in branches:
        program.consumed = dict(before)
        result = _run(program, branch, ins)
        after.update(program.consumed)
        outs = result if outs is None else [a | b for a, b in zip(outs, result)]
    program.consumed = after
    return outs or []
