"""Lifecycle: close() frees a table's memory once the samples already inside it
have finished, even while compiled functions that sampled it are alive; a
table nobody holds is freed at once (no reference cycle), with the programs
its eager samples compiled; compiled programs that touch a closed table fail
naming it; what happens to compiled functions after Table.load (they keep the
table they were traced with), and the memory of reloading the taught way
against passing tables as static arguments."""

from __future__ import annotations

import gc
import os
import threading
import time
import weakref
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gearjax as gx

COLUMNS = {"x": gx.Column((1024,), "float32")}  # 4 KiB a step
MB = 1 << 20


def resident_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def big_table(name="big") -> gx.Table:
    """A 256 MiB table, filled so its memory is really resident."""
    table = gx.Table(COLUMNS, capacity=64, max_length=1024, name=name, placement="host")
    block = np.ones((1024, 1024), np.float32)
    for _ in range(64):
        table.insert({"x": block})
    return table


@pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="reads Linux's /proc")
def test_close_frees_the_memory_while_a_jitted_function_that_sampled_it_is_alive():
    table = big_table()
    sample = jax.jit(lambda s, k: table.sample(s, k, 8, 16)[1]["x"].sum())  # holds `table`
    sample(table.state(), jax.random.key(0)).block_until_ready()
    before = resident_bytes()
    table.close()
    assert table.stats()["bytes_reserved"] == 0
    assert before - resident_bytes() > 200 * MB, "close() left the table resident"
    assert sample is not None  # the function (and the Table object) are still alive


@pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="reads Linux's /proc")
def test_a_table_nobody_holds_is_freed_at_once_without_the_cycle_collector():
    gc.disable()
    try:
        table = big_table()
        table.sample(jax.random.key(0), 4, 8)  # eager sampling compiles and caches a program
        ref = weakref.ref(table)
        before = resident_bytes()
        del table
        assert ref() is None, "a reference cycle keeps the table alive"
        assert before - resident_bytes() > 200 * MB
    finally:
        gc.enable()


def live_programs() -> int:
    """The compiled programs the default backend's client holds now (where
    eager samples compile; on the CPU each has its own memory maps)."""
    return len(jax.devices()[0].client.live_executables())


def sampled_table() -> gx.Table:
    """A small table, sampled eagerly once (which compiles its sample)."""
    table = gx.Table({"x": gx.Column((4,), "float32")}, capacity=8, max_length=4)
    table.insert({"x": np.ones((3, 4), np.float32)})
    jax.block_until_ready(table.sample(jax.random.key(0), 2, window=2)["x"])
    return table


def test_a_dropped_tables_eager_sample_programs_are_freed_with_it():
    """Eager samples compile a program per table (the handle is compiled in);
    the table owns it, so dropping the table frees it at once, without the
    cycle collector. Before, JAX's caches kept every table's program until
    jax.clear_caches(): 6 memory maps and 1.6 MiB a table
    (scripts/bench_table_churn.py)."""
    sampled_table()  # what every table's first sample shares (the key's program)
    gc.collect()
    before = live_programs()
    gc.disable()
    try:
        for _ in range(20):
            sampled_table()
            assert live_programs() == before, "a dropped table's program is still alive"
    finally:
        gc.enable()
    table = sampled_table()
    for seed in range(3):  # the same arguments again: no new program
        jax.block_until_ready(table.sample(jax.random.key(seed), 2, window=2)["x"])
    assert live_programs() == before + 1
    del table
    assert live_programs() == before


def test_a_jitted_step_over_a_table_compiles_once_per_table():
    """A user's jitted step closing over a table compiles once for it, however
    often it runs; the table's own jitted sample is inlined into it."""
    from jax import monitoring
    compiled = []

    def listen(event: str, _duration: float, **_kwargs) -> None:
        if event == "/jax/core/compile/backend_compile_duration":
            compiled.append(event)

    tables = [sampled_table() for _ in range(3)]
    steps = [jax.jit(lambda s, k, t=t: t.sample(s, k, 2, window=2)[0]) for t in tables]
    state = tables[0].state()
    monitoring.register_event_duration_secs_listener(listen)
    try:
        for _ in range(3):
            for step in steps:
                state = step(state, jax.random.key(0))
        jax.block_until_ready(state)
    finally:
        monitoring.unregister_event_duration_listener(listen)
    assert len(compiled) == len(tables)


