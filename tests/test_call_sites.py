"""Call sites (xla_ffi/ffi/call_site.h, gearjax/_ffi.py STAGED): sample and
update_priorities are registered with XLA FFI execution stages, so a compiled
call resolves its table and checks its attributes once, when XLA instantiates
it, and its executions do neither. The per-call registration
(GEARJAX_FFI_STAGES=0) gives the same results and the same errors."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gearjax as gx
from gearjax import _ffi, _gearjax
from conftest import cpu_only_env

COLUMNS = {"x": gx.Column((2,), "float32")}


def _table(**kw) -> gx.Table:
    table = gx.Table(COLUMNS, capacity=16, max_length=8, **kw)
    for i in range(6):
        table.insert({"x": np.full((8, 2), i, np.float32)}, priority=1.0 + i)
    return table


def _counts() -> tuple[int, int]:
    counts = _gearjax.call_site_counts()
    return counts["instantiated"], counts["registry_lookups"]


def test_this_jax_gets_the_staged_cpu_targets():
    # jax 0.10 and 0.11 both offer the type handler _ffi installs first
    # (_cpu_types_register_at_once); if a JAX stops offering it, this says so.
    assert _ffi.STAGED["cpu"] is True


def test_a_scan_instantiates_each_call_once_and_looks_no_table_up():
    table = _table()

    @jax.jit
    def run(key):
        def step(state, k):
            state, batch = table.sample(state, k, batch_size=4, window=2,
                                        strategy=gx.Prioritized(1.0))
            state, _ = table.update_priorities(state, batch.keys,
                                               jnp.full((4,), 2.0, jnp.float32))
            return state, batch["x"].sum()
        return jax.lax.scan(step, table.state(), jax.random.split(key, 50))[1]

    instantiated, lookups = _counts()
    out = run(jax.random.key(0))
    out.block_until_ready()
    # One sample site and one update site, whatever the scan's length; the
    # 50 samples and 50 updates found their table through them.
    assert _counts() == (instantiated + 2, lookups)
    assert table.stats()["samples"] == 200
    run(jax.random.key(1)).block_until_ready()  # the same executable: nothing new
    assert _counts() == (instantiated + 2, lookups)
    assert table.stats()["samples"] == 400


def test_a_table_closed_after_compiling_fails_every_later_execution():
    table = _table(name="gone")
    run = jax.jit(lambda state, key: table.sample(state, key, batch_size=2, window=2))
    state, _ = jax.block_until_ready(run(table.state(), jax.random.key(0)))
    table.close()
    for _ in range(2):  # later calls: JAX's fast path raises ValueError (gearjax/errors.py)
        with pytest.raises((jax.errors.JaxRuntimeError, ValueError),
                           match=r"table 'gone' \(handle \d+\) is closed; this program was "
                                 r"compiled against it") as raised:
            jax.block_until_ready(run(state, jax.random.key(1)))
        assert gx.table_error(raised.value) == "closed"


def _hand_built(table: gx.Table, **changes):
    """A sample call as gearjax builds it, with some attributes changed: what
    only a hand-built call (or a bug) could send."""
    attrs = dict(handle=table.handle, batch=2, strategy=0, alpha=0.0, count=0, window=2,
                 width=2, pad_left=False, columns=(((2,), np.dtype(np.float32)),), cut=0,
                 replace=True)
    attrs.update(changes)
    seed = jnp.zeros((2,), jnp.uint32)
    return jax.jit(lambda state, s: _ffi.sample_call(state, s, **attrs))(table.state(), seed)


BAD_ATTRIBUTES = {
    "strategy": (dict(strategy=99), "unknown sampling strategy 99"),
    "huge strategy": (dict(strategy=2**40), f"unknown sampling strategy {2**40}"),
    "cut": (dict(cut=-1), "unknown window cut -1"),
    "replace": (dict(replace=2), "replace must be 0 or 1"),
    "pad_left": (dict(pad_left=3), "pad_left must be 0 or 1"),
    "window": (dict(window=9, width=9), r"window must be in \[1, max_length=8\]"),
    "alpha": (dict(strategy=2, alpha=float("nan")), "Prioritized alpha must be in"),
    # Results for more or fewer columns than the table has (state, five
    # per-row results, mask, timestep, a column each).
    "more columns": (dict(columns=(((2,), np.dtype(np.float32)),) * 2),
                     "expected 9 results, got 10"),
    "no columns": (dict(columns=()), "expected 9 results, got 8"),
}


@pytest.mark.parametrize("case", BAD_ATTRIBUTES, ids=list(BAD_ATTRIBUTES))
def test_refused_attributes_fail_each_execution_not_the_compilation(case):
    changes, message = BAD_ATTRIBUTES[case]
    table = _table()
    before = table.stats()["samples"]
    for _ in range(2):  # the site keeps its verdict for every execution
        with pytest.raises(jax.errors.JaxRuntimeError, match=message):
            jax.block_until_ready(_hand_built(table, **changes))
    assert table.stats()["samples"] == before  # nothing was sampled


def test_a_handle_no_table_has_fails_as_a_closed_table():
    table = _table()
    with pytest.raises(jax.errors.JaxRuntimeError, match="no table has handle 987654321"):
        jax.block_until_ready(_hand_built(table, handle=987654321))


def test_a_wrong_value_of_gearjax_ffi_stages_is_refused_at_import():
    result = subprocess.run([sys.executable, "-P", "-c", "import gearjax"], capture_output=True,
                            text=True, timeout=120,
                            env=cpu_only_env(GEARJAX_FFI_STAGES="yes"))
    assert result.returncode != 0
    assert "GEARJAX_FFI_STAGES must be 0 or 1, got 'yes'" in result.stderr


# Samples and updates of every strategy, and the errors of bad attributes, as
# JSON: run here (staged) and in a process with GEARJAX_FFI_STAGES=0.
_SCRIPT = textwrap.dedent("""
    import json, sys
    import jax, jax.numpy as jnp, numpy as np
    import gearjax as gx
    from gearjax import _ffi, _gearjax
    sys.path.insert(0, {root!r})
    from test_call_sites import _table, _hand_built, BAD_ATTRIBUTES

    out = {{"staged": _ffi.STAGED, "samples": {{}}, "errors": {{}}}}
    strategies = {{"uniform": gx.Uniform(), "timestep": gx.Timestep(),
                  "prioritized": gx.Prioritized(0.7), "topk": gx.TopK(3),
                  "recent": gx.Recent(4)}}
    for name, strategy in strategies.items():
        table = _table()
        @jax.jit
        def run(key, table=table, strategy=strategy):
            state, batch = table.sample(table.state(), key, batch_size=5, window=3,
                                        strategy=strategy, pad="left")
            state, n = table.update_priorities(state, batch.keys,
                                               jnp.arange(5, dtype=jnp.float32) + 0.5)
            return batch["x"], batch.keys, batch.mask, n
        x, keys, mask, n = run(jax.random.key(3))
        out["samples"][name] = [np.asarray(x).tolist(), np.asarray(keys).tolist(),
                               np.asarray(mask).tolist(), int(n),
                               np.asarray(table.contents()["priority"]).tolist()]
    for case, (changes, _) in BAD_ATTRIBUTES.items():
        try:
            jax.block_until_ready(_hand_built(_table(), **changes))
            out["errors"][case] = None
        except jax.errors.JaxRuntimeError as e:
            out["errors"][case] = str(e).splitlines()[0]
    out["instantiated"] = _gearjax.call_site_counts()["instantiated"]
    print(json.dumps(out))
