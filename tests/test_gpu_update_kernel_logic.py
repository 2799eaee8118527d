"""GPU priority updates applied by one kernel (xla_ffi/core/gpu/update_block.h),
run on the CPU: the test-only ``begin_gpu_update`` begins an update as the
CUDA handler does (TableGpu::BeginUpdate: ticket, the table's device view)
and its ``run(threads)`` runs the kernel's own phases thread by thread, the
last reporting the ticket through the completion ring. The kernel must leave
the table exactly as the host's update_priorities does (records, every
Prioritized tree, counts), refuse bad values whole and defer them like the
staged path, and host writers must keep out of the priorities until the
kernel has reported (inserts that evict nothing defer instead:
test_gpu_update_deferred_leaves.py)."""

from __future__ import annotations

import threading
import time

import jax
import numpy as np
import pytest

import gearjax as gx

COLUMNS = {"x": gx.Column((), "float32")}
DEFERRED = "a priority update from an earlier GPU program failed and changed nothing"
ALPHAS = [(1.0,), (0.6, 1.0, 0.0)]  # a table without a Prioritized tree stages its updates

# The kernel's code run by hand on the CPU, on any machine.
pytestmark = pytest.mark.usefixtures("cpu_device")


def make_table(capacity: int = 16, inserts: int = 20, seed: int = 0, tree: bool = True,
               **kwargs) -> gx.Table:
    """A table whose first inserts were evicted (stale keys exist), with
    priorities drawn at random (some 0), and with `tree` a Prioritized(1.0)
    sum tree (made by a sample): only such tables are updated by a kernel."""
    table = gx.Table(COLUMNS, capacity=capacity, max_length=4, placement="host", **kwargs)
    rng = np.random.default_rng(seed)
    for i in range(inserts):
        p = 0.0 if i % 5 == 0 else float(rng.uniform(0.1, 10))
        table.insert({"x": np.zeros(1 + i % 3, np.float32)}, priority=p)
    if tree:
        prioritized_draws(table, 1.0)
    return table


def contents(table: gx.Table) -> dict[int, float]:
    c = table.contents()
    return dict(zip(c["key"].tolist(), c["priority"].tolist()))


def prioritized_draws(table: gx.Table, alpha: float):
    batch = table.sample(jax.random.key(7), 256, strategy=gx.Prioritized(alpha))
    return np.asarray(batch.keys), np.asarray(batch.probability)


def gpu_update(native_testing, table, keys, priorities, threads=64, stream=1):
    pending = native_testing.begin_gpu_update(table.handle, keys, priorities, stream)
    assert pending is not None, "the table staged an update the GPU should apply"
    return pending.run(threads)


@pytest.mark.parametrize("alphas", ALPHAS, ids=["alpha1", "three-trees"])
@pytest.mark.parametrize("threads", [1, 7, 512])
@pytest.mark.parametrize("key_dtype", [np.int32, np.uint32, np.int64])
@pytest.mark.parametrize("priority_dtype", [np.float32, np.float64])
def test_the_kernel_leaves_the_table_as_the_host_update_does(emulated_mapping, alphas, threads,
                                                             key_dtype, priority_dtype):
    gpu, host = make_table(), make_table()
    try:
        for alpha in alphas:  # the trees the update must keep (created by sampling)
            prioritized_draws(gpu, alpha)
            prioritized_draws(host, alpha)
        live = np.array(list(contents(gpu)), np.int64)
        rng = np.random.default_rng(threads)
        keys = np.concatenate([
            rng.choice(live, 40),          # duplicates: the last entry wins
            [0, 1, 2],                     # stale: evicted by the later inserts
            [live[3] + (1 << 20)],         # never stored (same slot, other sequence)
            [live[0], live[0]],
        ])
        if key_dtype is not np.uint32:
            keys = np.concatenate([keys, [-1, -5]])  # negative: skipped, not counted
        new = rng.uniform(0, 5, len(keys))
        new[::7] = 0.0
        new[-1] = -0.0  # stored as 0.0
        if priority_dtype is np.float32:
            new[5] = np.finfo(np.float32).smallest_subnormal  # a positive float64
        keys, new = keys.astype(key_dtype), new.astype(priority_dtype)

        expected = host.update_priorities(keys.astype(np.int64), new.astype(np.float64))
        assert gpu_update(emulated_mapping, gpu, keys, new, threads) == expected
        assert contents(gpu) == contents(host)
        assert np.signbit(list(contents(gpu).values())).sum() == 0
        for field in ("priority_updates", "skipped_updates"):
            assert gpu.stats()[field] == host.stats()[field]
        for alpha in alphas:  # every tree, node for node: same draws, same probabilities
            gk, gp = prioritized_draws(gpu, alpha)
            hk, hp = prioritized_draws(host, alpha)
            np.testing.assert_array_equal(gk, hk)
            np.testing.assert_array_equal(gp, hp)
    finally:
        gpu.close()
        host.close()


