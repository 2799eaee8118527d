"""The holes JAX leaves around table calls, closed (gearjax/_jax_fixes.py,
gearjax/_primitives.py): a loop-invariant table call in a scan under grad runs
once per iteration; AOT-compiled functions run every call; vmap of
cond/switch/while_loop with a batched predicate is refused; a jit over several
host devices runs each call once; table-state programs keep JAX's fast
dispatch path."""

from __future__ import annotations

import inspect
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gearjax as gx
from conftest import pythonpath
from gearjax import _jax_fixes
from test_effects import finish

N = 32


@pytest.fixture
def table():
    t = gx.Table({"x": gx.Column((2,), "float32")}, capacity=N, max_length=4, name="fixes")
    for i in range(N):
        t.insert({"x": np.full((3, 2), i, np.float32)})
    yield t
    t.close()


def samples_drawn(table, run) -> int:
    before = table.stats()["samples"]
    finish(run())
    return table.stats()["samples"] - before


# ---------------------------------------------------------------- hoisting
@pytest.mark.parametrize("closed_over_state", [False, True])
def test_a_loop_invariant_call_in_a_scan_under_grad_runs_once_per_iteration(
        table, closed_over_state):
    key = jax.random.key(0)  # closed over: every operand of the sample is loop-invariant

    def loss(w, state):
        def body(carry, _):
            state, total = carry
            given = outer if closed_over_state else state
            new_state, batch = table.sample(given, key, 2, 1)
            return (state if closed_over_state else new_state,
                    total + jnp.sin(batch["x"].sum() * w)), None

        outer = state
        (state, total), _ = jax.lax.scan(body, (state, 0.0), None, length=5)
        return total, state

    assert samples_drawn(table, lambda: jax.jit(jax.grad(loss, has_aux=True))(
        1.0, table.state())) == 10


def test_invariant_work_beside_a_table_call_still_hoists(table):
    # Only the table call (and what depends on it) stays in the loop.
    big = jnp.ones((64, 64))

    def loss(w, state):
        def body(carry, _):
            state, total = carry
            state, batch = table.sample(state, jax.random.key(0), 2, 1)
            return (state, total + jnp.sum(jnp.sin(big * w)) + batch["x"].sum()), None

        return jax.lax.scan(body, (state, 0.0), None, length=4)[0][1]

    # Hoisted, cos(big * w) is one [64, 64] residual; kept in the loop, it
    # would be saved per iteration, [4, 64, 64].
    jaxpr = str(jax.make_jaxpr(jax.grad(loss))(1.0, table.state()))
    assert "gearjax_sample" in jaxpr and "f32[4,64,64]" not in jaxpr
    assert np.isfinite(float(jax.jit(jax.grad(loss))(1.0, table.state())))


# ----------------------------------------------- which JAX versions are fixed
def _hoisting_calls(original_params: str):
    """A stand-in for JAX's _scan_known_hoisting with the given parameters,
    wrapped by gearjax: returns (the wrapper, what each call saw)."""
    seen = []

    def record(*args):
        seen.append((args, getattr(_jax_fixes._hoisting, "depth", 0)))
        return "hoisted"

    namespace = {"record": record}
    exec(f"def original({original_params}):\n    return record({original_params})", namespace)
    return _jax_fixes.wrap_known_hoisting(namespace["original"]), seen


@pytest.mark.parametrize("params", ["jaxpr_known, known_consts, num_res",            # 0.10
                                    "jaxpr_known, known_consts, num_ures, num_sres"])  # 0.11
