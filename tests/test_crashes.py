"""The crash suite: hostile calls, each found by adversarial testing on an
earlier version (where some killed the process with SIGSEGV, aborted inside
XLA, or silently wrapped), run in subprocesses. The suite fails on any signal,
on any exception other than the clear ones the contract promises, and on a
hostile call that quietly succeeds with a wrong result."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import pytest

PRELUDE = textwrap.dedent("""
    import math, os, sys, threading, time
    import jax, jax.numpy as jnp, numpy as np
    import gearjax as gx

    CLEAR = (TypeError, ValueError, KeyError, TimeoutError, RuntimeError, gx.CheckpointError,
             jax.errors.JaxRuntimeError)
    ON_GPU = jax.default_backend() == "gpu"  # where the documented behaviour differs

    def table(capacity=8):
        t = gx.Table({"x": gx.Column((2,), "float32"), "n": gx.Column((), "int32")},
                     capacity=capacity, max_length=6, name="hostile")
        for i in range(5):
            t.insert({"x": np.full((3, 2), i, np.float32), "n": np.arange(3)}, priority=1.0 + i)
        return t

    def expect(name, call, *errors, check=None):
        # errors: the exception types the contract promises (empty: must succeed)
        print("try", name, flush=True)
        try:
            result = call()
            result = jax.block_until_ready(result)
        except CLEAR as e:
            if not errors or not isinstance(e, errors):
                print("FAIL", name, "raised", type(e).__name__, str(e)[:200], flush=True)
                sys.exit(1)
            print("ok", name, type(e).__name__, str(e).splitlines()[0][:160], flush=True)
            return
        if errors:
            print("FAIL", name, "was accepted:", str(result)[:200], flush=True)
            sys.exit(1)
        if check is not None and not check(result):
            print("FAIL", name, "wrong result:", str(result)[:200], flush=True)
            sys.exit(1)
        print("ok", name, "succeeded", flush=True)