def test_every_priority_zero_is_seen_by_the_next_sample(emulated_mapping):
    """The count of positive priorities the kernel changed reaches the host:
    Prioritized refuses a table whose every priority is 0, and accepts it
    again once one is positive."""
    with make_table() as table:
        prioritized_draws(table, 1.0)
        live = np.array(list(contents(table)), np.int64)
        assert gpu_update(emulated_mapping, table, live, np.zeros(len(live))) == len(live)
        with pytest.raises(jax.errors.JaxRuntimeError,
                           match="every stored trajectory has priority 0"):
            prioritized_draws(table, 1.0)
        assert gpu_update(emulated_mapping, table, live[:1], np.array([2.0])) == 1
        keys, probability = prioritized_draws(table, 1.0)
        assert set(keys.tolist()) == {int(live[0])} and np.all(probability == 1.0)


@pytest.mark.parametrize("bad", [np.nan, -1.0, np.inf, 1e31, 1e-320])
def test_a_bad_value_changes_nothing_and_is_raised_once_as_staged(emulated_mapping, bad):
    with make_table() as table, make_table() as staged:
        prioritized_draws(table, 1.0)
        before = contents(table)
        keys = np.array(list(before)[:3], np.int64)
        values = np.array([5.0, bad, 6.0])
        assert gpu_update(emulated_mapping, table, keys, values) == -1
        assert emulated_mapping.staged_update(staged.handle, keys, values) == -1
        with pytest.raises(ValueError, match=DEFERRED) as raised:
            table.contents()
        with pytest.raises(ValueError, match=DEFERRED) as raised_staged:
            staged.contents()
        assert str(raised.value) == str(raised_staged.value)  # the same words, entry 1
        assert gx.table_error(raised.value) == "failed"
        assert contents(table) == before  # once only; the good entries were not applied
        assert table.stats()["priority_updates"] == 0


def test_the_first_bad_entry_is_reported(emulated_mapping):
    with make_table() as table:
        keys = np.array(list(contents(table))[:8], np.int64)
        values = np.ones(8)
        values[[6, 3, 7]] = [np.nan, -2.0, np.inf]
        assert gpu_update(emulated_mapping, table, keys, values, threads=3) == -1
        with pytest.raises(ValueError, match=DEFERRED + ": entry 3 is -2"):
            len(table.contents())


def test_failures_before_a_look_are_raised_together_naming_the_first(emulated_mapping):
    with make_table() as table:
        keys = np.array(list(contents(table))[:3], np.int64)
        # Two kernels enqueued back to back, both refused before any call looks.
        first = emulated_mapping.begin_gpu_update(table.handle, keys, np.array([1.0, -3.0, 1.0]))
        second = emulated_mapping.begin_gpu_update(table.handle, keys, np.array([np.nan, 1.0, 1.0]))
        assert first.run(4) == second.run(4) == -1
        with pytest.raises(ValueError, match=DEFERRED + r": entry 1 is -3.*\(and 1 later "
                                             r"updates failed too\)"):
            table.contents()
        assert gpu_update(emulated_mapping, table, keys, np.array([1.0, 1.0, np.inf])) == -1
        with pytest.raises(ValueError, match=DEFERRED + ": entry 2 is inf") as raised:
            table.contents()  # the next refusal has the report's place again
        assert "later updates" not in str(raised.value)
        assert gpu_update(emulated_mapping, table, keys, np.array([4.0, 4.0, 4.0])) == 3