def test_programs_compiled_against_a_closed_table_fail_naming_it():
    table = gx.Table({"x": gx.Column((), "float32")}, 4, 4, name="replay")
    table.insert({"x": np.zeros(2)})
    sample = jax.jit(lambda s, k: table.sample(s, k, 2))
    state, _ = jax.block_until_ready(sample(table.state(), jax.random.key(0)))
    handle = table.handle
    table.close()
    with pytest.raises(Exception, match=rf"table 'replay' \(handle {handle}\) is closed"):
        jax.block_until_ready(sample(state, jax.random.key(1)))
    with pytest.raises(RuntimeError, match="'replay'.*closed"):
        table.sample(jax.random.key(1), 2)


def test_close_waits_for_a_sample_inside_then_frees():
    """A sample blocked on the rate limiter is inside the table: close() wakes it
    (it fails, naming the close), and frees the memory once it has left."""
    limiter = gx.MinSize(3, timeout=30.0)
    table = gx.Table({"x": gx.Column((), "float32")}, 4, 4, rate_limiter=limiter, name="limited")
    table.insert({"x": np.zeros(2)})
    errors = []

    def blocked():
        try:
            jax.block_until_ready(table.sample(jax.random.key(0), 1))
        except Exception as e:  # noqa: BLE001 - the error is what we check
            errors.append(e)

    thread = threading.Thread(target=blocked)
    thread.start()
    time.sleep(0.3)  # the sample waits for a third trajectory
    start = time.perf_counter()
    table.close()
    thread.join(10)
    assert time.perf_counter() - start < 10
    assert len(errors) == 1 and "closed" in str(errors[0])
    assert table.stats()["bytes_reserved"] == 0


def test_close_is_idempotent_and_everything_after_it_is_refused():
    table = gx.Table({"x": gx.Column((), "float32")}, 4, 4)
    table.insert({"x": np.zeros(1)})
    table.close()
    table.close()
    for call in (lambda: table.insert({"x": np.zeros(1)}), lambda: table.contents(),
                 lambda: table.get(0), lambda: table.update_priorities([0], [1.0]),
                 lambda: table.sample(jax.random.key(0), 1), lambda: table.save("/tmp/x.gx")):
        with pytest.raises(RuntimeError, match="closed"):
            call()
    assert table.closed and "closed" in repr(table)


def make_step(table):
    """The pattern the docs teach after Table.load: a function that makes the
    jitted step closing over the table it is given; the step takes and returns
    a table state."""
    @jax.jit
    def step(state, key):
        state, batch = table.sample(state, key, 4)
        return state, batch["x"].sum()

    return step


def test_functions_compiled_against_a_table_keep_it_after_load(tmp_path):
    """What the docs prescribe after Table.load: programs keep the table they
    were traced with; make the jitted function again for the new table."""
    old = gx.Table({"x": gx.Column((), "float32")}, 8, 4, name="old")
    for i in range(3):
        old.insert({"x": np.full(2, float(i))})
    old.save(tmp_path / "t.gx")
    closure = jax.jit(lambda s, k: old.sample(s, k, 4))
    old_state, _ = jax.block_until_ready(closure(old.state(), jax.random.key(0)))

    new = gx.Table.load(tmp_path / "t.gx")
    assert new.handle != old.handle and new.name == "old"
    new.insert({"x": np.full(2, 100.0)})  # the loaded table moves on
    old_samples = old.stats()["samples"]
    old_state, _ = jax.block_until_ready(closure(old_state, jax.random.key(1)))
    assert old.stats()["samples"] == old_samples + 4  # still the old table
    step = make_step(new)
    state, total = step(new.state(), jax.random.key(2))
    assert float(total) == float(jax.jit(lambda s, k: new.sample(s, k, 4)[1]["x"].sum())(
        new.state(), jax.random.key(2)))
    old.close()
    with pytest.raises(Exception, match="table 'old'.*is closed"):
        jax.block_until_ready(closure(old_state, jax.random.key(3)))
    state, total = step(state, jax.random.key(4))
    assert total.shape == ()  # the loaded table's program still works
    new.close()