""")

GROUPS = {
    "huge counts": """
        t = table()
        keys = set(t.contents()["key"].tolist())
        newest = int(t.contents()["key"][-1])
        for make in (lambda: gx.TopK(2**63), lambda: gx.Recent(2**63), lambda: gx.Recent(10**30),
                     lambda: gx.TopK(2**64 + 1)):
            s = make()
            expect(f"{s} eager", lambda: t.sample(jax.random.key(0), 16, 2, s),
                   check=lambda b: set(np.asarray(b.keys).tolist()) == keys)
            expect(f"{s} jit", lambda: jax.jit(lambda st, k: t.sample(st, k, 16, 2, s)[1].keys)(
                t.state(), jax.random.key(1)), check=lambda k: set(np.asarray(k).tolist()) == keys)
            def draw(state, k):
                state, batch = t.sample(state, k, 4, 2, s)
                return state, batch.keys
            expect(f"{s} scan", lambda: jax.jit(lambda ks: jax.lax.scan(
                draw, t.state(), ks)[1])(jax.random.split(jax.random.key(2), 3)),
                check=lambda k: set(np.asarray(k).ravel().tolist()) <= keys)
        expect("Recent(1) is the newest", lambda: t.sample(jax.random.key(0), 8, 1, gx.Recent(1)),
               check=lambda b: set(np.asarray(b.keys).tolist()) == {newest})
        for batch in (2**62, 2**63, 2**64, 2**31, -1, 0):
            expect(f"batch_size={batch}", lambda: t.sample(jax.random.key(0), batch, 2),
                   ValueError)
        expect("batch_size=2.0", lambda: t.sample(jax.random.key(0), 2.0), TypeError)
        expect("window=2**40", lambda: t.sample(jax.random.key(0), 2, 2**40), ValueError)
        expect("a sample larger than memory",
               lambda: t.sample(jax.random.key(0), 2**31 - 1, 6), ValueError)
        for bad in (lambda: gx.TopK(0), lambda: gx.Recent(-5), lambda: gx.TopK(2.5),
                    lambda: gx.Prioritized(9.0), lambda: gx.Prioritized(float("nan")),
                    lambda: gx.Prioritized(1e308)):
            expect("bad strategy", bad, TypeError, ValueError)
    """,
    "insert_batch wraps and 64-bit columns": """
        t = table()
        columns = {"x": np.zeros((1, 4, 2), np.float32), "n": np.zeros((1, 4), np.int32)}
        before = t.stats()["inserts"]
        expect("length 2**32 + 5", lambda: t.insert_batch(columns, np.array([2**32 + 5])),
               ValueError)
        expect("length 2**63 - 1", lambda: t.insert_batch(columns, np.array([2**63 - 1])),
               ValueError)
        expect("length -2**32 + 2", lambda: t.insert_batch(columns, np.array([-2**32 + 2])),
               ValueError)
        expect("uint32 length 2**32 - 1 in jit", lambda: jax.jit(lambda l: t.insert_batch(
            t.state(), {"x": jnp.zeros((1, 4, 2)), "n": jnp.zeros((1, 4), jnp.int32)}, l)[1])(
            jnp.array([2**32 - 1], jnp.uint32)), jax.errors.JaxRuntimeError)
        assert t.stats()["inserts"] == before, "a refused insert_batch inserted"
        expect("int values too large for the int32 column",
               lambda: t.insert_batch({"x": np.zeros((1, 4, 2)), "n": np.full((1, 4), 2**40)},
                                      np.array([4])), ValueError)
        w = gx.Table({"big": gx.Column((), "int64")}, 4, 4)
        expect("int64 column without x64", lambda: w.insert_batch(
            {"big": np.array([[2**40, 1]])}, np.array([2])), TypeError)
        with jax.enable_x64(True):
            expect("int64 column with x64", lambda: w.insert_batch(
                {"big": np.array([[2**40, -7]])}, np.array([2])),
                check=lambda keys: True)
        expect("the int64 values arrive whole", lambda: w.get(int(w.contents()["key"][0])),
               check=lambda got: got["big"].tolist() == [2**40, -7])
        assert t.stats()["inserts"] == before
    """,
    "priorities at the limits": """
        t = table()
        keys = t.contents()["key"]
        t.sample(jax.random.key(0), 1, 1, gx.Prioritized(8.0))
        expect("priority 1e308", lambda: t.update_priorities(keys[:1], [1e308]), ValueError)
        expect("priority 5e-324", lambda: t.update_priorities(keys[:1], [5e-324]), ValueError)
        in_jit = lambda: jax.jit(lambda p: t.update_priorities(  # noqa: E731
            t.state(), keys[:1], p)[1])(jnp.array([3e38], jnp.float32))
        if ON_GPU:  # a GPU update never fails its program: -1, and the next call raises
            expect("priority 1e308 in jit", in_jit, check=lambda count: int(count) == -1)
            expect("is raised by the next call", lambda: t.contents(), ValueError)
        else:
            expect("priority 1e308 in jit", in_jit, jax.errors.JaxRuntimeError)
        expect("a float32 subnormal priority stays positive in jit", lambda: jax.jit(
            lambda p: t.update_priorities(t.state(), keys, p)[1])(
            jnp.array([0, 0, 0, 0, 1e-40], jnp.float32)))
        expect("and is drawn", lambda: t.sample(jax.random.key(1), 8, 1, gx.Prioritized(1.0)),
               check=lambda b: set(np.asarray(b.keys).tolist()) == {int(keys[4])} and
               np.isfinite(np.asarray(b.probability)).all())
        expect("priority 1e30 ** 8", lambda: t.update_priorities(keys, [1e30] * 5))
        expect("finite probabilities at 1e30 ** 8",
               lambda: t.sample(jax.random.key(2), 64, 1, gx.Prioritized(8.0)),
               check=lambda b: np.isfinite(np.asarray(b.probability)).all()
               and (np.asarray(b.probability) > 0).all())
        expect("insert_batch priority overflow is all or nothing", lambda: jax.jit(
            lambda: t.insert_batch(t.state(), {"x": jnp.zeros((3, 2, 2)),
                                               "n": jnp.zeros((3, 2), jnp.int32)},
                                   jnp.array([2, 2, 2]), jnp.array([1.0, 1.0, 3e38]))[1])(),
               jax.errors.JaxRuntimeError)
        assert len(t) == 5 and t.stats()["inserts"] == 5, "a partial insert_batch"
        expect("SampleToInsertRatio(1e308)", lambda: gx.SampleToInsertRatio(1e308, 1, 10.0),
               ValueError)
        expect("SampleToInsertRatio(error_buffer=1e308)",
               lambda: gx.SampleToInsertRatio(1.0, 1, 1e308), ValueError)
        expect("MinSize(timeout=1e300)", lambda: gx.MinSize(1, 1e300), ValueError)
    """,
    "keys and get": """
        t = table()
        for key in (1.5, "1", True, None, np.float64(2.0), [0]):
            expect(f"get({key!r})", lambda: t.get(key), TypeError)
        for key in (2**70, -1, 2**63 - 1, -2**63):
            expect(f"get({key})", lambda: t.get(key), KeyError)
        expect("update of keys at the int64 edges",
               lambda: t.update_priorities([2**63 - 1, -2**63, 0], [1.0, 1.0, 1.0]),
               check=lambda n: n <= 1)
        expect("update of a key beyond int64", lambda: t.update_priorities([2**64], [1.0]),
               TypeError, ValueError)
    """,
    "closing under fire": """
        t = table()
        @jax.jit
        def sample(state, k):
            state, batch = t.sample(state, k, 64, 4)
            return state, batch.keys
        first, _ = jax.block_until_ready(sample(t.state(), jax.random.key(0)))
        stop = threading.Event()
        errors = []
        def sampler():
            i, state = 0, first
            while not stop.is_set():
                try:  # a later call fails as ValueError on JAX's fast path
                    state, _ = jax.block_until_ready(sample(state, jax.random.key(i)))
                except (jax.errors.JaxRuntimeError, ValueError) as e:
                    if gx.table_error(e) != "closed" or "is closed" not in str(e):
                        errors.append(e)
                    return
                i += 1
        threads = [threading.Thread(target=sampler) for _ in range(2)]
        for th in threads:
            th.start()
        time.sleep(0.3)
        t.close()
        stop.set()
        for th in threads:
            th.join(20)
        assert not errors, errors
        assert t.stats()["bytes_reserved"] == 0, "close did not free the memory"
        expect("a compiled sample of the closed table",
               lambda: sample(first, jax.random.key(9)), jax.errors.JaxRuntimeError,
               ValueError)
        expect("eager use of the closed table", lambda: t.sample(jax.random.key(9), 2),
               RuntimeError)
        expect("insert into the closed table", lambda: t.insert({"x": np.zeros((1, 2)),
                                                                 "n": np.zeros(1)}), RuntimeError)
        expect("update of the closed table", lambda: t.update_priorities([0], [1.0]),
               RuntimeError)
    """,
    "hostile files": """
        expect("load /dev/zero", lambda: gx.Table.load("/dev/zero"), gx.CheckpointError)
        expect("load a directory", lambda: gx.Table.load("/tmp"), gx.CheckpointError)
        fifo = f"/tmp/gearjax-fifo-{os.getpid()}"
        os.mkfifo(fifo)
        try:
            expect("load a FIFO", lambda: gx.Table.load(fifo), gx.CheckpointError)
        finally:
            os.unlink(fifo)
        expect("a table larger than memory",
               lambda: gx.Table({"x": gx.Column((2**20,), "float64")}, 2**20, 2**10), ValueError)
        expect("a column too large to address",
               lambda: gx.Table({"x": gx.Column((2**40,), "float32")}, 2**31, 2**31), ValueError)
    """,
}


@pytest.mark.parametrize("group", list(GROUPS))
def test_hostile_calls_raise_clear_errors_and_never_crash(group, tmp_path):
    script = tmp_path / "hostile.py"
    script.write_text(PRELUDE + textwrap.dedent(GROUPS[group]) + "\nprint('done', flush=True)\n")
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                            timeout=300, env=env, cwd=tmp_path)
    tried = [line for line in result.stdout.splitlines() if line.startswith("try ")]
    last = tried[-1][4:] if tried else "(before the first call)"
    if result.returncode < 0:
        pytest.fail(f"killed by {signal.Signals(-result.returncode).name} during {last!r}\n"
                    f"{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
    assert result.returncode == 0, f"{last!r}:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    assert result.stdout.rstrip().endswith("done")