def test_the_hoisting_fix_passes_every_count_through_on_each_known_jax(table, params):
    # jax 0.11.2 calls it with (jaxpr, consts, num_ures, num_sres): the fix for
    # 0.10's (jaxpr, consts, num_res) once failed every scan under grad there.
    wrapper, seen = _hoisting_calls(params)
    counts = (2, 1)[:params.count(",") - 1]
    with_call = jax.make_jaxpr(lambda s, k: table.sample(s, k, 2, 1)[0])(
        table.state(), jax.random.key(0))
    without = jax.make_jaxpr(jnp.sin)(1.0)
    assert wrapper(with_call, [], *counts) == "hoisted"
    assert wrapper(without, [], *counts) == "hoisted"
    # The table call's jaxpr is hoisted with the call kept in the loop (depth
    # 1); other jaxprs as JAX does it.
    assert [(args[2:], depth) for args, depth in seen] == [(counts, 1), (counts, 0)]


@pytest.mark.parametrize("params", ["jaxpr_known, known_consts",
                                    "jaxpr_known, known_consts, num_res, extra, more",
                                    "jaxpr, consts, num_res"])
def test_a_jax_whose_hoisting_gearjax_does_not_know_is_refused_loudly(params):
    with pytest.raises(_jax_fixes.UnsupportedJaxError,
                       match=f"does not support jax {jax.__version__}.*jax>=0.10,<0.13"):
        _hoisting_calls(params)
    assert issubclass(_jax_fixes.UnsupportedJaxError, ImportError)  # import gearjax fails


def _version() -> tuple[int, ...]:
    return tuple(int(x) for x in jax.__version__.split(".")[:3])


def _expected_forms() -> dict[str, str]:
    """Which form of each patched internal the installed JAX has, as this
    test knows it per supported minor (all others: the form every one shares)."""
    forms = {what: _jax_fixes.ALL for what in (
        "scan's partial_eval_jaxpr_custom rule", "mlir.lower_jaxpr_to_module",
        "cond's batching rule", "while's batching rule", "batching.batch_jaxpr")}
    version = _version()
    forms["loops._scan_known_hoisting"] = \
        "jax 0.10, 0.11.0" if version < (0, 11, 1) else "jax 0.11.1 to 0.12"
    forms["partial_eval.has_effects"] = \
        "jax 0.10, 0.11" if version < (0, 12) else "jax 0.12"
    return forms


def test_each_patch_found_the_form_of_its_internal_that_this_jax_minor_has():
    """Per minor: 0.10 and 0.11.0 hoist with (num_res), 0.11.1 and later with
    (num_ures, num_sres); 0.12's has_effects takes live_ins; every other
    patched internal is the same on all three."""
    assert (0, 10) <= _version()[:2] <= (0, 12)
    assert _jax_fixes.APPLIED == _expected_forms()


def test_every_patched_internal_of_the_installed_jax_is_one_gearjax_knows():
    from jax._src.lax.control_flow import loops
    original = loops._scan_known_hoisting.__wrapped__  # gearjax's wrapper is installed
    assert tuple(inspect.signature(original).parameters) in _jax_fixes.KNOWN_HOISTING_SIGNATURES
    with pytest.raises(_jax_fixes.UnsupportedJaxError,
                       match=r"takes \('a',\), where gearjax knows only \('self', 'params'\) "
                             r"\(jax 0.10 to 0.12\)"):
        _jax_fixes.require_signature(lambda a: a, {("self", "params"): _jax_fixes.ALL},
                                     "an internal")
    assert "an internal" not in _jax_fixes.APPLIED


def test_the_supported_jax_versions_are_declared_and_installed():
    import tomllib
    from importlib.metadata import version
    pyproject = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())
    declared = [d for d in pyproject["project"]["dependencies"] if d.startswith("jax")]
    assert declared == [_jax_fixes.SUPPORTED_JAX, "jaxlib" + _jax_fixes.SUPPORTED_JAX[3:]]
    major, minor = (int(x) for x in version("jax").split(".")[:2])
    assert (major, minor) in ((0, 10), (0, 11), (0, 12))
    # The README and the getting-started page say the same range.
    root = Path(__file__).parents[1]
    for page in (root / "README.md", root / "docs" / "getting-started.md"):
        text = " ".join(page.read_text().split())
        assert "JAX 0.10, 0.11 and 0.12" in text and _jax_fixes.SUPPORTED_JAX[3:] in text, page