def test_the_next_compiled_call_raises_it(emulated_mapping):
    with make_table() as table:
        sample = jax.jit(lambda s, k: table.sample(s, k, 4))
        # compiled now: the FFI handler raises it below
        state, _ = jax.block_until_ready(sample(table.state(), jax.random.key(0)))
        assert gpu_update(emulated_mapping, table, np.array([0], np.int64), np.array([np.nan])) == -1
        # A later call: JAX's fast path may carry it as ValueError (gearjax/errors.py).
        with pytest.raises((jax.errors.JaxRuntimeError, ValueError), match=DEFERRED) as raised:
            jax.block_until_ready(sample(state, jax.random.key(0)))
        assert gx.table_error(raised.value) == "failed"
        state, batch = sample(state, jax.random.key(0))
        assert batch.keys.shape == (4,)  # once only


def insert_in_thread(table) -> threading.Event:
    done = threading.Event()

    def run():
        table.insert({"x": np.ones(2, np.float32)}, priority=3.0)
        done.set()

    threading.Thread(target=run, daemon=True).start()
    return done


@pytest.mark.parametrize("writer", ["insert", "update_priorities", "contents", "sample"])
def test_host_writers_wait_until_the_kernel_reports(emulated_mapping, writer):
    with make_table() as table:  # full: an insert evicts
        prioritized_draws(table, 1.0)
        live = np.array(list(contents(table)), np.int64)
        pending = emulated_mapping.begin_gpu_update(table.handle, live, np.full(len(live), 2.0), 1)
        done = threading.Event()
        calls = {
            "insert": lambda: table.insert({"x": np.ones(2, np.float32)}, priority=3.0),
            "update_priorities": lambda: table.update_priorities(live[:2], np.ones(2)),
            "contents": table.contents,
            # Host-selected: replace=False draws from the tree on the host.
            "sample": lambda: table.sample(jax.random.key(1), 2, strategy=gx.Prioritized(1.0),
                                           replace=False),
        }
        threading.Thread(target=lambda: (calls[writer](), done.set()), daemon=True).start()
        assert not done.wait(0.3), f"{writer} touched the priorities while the kernel may run"
        assert pending.run(32) == len(live)
        assert done.wait(10), "the kernel's report did not release the host"
        assert table.stats()["samples_in_flight"] == 0


def test_an_update_waits_while_a_writer_claims_the_priorities(emulated_mapping):
    """No new kernel starts while a host writer waits for the last one: the
    writer would otherwise wait forever behind a busy stream. Once the kernel
    has reported, the next update may begin before the writer publishes (the
    writer fills its slot unlocked); the writer then waits at most for that
    one kernel (as for every sample taken before its eviction) and publishes
    without claiming the priorities again (its leaves deferred:
    test_gpu_update_deferred_leaves.py)."""
    with make_table() as table:
        live = np.array(list(contents(table)), np.int64)
        first = emulated_mapping.begin_gpu_update(table.handle, live[:4], np.full(4, 2.0), 1)
        inserted = insert_in_thread(table)
        assert not inserted.wait(0.2)
        deadline = time.monotonic() + 30  # the writer has reserved: it now waits for the kernel
        while table.stats()["writers_in_flight"] == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        second: list = []
        began = threading.Event()

        def begin():
            second.append(emulated_mapping.begin_gpu_update(table.handle, live[4:6], np.ones(2), 1))
            began.set()

        threading.Thread(target=begin, daemon=True).start()
        assert not began.wait(0.2), "an update began while a writer claimed the priorities"
        first.run(16)
        assert began.wait(10), "the kernel reported but the next update did not begin"
        assert second[0].run(16) in (1, 2)  # the insert may have evicted one of the two keys
        assert inserted.wait(10), "the writer waited past the one update that began meanwhile"


