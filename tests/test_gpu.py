"""On a CUDA GPU: tables are GPU-mapped, and sampling and priority updates
through the CUDA handlers give exactly what the CPU handlers give, inside jit
and scan, also while Python threads insert. Skipped, with the reason, where
JAX sees no GPU (conftest.py)."""

from __future__ import annotations

import threading

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gearjax as gx
from conftest import COLUMNS, fill
from reference import check_batch

pytestmark = pytest.mark.gpu
STRATEGIES = [gx.Uniform(), gx.Timestep(), gx.Prioritized(0.7), gx.TopK(5), gx.Recent(4)]


def on(platform: str):
    return jax.default_device(jax.devices(platform)[0])


@pytest.fixture
def gpu_table(rng):
    table = gx.Table(COLUMNS, capacity=32, max_length=12)
    yield table, fill(table, rng, 40)  # 40 into 32 slots: evictions too
    table.close()


def test_tables_are_gpu_mapped(gpu_table):
    table, _ = gpu_table
    assert table.stats()["memory"] == "gpu-mapped pinned host"


@pytest.mark.parametrize("strategy", STRATEGIES, ids=lambda s: type(s).__name__)
@pytest.mark.parametrize("window, pad", [(1, "left"), (7, "right"), (None, "left")])
def test_gpu_sample_equals_cpu_sample(gpu_table, strategy, window, pad):
    table, stored = gpu_table
    key = jax.random.key(3)
    sample = jax.jit(lambda k: table.sample(k, 64, window, strategy, pad))
    with on("gpu"):
        gpu = sample(key)
    with on("cpu"):
        cpu = sample(jax.device_put(key, jax.devices("cpu")[0]))
    assert next(iter(gpu.keys.devices())).platform == "gpu"
    for g, c in zip(jax.tree.leaves(gpu), jax.tree.leaves(cpu)):
        np.testing.assert_array_equal(np.asarray(g), np.asarray(c))
    check_batch(gpu, stored, COLUMNS, window or table.max_length, pad)


def test_gpu_scan_with_priority_updates(gpu_table):
    table, _ = gpu_table

    def step(carry, key):
        batch = table.sample(key, 1, 1, gx.Prioritized(1.0))
        table.update_priorities(batch.keys, jnp.zeros(1))
        return carry, batch.keys[0]

    with on("gpu"):
        _, visited = jax.jit(lambda ks: jax.lax.scan(step, 0, ks))(
            jax.random.split(jax.random.key(0), len(table)))
    assert sorted(np.asarray(visited).tolist()) == sorted(table.contents()["key"].tolist())


def test_gpu_sampling_while_threads_insert_never_tears(gpu_table):
    from test_concurrency import COLUMNS as SELF_DESCRIBING, check_rows, trajectory

    table = gx.Table(SELF_DESCRIBING, capacity=8, max_length=32)
    for i in range(8):
        table.insert(trajectory(i, 32))
    stop, errors = threading.Event(), []

    def inserter():
        n = 0
        try:
            while not stop.is_set():
                table.insert(trajectory(100_000 + n, int(n % 32) + 1))
                n += 1
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    thread = threading.Thread(target=inserter)
    thread.start()
    sample = jax.jit(lambda k: table.sample(k, 256, 8, gx.Uniform(), pad="right"))
    try:
        with on("gpu"):
            for i in range(200):
                b = sample(jax.random.key(i))
                host = {name: np.asarray(b[name]) for name in SELF_DESCRIBING}
                host.update(keys=np.asarray(b.keys), start=np.asarray(b.start),
                            mask=np.asarray(b.mask), timestep=np.asarray(b.timestep))
                check_rows(host, 8)
    finally:
        stop.set()
        thread.join()
        table.close()
    assert not errors