# --------------------------------------------------------------------- AOT
def test_an_aot_compiled_function_runs_every_call(table):
    key = jax.random.key(0)
    compiled = jax.jit(lambda s, k: table.sample(s, k, 3, 1)).lower(table.state(), key).compile()

    def three_calls():
        state = table.state()
        for _ in range(3):
            state, batch = compiled(state, key)
        return state, batch

    assert samples_drawn(table, three_calls) == 9


# -------------------------------------------------------------------- vmap
FLAGS = jnp.array([True, False, True, False])
KEYS = jax.random.split(jax.random.key(1), 4)


def _cond_program(table):
    def one(key, flag, state):
        def taken(state):
            state, batch = table.sample(state, key, 1, 1)
            return state, batch.keys.astype(jnp.int32)
        return jax.lax.cond(flag, taken, lambda s: (s, jnp.zeros(1, jnp.int32)), state)
    return one


def _switch_program(table):
    def one(key, flag, state):
        def taken(state):
            state, batch = table.sample(state, key, 1, 1)
            return state, batch.keys.astype(jnp.int32)
        return jax.lax.switch(flag.astype(jnp.int32),
                              [lambda s: (s, jnp.zeros(1, jnp.int32)), taken], state)
    return one


def _while_program(table):
    def one(key, flag, state):
        def body(carry):
            i, state, total = carry
            state, batch = table.sample(state, jax.random.fold_in(key, i), 1, 1)
            return i + 1, state, total + batch.keys[0].astype(jnp.int32)
        _, state, total = jax.lax.while_loop(lambda c: c[0] < 1 + flag.astype(jnp.int32), body,
                                             (0, state, jnp.int32(0)))
        return state, total
    return one


@pytest.mark.parametrize("program", [_cond_program, _switch_program, _while_program])
def test_vmap_of_control_flow_with_a_batched_predicate_is_refused(table, program):
    mapped = jax.vmap(program(table), in_axes=(0, 0, None), out_axes=(None, 0))
    before = table.stats()["samples"]
    with pytest.raises(NotImplementedError, match="every branch and every iteration"):
        jax.jit(mapped)(KEYS, FLAGS, table.state())
    assert table.stats()["samples"] == before  # refused while tracing: nothing ran


@pytest.mark.parametrize("program, expected", [(_cond_program, 4), (_switch_program, 4),
                                               (_while_program, 8)])
def test_vmap_of_control_flow_with_an_unbatched_predicate_runs_the_taken_calls(
        table, program, expected):
    mapped = jax.vmap(program(table), in_axes=(0, None, None), out_axes=(None, 0))
    assert samples_drawn(table, lambda: jax.jit(mapped)(KEYS, True, table.state())) == expected


def test_a_state_batched_by_hand_is_refused(table):
    states = jnp.zeros(3, jnp.uint32)
    with pytest.raises(ValueError, match="table state batched by vmap"):
        jax.vmap(lambda s, k: table.sample(s, k, 1, 1))(states, KEYS[:3])


# -------------------------------------------------------------- fast path
def test_table_state_programs_keep_the_fast_dispatch_path(table, monkeypatch):
    from jax._src.interpreters import pxla
    python_calls = []
    original = pxla.ExecuteReplicated.__call__

    def counting(self, *args):
        python_calls.append(1)
        return original(self, *args)

    monkeypatch.setattr(pxla.ExecuteReplicated, "__call__", counting)
    program = jax.jit(lambda s, k: table.sample(s, k, 4, 2))
    state = table.state()
    for i in range(20):
        state, batch = program(state, jax.random.key(i))
    finish(state)
    assert len(python_calls) <= 3  # the first calls, while JAX's C++ cache fills
    python_calls.clear()
    plain = jax.jit(lambda x: x + 1)  # the count is JAX's Python path: a program without
    for i in range(20):               # table calls goes through it as often
        plain(i)
    assert len(python_calls) <= 3