def test_another_stream_waits_for_the_updates_in_flight(emulated_mapping):
    with make_table() as table:
        live = np.array(list(contents(table)), np.int64)
        first = emulated_mapping.begin_gpu_update(table.handle, live[:2], np.full(2, 2.0), stream=1)
        same = emulated_mapping.begin_gpu_update(table.handle, live[2:4], np.full(2, 3.0), stream=1)
        assert same is not None  # the same stream queues behind it, no wait
        began = threading.Event()
        other: list = []
        threading.Thread(target=lambda: (other.append(emulated_mapping.begin_gpu_update(
            table.handle, live[:2], np.full(2, 4.0), stream=2)), began.set()),
            daemon=True).start()
        assert not began.wait(0.2), "two streams would write the trees at once"
        first.run(8)
        assert not began.wait(0.2)  # the stream's last update is still in flight
        same.run(8)
        assert began.wait(10)
        assert other[0].run(8) == 2
        assert [contents(table)[int(k)] for k in live[:4]] == [4.0, 4.0, 3.0, 3.0]


@pytest.mark.parametrize("why", ["topk", "min-priority remover", "too many keys",
                                 "step priorities"])
def test_what_the_gpu_cannot_update_is_staged(emulated_mapping, why):
    # A table with step priorities keeps each trajectory's steps in host
    # memory, which an update sets too (the kernel writes records and trees).
    kwargs = {"min-priority remover": {"remover": "min_priority"},
              "step priorities": {"step_priorities": True}}.get(why, {})
    with make_table(**kwargs) as table:
        if why == "topk":
            table.sample(jax.random.key(0), 2, strategy=gx.TopK(3))  # a heap in host memory
        n = 4097 if why == "too many keys" else 2
        keys = np.zeros(n, np.int64)
        assert emulated_mapping.begin_gpu_update(table.handle, keys, np.ones(n)) is None
        assert table.stats()["samples_in_flight"] == 0  # no ticket taken


def test_unmapped_tables_are_staged(native_testing):
    with make_table() as table:  # made without the (emulated) GPU mapping
        assert native_testing.begin_gpu_update(table.handle, np.zeros(1, np.int64),
                                               np.ones(1)) is None


def test_the_pending_update_runs_once(emulated_mapping):
    with make_table() as table:
        pending = emulated_mapping.begin_gpu_update(table.handle, np.zeros(1, np.int64), np.ones(1))
        assert pending.run(4) == 0  # key 0 was evicted: skipped
        with pytest.raises(ValueError, match="has run"):
            pending.run(4)


def test_close_waits_for_the_update_kernel(emulated_mapping):
    table = make_table()
    live = np.array(list(contents(table)), np.int64)
    pending = emulated_mapping.begin_gpu_update(table.handle, live, np.ones(len(live)))
    closed = threading.Event()
    threading.Thread(target=lambda: (table.close(), closed.set()), daemon=True).start()
    assert not closed.wait(0.3), "close freed the trees an update kernel may still write"
    pending.run(8)
    assert closed.wait(10)


def test_kernels_and_writers_together_keep_the_trees_exact(emulated_mapping):
    """Actors insert (evicting) and update on the host while a learner's
    updates run as kernels: at the end every Prioritized probability is the
    key's priority over the sum of all, as a tree rebuilt from the records
    would give, and the counts add up."""
    with make_table(capacity=64, inserts=64) as table:
        prioritized_draws(table, 1.0)
        errors: list[BaseException] = []
        stop = threading.Event()
        counts: list[int] = []

        def actor(seed):
            rng = np.random.default_rng(seed)
            try:
                while not stop.is_set():
                    table.insert({"x": np.ones(2, np.float32)}, priority=float(rng.uniform(0, 3)))
                    keys = np.array(list(contents(table))[:4], np.int64)
                    counts.append(table.update_priorities(keys, rng.uniform(0, 3, len(keys))))
            except BaseException as e:  # noqa: BLE001 - reported below
                errors.append(e)

        threads = [threading.Thread(target=actor, args=(s,)) for s in range(2)]
        for t in threads:
            t.start()
        rng = np.random.default_rng(9)
        for _ in range(150):
            keys = np.array(list(contents(table)), np.int64)
            keys = rng.choice(keys, 48)
            pending = emulated_mapping.begin_gpu_update(table.handle, keys, rng.uniform(0, 3, 48),
                                               int(rng.integers(1, 3)))
            counts.append(pending.run(int(rng.integers(1, 64))))
        stop.set()
        for t in threads:
            t.join(timeout=60)
        assert not errors
        assert table.stats()["priority_updates"] == sum(counts)
        priorities = contents(table)
        total = sum(priorities.values())
        keys, probability = prioritized_draws(table, 1.0)
        expected = np.array([priorities[int(k)] / total for k in keys])
        # float32 probabilities; a stale node would be off by a whole weight (~1%)
        np.testing.assert_allclose(probability, expected, rtol=1e-6)


