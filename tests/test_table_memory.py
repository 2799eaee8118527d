"""The memory check counts what a table holds at its worst: a table sampled by
every strategy (eight Prioritized alphas), updated at every key, sampled without
replacement (listing every item) and with cut="full" among short items, and
saved holds no more host memory than the estimate the construction check uses
(xla_ffi/core/table/footprint.h), and not far less; a machine with less memory
than that refuses the table when it is made.
(The check once counted 64 bytes a slot; such a table held about 660.)"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import gearjax as gx
from gearjax import _checks, _gearjax

CAPACITY = 1 << 20

PROGRAM = """
import json, os, sys
import jax, jax.numpy as jnp, numpy as np
import gearjax as gx
from gearjax import _checks, _gearjax

capacity, remover, path = int(sys.argv[1]), sys.argv[2], sys.argv[3]

def rss():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS"):
                return int(line.split()[1]) * 1024

def exercise(table, n):
    key = jax.random.key(0)
    alphas = [gx.Prioritized(a / 10) for a in range(1, 9)]  # every tree a table keeps
    for strategy in [gx.Uniform(), gx.Timestep(), gx.TopK(n), gx.Recent(n)] + alphas:
        table.sample(key, 8, strategy=strategy)
    table.sample(key, 8, replace=False)  # a constrained sample lists every item
    # Full windows of 2 among items of 1 and 2 steps: the length buckets.
    table.sample(key, 8, 2, gx.Prioritized(0.1), cut="full")
    keys = table.contents()["key"]
    table.update_priorities(keys, np.full(keys.size, 2.0))  # every key at once
    table.save(path)

columns = {"x": gx.Column((), "uint8")}
# The same calls on a small table first: JAX's compiled programs and
# caches are not the table's.
small = gx.Table(columns, 64, 2, remover=remover)
for i in range(64):
    small.insert({"x": np.zeros(1 + (i % 4 > 0), np.uint8)})
exercise(small, 64)
before = rss()
table = gx.Table(columns, capacity, 2, remover=remover)
rows = 1 << 16
lengths = jnp.where(jnp.arange(rows) % 4 == 0, 1, 2).astype(jnp.int32)  # a quarter short
for _ in range(capacity // rows):
    table.insert_batch({"x": jnp.zeros((rows, 2), jnp.uint8)}, lengths)
exercise(table, capacity)
held = rss() - before - 2 * capacity  # the arena: two bytes a slot
estimate = _gearjax.worst_bookkeeping_bytes(capacity, 2, _checks.REMOVER_CODES[remover])
print(json.dumps({"held": held, "estimate": estimate}))
"""


def _measure(tmp_path, remover: str) -> dict:
    script = tmp_path / "worst.py"
    script.write_text(textwrap.dedent(PROGRAM))
    done = subprocess.run([sys.executable, str(script), str(CAPACITY), remover,
                           str(tmp_path / "worst.gx")], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("remover", ["fifo", "min_priority"])
def test_the_estimate_covers_what_a_table_holds_at_its_worst(tmp_path, monkeypatch, remover):
    measured = _measure(tmp_path, remover)
    held, estimate = measured["held"], measured["estimate"]
    assert held <= estimate <= 1.5 * held, measured  # counts it all, and not far more
    # A machine with memory for the steps and what the table was seen to hold
    # refuses the table: its estimate is more.
    monkeypatch.setattr(_checks, "physical_memory", lambda: 2 * CAPACITY + held)
    with pytest.raises(ValueError, match="bookkeeping at its worst"):
        gx.Table({"x": gx.Column((), "uint8")}, CAPACITY, 2, remover=remover)


def test_the_estimate_grows_with_the_slots_and_the_remover():
    fifo, lifo, heap = (_gearjax.worst_bookkeeping_bytes(1 << 20, 1, _checks.REMOVER_CODES[r])
                        for r in ("fifo", "lifo", "min_priority"))
    assert fifo == lifo < heap
    assert _gearjax.worst_bookkeeping_bytes(1 << 21, 1, 0) > 1.9 * fifo - (64 << 20)
    with pytest.raises(ValueError):
        _gearjax.worst_bookkeeping_bytes(8, 1, 7)  # no such remover
    assert np.isfinite(_gearjax.worst_bookkeeping_bytes(_checks.MAX_CAPACITY,
                                                        _checks.MAX_LENGTH, 2))