# ------------------------------------------------------ several devices
SEVERAL_DEVICES = textwrap.dedent("""
    import jax, jax.numpy as jnp, numpy as np
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
    import gearjax as gx

    devices = jax.devices()
    mesh = Mesh(np.array(devices), ("d",))
    replicated, sharded = NamedSharding(mesh, P()), NamedSharding(mesh, P("d"))
    B = 2 * len(devices)

    def finish(*x):
        jax.block_until_ready(x)

    with gx.Table({"x": gx.Column((2,), "float32")}, 64, 4, max_times_sampled=1) as t:
        for i in range(64):
            t.insert({"x": np.full((3, 2), i, np.float32)})
        for out in (replicated, sharded):
            before = t.stats()
            program = jax.jit(lambda s, k: t.sample(s, k, B, 1),
                              out_shardings=(replicated, out))
            state, batch = program(t.state(), jax.random.key(0))
            finish(state, batch)
            after = t.stats()
            assert after["samples"] - before["samples"] == B, (after, before)
            assert before["size"] - after["size"] == B  # consumed once, not per device
            keys = [np.asarray(s.data) for s in batch.keys.addressable_shards]
            full = np.asarray(batch.keys)
            assert len(set(full.tolist())) == B  # consume-once: B distinct rows
            if out is replicated:
                assert all((k == keys[0]).all() for k in keys)  # truly replicated
        stored = jnp.asarray(t.contents()["key"][:B])
        for in_sharding in (replicated, sharded):
            before = t.stats()["priority_updates"]
            update = jax.jit(lambda s, k, p: t.update_priorities(s, k, p),
                             in_shardings=(None, in_sharding, in_sharding))
            state, count = update(t.state(), stored, jnp.full(B, 3.0))
            finish(state, count)
            assert t.stats()["priority_updates"] - before == B
            assert int(count) == B
        before = t.stats()["inserts"]
        insert = jax.jit(lambda s: t.insert_batch(s, {"x": jnp.ones((2, 1, 2))},
                                                  jnp.array([1, 1])))
        finish(insert(t.state()))
        assert t.stats()["inserts"] - before == 2
        # shard_map: every device runs its own call, as the program says.
        per_device = jax.jit(jax.shard_map(
            lambda s, k: t.sample(s, k[0], 1, 1)[1].keys, mesh=mesh,
            in_specs=(P(), P("d")), out_specs=P("d")))
        before = t.stats()["samples"]
        finish(per_device(t.state(), jax.random.split(jax.random.key(2), len(devices))))
        assert t.stats()["samples"] - before == len(devices)
    if len(devices) == 4:  # a shard_map over part of a 2 x 2 mesh is refused
        mesh2 = Mesh(np.array(devices).reshape(2, 2), ("a", "b"))
        with gx.Table({"x": gx.Column((2,), "float32")}, 8, 4) as t:
            t.insert({"x": np.zeros((3, 2), np.float32)})
            partial = jax.jit(jax.shard_map(lambda s, k: t.sample(s, k[0], 1, 1)[1].keys,
                                            mesh=mesh2, in_specs=(P(), P("a")),
                                            out_specs=P("a"), axis_names={"a"}))
            try:
                partial(t.state(), jax.random.split(jax.random.key(0), 2))
            except NotImplementedError as e:
                assert "every mesh axis manual" in str(e)
            else:
                raise AssertionError("a partly automatic shard_map was not refused")
    print("ok")
""")


@pytest.mark.parametrize("devices", [2, 4])
def test_a_jit_over_several_devices_runs_each_table_call_once(tmp_path, devices):
    script = tmp_path / "several_devices.py"
    script.write_text(SEVERAL_DEVICES)
    env = {**os.environ, "XLA_FLAGS": f"--xla_force_host_platform_device_count={devices}",
           "JAX_PLATFORMS": "cpu", "PYTHONPATH": pythonpath(str(Path(__file__).parent))}
    result = subprocess.run([sys.executable, str(script)], env=env, capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-4000:]
    assert result.stdout.strip().endswith("ok")