def test_without_a_prioritized_tree_updates_are_staged_and_inserts_never_wait(emulated_mapping):
    """Issue 48, item 1: a kernel would only rewrite records nothing samples
    by, yet every insert (evicting or publishing a record it may write) would
    wait for it, and for the whole GPU program before it. Such a table's
    update is staged (applied by a host function in stream order), so no
    insert waits for the GPU."""
    with make_table(tree=False) as table:  # Uniform and FIFO: no tree
        live = np.array(list(contents(table)), np.int64)
        assert emulated_mapping.begin_gpu_update(table.handle, live, np.full(len(live), 2.0)) is None
        assert insert_in_thread(table).wait(10)
        assert table.stats()["samples_in_flight"] == 0  # no ticket was taken
        assert emulated_mapping.staged_update(table.handle, live[:2], np.full(2, 4.0)) in (1, 2)


@pytest.mark.parametrize("writer", ["insert", "insert_many", "update_priorities", "contents",
                                    "sample"])
def test_a_host_writer_gives_up_on_a_gpu_update_that_never_reports(emulated_mapping, monkeypatch,
                                                                    writer):
    """Issue 48, item 2: a GPU update that never reports (a sticky CUDA error,
    a stuck stream) made every later insert, read and host sample of the table
    wait forever. Each waits gx.table.GPU_WAIT_SECONDS (60 s; 0.3 s here),
    then raises TimeoutError naming the update, and changes nothing."""
    assert gx.table.GPU_WAIT_SECONDS == 60.0  # the default the README and effects.md state
    monkeypatch.setattr(gx.table, "GPU_WAIT_SECONDS", 0.3)
    with make_table() as table:  # full: an insert evicts
        prioritized_draws(table, 1.0)
        before = contents(table)
        live = np.array(list(before), np.int64)
        pending = emulated_mapping.begin_gpu_update(table.handle, live, np.full(len(live), 2.0))
        calls = {
            "insert": lambda: table.insert({"x": np.ones(2, np.float32)}, priority=3.0),
            "insert_many": lambda: table.insert_many(
                [{"x": np.ones(2, np.float32)}] * 3, priorities=[1.0, 2.0, 3.0]),
            "update_priorities": lambda: table.update_priorities(live[:2], np.ones(2)),
            "contents": table.contents,
            "sample": lambda: table.sample(jax.random.key(1), 2, strategy=gx.Prioritized(1.0),
                                           replace=False),
        }
        started = time.monotonic()
        # An eager sample runs a compiled program: its error is JAX's, of kind
        # "timeout" (docs: effects.md, errors in compiled code).
        with pytest.raises((TimeoutError, jax.errors.JaxRuntimeError),
                           match=r"waited 0\.3 s for a GPU priority update \(ticket \d+\), "
                                 r"which has not reported .* nothing was changed") as raised:
            calls[writer]()
        assert gx.table_error(raised.value) == "timeout"
        assert time.monotonic() - started < 10
        assert table.stats()["writers_in_flight"] == 0  # an insert's slot was given back
        assert pending.run(16) == len(live)  # the kernel reports at last
        after = contents(table)
        assert sorted(after) == sorted(before) and set(after.values()) == {2.0}
        table.insert({"x": np.ones(2, np.float32)}, priority=3.0)  # the table works on
        assert len(contents(table)) == len(before)


