"""Inserts that never wait for a GPU priority update (issue 48, item 1), run on
the CPU: while an update kernel may run, the Prioritized trees are the
kernel's, so an insert that evicts nothing publishes its record at once and
defers its leaves (Table::deferred_leaves_). The next update kernel sets them
before its own entries (core/gpu/update_block.h, phase 0), or the host does once
no kernel may run. Either way the trees end exactly as if the insert had
written them itself. The kernels are the emulator's (the kernel's own phases
thread by thread), as in test_gpu_update_kernel_logic.py."""

from __future__ import annotations

import threading

import jax
import numpy as np
import pytest

import gearjax as gx

COLUMNS = {"x": gx.Column((), "float32")}
DEFERRED = "a priority update from an earlier GPU program failed and changed nothing"

pytestmark = pytest.mark.usefixtures("cpu_device")


def make_table(capacity: int, inserts: int, **kwargs) -> gx.Table:
    """`inserts` trajectories of priority 0 (every fifth) or in [0.1, 10),
    and a Prioritized(1.0) tree: only such tables are updated by a kernel."""
    table = gx.Table(COLUMNS, capacity=capacity, max_length=4, placement="host", **kwargs)
    rng = np.random.default_rng(0)
    for i in range(inserts):
        table.insert({"x": np.zeros(1 + i % 3, np.float32)},
                     priority=0.0 if i % 5 == 0 else float(rng.uniform(0.1, 10)))
    prioritized_draws(table, 1.0)
    return table


def contents(table: gx.Table) -> dict[int, float]:
    c = table.contents()
    return dict(zip(c["key"].tolist(), c["priority"].tolist()))


def prioritized_draws(table: gx.Table, alpha: float, seed: int = 7):
    batch = table.sample(jax.random.key(seed), 256, strategy=gx.Prioritized(alpha))
    return np.asarray(batch.keys), np.asarray(batch.probability)


def assert_trees_exact(table: gx.Table, alphas=(1.0,)):
    """Every Prioritized draw's probability is its key's weight over the sum
    of all weights, as trees rebuilt from the records give: a leaf left unset
    (or a stale ancestor) would be off by a whole weight."""
    priorities = contents(table)
    for alpha in alphas:
        weights = {k: (p ** alpha if p > 0 else 0.0) for k, p in priorities.items()}
        total = sum(weights.values())
        keys, probability = prioritized_draws(table, alpha)
        expected = np.array([weights[int(k)] / total for k in keys])
        np.testing.assert_allclose(probability, expected, rtol=1e-6)


def insert_in_thread(table, priorities) -> tuple[threading.Event, list]:
    done, keys = threading.Event(), []

    def run():
        for p in priorities:
            keys.append(table.insert({"x": np.ones(2, np.float32)}, priority=p))
        done.set()

    threading.Thread(target=run, daemon=True).start()
    return done, keys


@pytest.mark.parametrize("who", ["host", "next kernel", "next kernel, refused"])
def test_an_insert_publishes_while_an_update_kernel_may_run(emulated_mapping, who):
    with make_table(capacity=64, inserts=20) as table:  # room: no insert evicts
        prioritized_draws(table, 0.5)  # a second tree: both get the deferred leaves
        live = np.array(list(contents(table)), np.int64)
        first = emulated_mapping.begin_gpu_update(table.handle, live[:4], np.full(4, 2.0))
        done, new = insert_in_thread(table, [3.0, 0.0, 5.0])
        assert done.wait(10), "an insert that evicts nothing waited for the GPU update"
        if who == "host":
            assert first.run(16) == 4
        else:
            # Begun while the first may run: it takes the deferred leaves. Its
            # own entry for a new key (7.0) wins over the deferred leaf (5.0).
            values = np.array([np.nan if "refused" in who else 1.0, 7.0])
            second = emulated_mapping.begin_gpu_update(table.handle,
                                                       np.array([live[4], new[2]]), values)
            assert first.run(16) == 4
            assert second.run(7) == (-1 if "refused" in who else 2)
            if "refused" in who:
                with pytest.raises(ValueError, match=DEFERRED):
                    table.contents()
        expected = {new[0]: 3.0, new[1]: 0.0, new[2]: 5.0 if "refused" in who or who == "host"
                    else 7.0}
        assert {k: contents(table)[k] for k in new} == expected
        assert_trees_exact(table, (1.0, 0.5))