RELOAD = """
import gc, os, sys
import jax, numpy as np
import gearjax as gx
from test_lifecycle import make_step

def rss():
    return int(open("/proc/self/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

path, pattern = sys.argv[1], sys.argv[2]
static = jax.jit(lambda t, s, k: t.sample(s, k, 4, 8)[1]["x"].sum(), static_argnums=0)
grown = []
for n in range(6):
    table = gx.Table.load(path)  # 64 MiB
    step = make_step(table) if pattern == "taught" else lambda s, k, t=table: static(t, s, k)
    jax.block_until_ready(step(table.state(), jax.random.key(n)))
    del table, step
    gc.collect()
    grown.append(rss())
print(" ".join(str((r - grown[0]) >> 20) for r in grown))
jax.clear_caches()
gc.collect()
print((rss() - grown[0]) >> 20)
"""


@pytest.mark.parametrize("pattern", ["taught", "static"])
def test_reloading_a_table_the_taught_way_frees_each_replaced_one(tmp_path, pattern):
    """Six loads of a 64 MiB table, each with its jitted step, the old ones
    dropped: the taught pattern (a step made anew, closing over the table)
    holds one table at a time; a table passed as a static argument stays in
    jit's cache with its memory (what the docs warn of) until
    jax.clear_caches()."""
    import subprocess
    import sys
    from conftest import cpu_only_env, pythonpath

    table = gx.Table({"x": gx.Column((1024,), "uint8")}, capacity=1024, max_length=64)
    rows = np.ones((64, 1024), np.uint8)
    for _ in range(1024):
        table.insert({"x": rows})
    table.save(tmp_path / "big.gx")
    table.close()
    script = tmp_path / "reload.py"
    script.write_text(RELOAD)
    done = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "big.gx"), pattern], capture_output=True,
        text=True, timeout=300,
        env=cpu_only_env(PYTHONPATH=pythonpath(str(Path(__file__).parent))))
    assert done.returncode == 0, done.stderr[-3000:]
    growth, after_clear = done.stdout.splitlines()
    growth = [int(g) for g in growth.split()]
    if pattern == "taught":
        assert max(growth) < 32, growth  # MiB: no table kept
    else:
        assert growth[-1] >= 4 * 64, growth  # a table kept per load
        assert int(after_clear) < 32


def test_closing_a_table_frees_its_eager_programs():
    """close() drops the table's jitted sample, insert_batch and update: closed
    tables kept referenced hold no programs (they held one each, 6 memory maps
    and 1.7 MiB)."""
    def used_and_closed() -> gx.Table:
        table = sampled_table()
        state, _ = table.insert_batch(table.state(), {"x": jnp.ones((2, 3, 4))},
                                      jnp.array([3, 2]))
        table.update_priorities(state, jnp.array([0, 1]), jnp.array([2.0, 3.0]))
        table.close()
        return table

    used_and_closed()
    gc.collect()
    before = live_programs()
    kept = [used_and_closed() for _ in range(5)]
    assert live_programs() == before, len(kept)


def test_a_dropped_tables_insert_batch_and_update_programs_are_freed_with_it():
    """Eager insert_batch and update_priorities with a state compile a program a
    table; JAX's primitive cache kept each until jax.clear_caches() (1.4 MiB a
    table); the table owns them now."""
    def used() -> None:
        table = gx.Table({"x": gx.Column((4,), "float32")}, capacity=8, max_length=4)
        state, keys = table.insert_batch(table.state(), {"x": jnp.ones((2, 3, 4))},
                                         jnp.array([3, 2]))
        table.update_priorities(state, keys, jnp.array([2.0, 3.0]))

    used()
    gc.collect()
    before = live_programs()
    for _ in range(5):
        used()
    assert live_programs() == before