def test_an_update_gives_up_on_another_streams_update_that_never_reports(emulated_mapping,
                                                                         monkeypatch):
    monkeypatch.setattr(gx.table, "GPU_WAIT_SECONDS", 0.3)
    with make_table() as table:
        prioritized_draws(table, 1.0)
        live = np.array(list(contents(table)), np.int64)
        stuck = emulated_mapping.begin_gpu_update(table.handle, live[:2], np.full(2, 2.0), 1)
        with pytest.raises(TimeoutError, match="GPU priority update"):
            emulated_mapping.begin_gpu_update(table.handle, live[:2], np.ones(2), 2)
        assert stuck.run(4) == 2
        assert emulated_mapping.begin_gpu_update(table.handle, live[:2], np.ones(2), 2).run(4) == 2


def _update_waiting_for_its_ticket(native, table, keys, priorities):
    """Begins a GPU update in a thread that waits for its ticket's place in
    the completion ring (GpuCompletions::kSize = 4096 tickets later than a
    sample still in flight); returns (the held sample's ticket, the thread,
    the list its PendingGpuUpdate or None goes into)."""
    native.use_gpu_completions(table.handle)
    uniform = gx.Uniform().code
    held = native.begin_gpu_sample(table.handle, 1, uniform)
    for _ in range(4096 - 1):
        native.end_gpu_sample(table.handle, native.begin_gpu_sample(table.handle, 1, uniform))
    begun: list = []
    t = threading.Thread(target=lambda: begun.append(native.begin_gpu_update(
        table.handle, keys, priorities)))
    t.start()
    t.join(timeout=0.3)
    assert t.is_alive(), "the update did not wait for its ticket's place"
    return held, t, begun


def test_an_update_that_waited_for_its_ticket_is_staged_if_the_table_changed(emulated_mapping):
    """After waiting (the table's lock released meanwhile), TableGpu::BeginUpdate
    looks again: here a TopK heap made meanwhile keeps priorities in host
    memory, so the update is staged after all, its ticket given back."""
    with make_table() as table:
        live = np.array(list(contents(table)), np.int64)
        held, t, begun = _update_waiting_for_its_ticket(emulated_mapping, table, live,
                                                        np.full(len(live), 3.0))
        table.sample(jax.random.key(0), 2, strategy=gx.TopK(3))  # a heap, made meanwhile
        emulated_mapping.end_gpu_sample(table.handle, held)
        t.join(timeout=10)
        assert begun == [None]
        assert table.stats()["samples_in_flight"] == 0  # the update's ticket came back


def test_a_tree_made_while_an_update_waits_for_its_ticket_is_updated(emulated_mapping):
    """Issue 48, item 6: TableGpu::BeginUpdate listed the trees before taking its
    ticket, which may release the lock to wait (an earlier sample holding the
    ticket's place in the completion ring); a Prioritized tree made meanwhile
    kept its old priorities."""
    with make_table() as table:
        live = np.array(list(contents(table)), np.int64)
        held, t, begun = _update_waiting_for_its_ticket(emulated_mapping, table, live,
                                                        np.full(len(live), 3.0))
        prioritized_draws(table, 0.5)  # a second tree, made while it waits
        emulated_mapping.end_gpu_sample(table.handle, held)
        t.join(timeout=10)
        assert begun[0].run(16) == len(live)
        for alpha in (1.0, 0.5):  # every priority 3.0: every key equally likely
            keys, probability = prioritized_draws(table, alpha)
            np.testing.assert_allclose(probability, 1.0 / len(live), rtol=1e-6)


def test_the_report_and_ring_use_the_table_s_own_mapping(emulated_mapping):
    """Issue 48, item 8: the completion ring, the update report and the
    staging lists were mapped by whatever allocator was installed at the
    first GPU call, not the one that made the table (then an update was
    staged for want of a mapped report). Made by the table's own, they serve
    after the hooks changed."""
    with make_table() as table:
        emulated_mapping.emulate_gpu_mapping(False)  # the hooks change after the table is made
        live = np.array(list(contents(table)), np.int64)
        pending = emulated_mapping.begin_gpu_update(table.handle, live, np.full(len(live), 2.0))
        assert pending is not None, "the update was staged: the report was not mapped"
        assert pending.run(16) == len(live)
        assert set(contents(table).values()) == {2.0}