""")


def _run_script(stages: str) -> dict:
    from pathlib import Path
    root = str(Path(__file__).resolve().parent)
    result = subprocess.run([sys.executable, "-P", "-c", _SCRIPT.format(root=root)],
                            capture_output=True, text=True, timeout=300,
                            env=cpu_only_env(GEARJAX_FFI_STAGES=stages))
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_per_call_and_staged_targets_agree_on_results_and_errors():
    staged, per_call = _run_script("1"), _run_script("0")
    assert staged["staged"]["cpu"] is True and per_call["staged"]["cpu"] is False
    assert staged["instantiated"] > 0 and per_call["instantiated"] == 0
    assert staged["samples"] == per_call["samples"]
    assert staged["errors"] == per_call["errors"]
    assert all(staged["errors"].values())  # every bad attribute failed, in both


_CACHED = textwrap.dedent("""
    import json, sys
    import jax, numpy as np
    jax.config.update("jax_compilation_cache_dir", sys.argv[1])
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)
    hits = []
    jax.monitoring.register_event_listener(
        lambda event, **kw: hits.append(event) if event.endswith("cache_hits") else None)
    import gearjax as gx
    from gearjax import _gearjax
    table = gx.Table({"x": gx.Column((2,), "float32")}, capacity=8, max_length=4)
    for i in range(4):
        table.insert({"x": np.full((4, 2), i, np.float32)})
    run = jax.jit(lambda s, k: table.sample(s, k, 3, 2)[1]["x"])
    x = run(table.state(), jax.random.key(0))
    print(json.dumps({"x": np.asarray(x).tolist(), "hits": len(hits),
                      **_gearjax.call_site_counts()}))
""")


def test_a_program_from_the_persistent_compilation_cache_instantiates_its_sites(tmp_path):
    """JAX's persistent cache hands back a serialized executable: XLA runs the
    instantiate stage for it as for a fresh one, and it samples the same."""
    outs = []
    for _ in range(2):  # the second process loads the program from the cache
        result = subprocess.run([sys.executable, "-P", "-c", _CACHED, str(tmp_path)],
                                capture_output=True, text=True, timeout=300,
                                env=cpu_only_env())
        assert result.returncode == 0, result.stderr[-3000:]
        outs.append(json.loads(result.stdout.strip().splitlines()[-1]))
    assert outs[0]["hits"] == 0 and outs[1]["hits"] > 0  # the second one did load it
    assert outs[0]["x"] == outs[1]["x"]
    assert outs[1]["instantiated"] == 1 and outs[1]["registry_lookups"] == 0