def test_insert_many_publishes_while_an_update_kernel_may_run(emulated_mapping):
    with make_table(capacity=64, inserts=20) as table:
        live = np.array(list(contents(table)), np.int64)
        first = emulated_mapping.begin_gpu_update(table.handle, live[:4], np.full(4, 2.0))
        done = threading.Event()
        threading.Thread(target=lambda: (table.insert_many(
            [{"x": np.ones(2, np.float32)}] * 3, priorities=[1.0, 2.0, 3.0]), done.set()),
            daemon=True).start()
        assert done.wait(10), "insert_many waited for the GPU update"
        assert first.run(16) == 4
        assert_trees_exact(table)


def test_a_gpu_sample_that_could_draw_only_deferred_leaves_waits_for_the_update(
        emulated_mapping):
    """Every stored priority is 0 and an update kernel may still run: a new
    positive item's leaf is deferred, so the trees the GPU draws from are all
    zero though the table holds a positive priority. The CUDA handler must
    then wait for the stream (WaitsForStagedUpdates) rather than draw empty
    rows; once the kernel has run, the GPU sample sets the leaf and draws it."""
    with make_table(capacity=64, inserts=20) as table:
        live = np.array(list(contents(table)), np.int64)
        emulated_mapping.use_gpu_completions(table.handle)
        code = gx.Prioritized(1.0).code

        def waits() -> bool:
            return emulated_mapping.waits_for_staged_updates(table.handle, code, 1.0)

        assert emulated_mapping.begin_gpu_update(table.handle, live,
                                                 np.zeros(len(live))).run(16) == len(live)
        held = emulated_mapping.begin_gpu_update(table.handle, live[:1], np.zeros(1))
        done, new = insert_in_thread(table, [4.0])
        assert done.wait(10), "the insert waited for the GPU update"
        assert waits(), "a GPU sample would draw from trees holding no positive leaf"
        assert held.run(16) == 1
        assert not waits()
        keys, _, probability, *_ = emulated_mapping.emulate_gpu_select(
            table.handle, (1, 2), 8, code, 1.0, 0, 1)
        assert keys.tolist() == [new[0]] * 8 and np.all(probability == 1.0)


def test_kernels_and_publishing_inserts_together_keep_the_trees_exact(emulated_mapping):
    """Actors insert (never evicting) while a learner's updates run as kernels,
    some begun while another may still run (they take the deferred leaves),
    on one stream or two; every insert goes through without waiting for a
    kernel, and at the end the trees are exact and the counts add up."""
    with make_table(capacity=4096, inserts=64) as table:
        errors: list[BaseException] = []
        stop = threading.Event()
        inserted = [0, 0]

        def actor(index):
            rng = np.random.default_rng(index)
            try:
                while not stop.is_set() and inserted[index] < 1500:
                    table.insert({"x": np.ones(2, np.float32)}, priority=float(rng.uniform(0, 3)))
                    inserted[index] += 1
            except BaseException as e:  # noqa: BLE001 - reported below
                errors.append(e)

        threads = [threading.Thread(target=actor, args=(i,)) for i in range(2)]
        for t in threads:
            t.start()
        rng = np.random.default_rng(9)
        counts = []
        for _ in range(100):
            keys = rng.choice(np.array(list(contents(table)), np.int64), 48)
            stream = int(rng.integers(1, 3))
            first = emulated_mapping.begin_gpu_update(table.handle, keys, rng.uniform(0, 3, 48),
                                                      stream)
            second = emulated_mapping.begin_gpu_update(table.handle, keys[:8],
                                                       rng.uniform(0, 3, 8), stream)
            counts += [first.run(int(rng.integers(1, 64))), second.run(int(rng.integers(1, 64)))]
        stop.set()
        for t in threads:
            t.join(timeout=60)
        assert not errors
        assert len(contents(table)) == 64 + sum(inserted)
        assert table.stats()["priority_updates"] == sum(counts)
        assert_trees_exact(table)
