"""Window cuts ("start", "end", "full"), sampling without replacement and
max_times_sampled (consume-once): window contents against the stored
trajectories, the distributions and probabilities the docs promise, jit and
scan, concurrency with writers, checkpoints, and every bad input."""

from __future__ import annotations

import threading

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

import gearjax as gx
from conftest import COLUMNS
from reference import expected_window

P_MIN = 1e-4
DRAWS = 16_384
LENGTHS = [1, 2, 3, 5, 8, 13, 21, 34, 40, 40]
PRIORITIES = [0.5, 1.0, 2.0, 4.0, 0.25, 3.0, 1.5, 0.0, 6.0, 2.5]
STRATEGIES = [gx.Uniform(), gx.Timestep(), gx.Prioritized(0.7), gx.TopK(5), gx.Recent(4)]


@pytest.fixture(scope="module")
def counted():
    """Trajectories whose step i holds i, of the lengths and priorities above."""
    t = gx.Table({"x": gx.Column((), "int32", pad=-1)}, capacity=16, max_length=40)
    for length, priority in zip(LENGTHS, PRIORITIES):
        t.insert({"x": np.arange(length)}, priority=priority)
    yield t
    t.close()


def index(table, keys) -> np.ndarray:
    """Insertion order of keys: the index into LENGTHS and PRIORITIES."""
    return np.asarray(keys) >> table.slot_bits


def assert_distribution(counts, expected, draws=DRAWS):
    expected = np.asarray(expected, float)
    assert counts[expected == 0].sum() == 0, "drew a trajectory that has probability 0"
    support = expected > 0
    if support.sum() == 1:
        assert counts[support].sum() == draws
        return
    result = stats.chisquare(counts[support], draws * expected[support] / expected.sum())
    assert result.pvalue > P_MIN, (counts, expected)


def check_rows(batch, stored, window, cut, pad="left"):
    """Every row holds its trajectory's steps [start, start + valid) where the
    cut puts them, and padding elsewhere."""
    keys, starts = np.asarray(batch.keys), np.asarray(batch.start)
    mask, timestep = np.asarray(batch.mask), np.asarray(batch.timestep)
    for b, (key, start) in enumerate(zip(keys, starts)):
        trajectory = stored[int(key)]
        length = len(next(iter(trajectory.values())))
        valid = int(mask[b].sum())
        assert 1 <= valid <= window and 0 <= start and start + valid <= length
        if cut == "full":
            assert valid == window
        elif cut == "end":  # cut at the trajectory's start only
            assert valid == window or start == 0
        else:  # cut at the trajectory's end only
            assert valid == window or start + valid == length
        row = expected_window(trajectory, COLUMNS, int(start), window, pad, valid=valid)
        np.testing.assert_array_equal(mask[b], row["mask"])
        np.testing.assert_array_equal(timestep[b], row["timestep"])
        for name in COLUMNS:
            np.testing.assert_array_equal(np.asarray(batch[name][b]), row[name])


# ------------------------------------------------------------------ windows
@pytest.mark.parametrize("strategy", STRATEGIES, ids=lambda s: type(s).__name__)
@pytest.mark.parametrize("cut", ["start", "end", "full"])
@pytest.mark.parametrize("window", [1, 4])
def test_windows_hold_their_trajectories_steps(filled, strategy, cut, window):
    table, stored = filled
    batch = table.sample(jax.random.key(5), 64, window, strategy, cut=cut)
    check_rows(batch, stored, window, cut)
    if cut == "full":
        lengths = {k: len(t["obs"]) for k, t in stored.items()}
        assert all(lengths[int(k)] >= window for k in np.asarray(batch.keys))


def test_end_cuts_end_at_a_uniform_step(counted):
    # The 40-step trajectory under Recent(1): the last real step is uniform.
    batch = counted.sample(jax.random.key(1), DRAWS, 8, gx.Recent(1), cut="end")
    last = np.asarray(batch.start) + np.asarray(batch.mask).sum(1) - 1
    assert_distribution(np.bincount(last, minlength=40), np.ones(40))
    early = last < 7  # padded at the start
    assert not np.asarray(batch.mask)[early, 0].any()
    assert np.asarray(batch.mask)[:, -1].all()  # every row's last position is real


def test_full_cuts_start_uniformly_over_the_full_windows(counted):
    batch = counted.sample(jax.random.key(2), DRAWS, 8, gx.Recent(1), cut="full")
    assert np.asarray(batch.mask).all()
    assert_distribution(np.bincount(np.asarray(batch.start), minlength=33), np.ones(33))


@pytest.mark.parametrize("strategy,expected", [
    (gx.Uniform(), [0, 0, 0, 1, 1, 1, 1, 1, 1, 1]),
    (gx.Timestep(), [0, 0, 0, 1, 4, 9, 17, 30, 36, 36]),  # length - window + 1
    (gx.Prioritized(1.0), [0, 0, 0, 4.0, 0.25, 3.0, 1.5, 0.0, 6.0, 2.5]),
    (gx.TopK(3), [0, 0, 0, 1, 0, 1, 0, 0, 1, 0]),  # the best 3 with >= 5 steps
    (gx.Recent(2), [0, 0, 0, 0, 0, 0, 0, 0, 1, 1]),
], ids=lambda v: repr(v) if isinstance(v, gx.Strategy) else "")
def test_full_windows_draw_among_long_enough_trajectories(counted, strategy, expected):
    batch = counted.sample(jax.random.key(3), DRAWS, 5, strategy, cut="full")
    drawn = index(counted, batch.keys)
    assert_distribution(np.bincount(drawn, minlength=10), expected)
    expected = np.asarray(expected, float) / sum(expected)
    np.testing.assert_allclose(np.asarray(batch.probability), expected[drawn], rtol=1e-6)


def test_pad_applies_to_start_cuts_only(filled):
    table, _ = filled
    key = jax.random.key(0)
    right = table.sample(key, 8, 4, cut="start", pad="right")
    assert np.asarray(right.mask)[:, 0].all()
    end = table.sample(key, 8, 4, cut="end", pad="left")  # consistent: allowed
    np.testing.assert_array_equal(end.keys, table.sample(key, 8, 4, cut="end").keys)
    with pytest.raises(ValueError, match="pad='right' contradicts"):
        table.sample(key, 8, 4, cut="end", pad="right")
    with pytest.raises(ValueError, match="never padded"):
        table.sample(key, 8, 4, cut="full", pad="left")


# ------------------------------------------------------ without replacement
@pytest.mark.parametrize("strategy", STRATEGIES, ids=lambda s: type(s).__name__)
def test_without_replacement_rows_are_distinct(counted, strategy):
    batch_size = strategy.count if isinstance(strategy, (gx.TopK, gx.Recent)) else 9
    for seed in range(20):
        batch = counted.sample(jax.random.key(seed), batch_size, 2, strategy, replace=False)
        keys = np.asarray(batch.keys)
        assert len(set(keys.tolist())) == batch_size
        assert float(batch.probability[-1]) <= 1.0


def test_without_replacement_probabilities_are_conditional(counted):
    # Prioritized(1) over the 9 positive priorities: row b has its priority
    # over what the rows before it left.
    batch = counted.sample(jax.random.key(7), 9, 2, gx.Prioritized(1.0), replace=False)
    drawn = index(counted, batch.keys)
    weights = np.asarray(PRIORITIES)[drawn]
    left = sum(PRIORITIES) - np.concatenate([[0.0], np.cumsum(weights)[:-1]])
    np.testing.assert_allclose(np.asarray(batch.probability), weights / left, rtol=1e-6)
    assert 7 not in drawn.tolist()  # priority 0


def test_without_replacement_first_rows_follow_the_strategy(counted):
    # The first row of a replace=False batch is drawn like any row with
    # replacement: chi-square over many batches.
    firsts = [int(index(counted, counted.sample(jax.random.key(s), 3, 1, gx.Timestep(),
                                                    replace=False).keys)[0])
              for s in range(1500)]
    assert_distribution(np.bincount(firsts, minlength=10), LENGTHS, draws=1500)


def test_batches_larger_than_the_eligible_set_raise_and_change_nothing(counted):
    before = counted.stats()
    # Native refusals surface eagerly through XLA's error (JaxRuntimeError),
    # as every run-time sample error does.
    with pytest.raises(Exception, match="can serve only 10 draws"):
        counted.sample(jax.random.key(0), 11, 2, replace=False)
    with pytest.raises(Exception, match="at least window=35"):
        counted.sample(jax.random.key(0), 3, 35, gx.Timestep(), cut="full", replace=False)
    with pytest.raises(ValueError, match="TopK"):
        counted.sample(jax.random.key(0), 4, 2, gx.TopK(3), replace=False)
    after = counted.stats()
    assert after["samples"] == before["samples"] and after["size"] == before["size"]
    assert after["samples_in_flight"] == 0


def test_a_shortfall_inside_jit_fails_with_the_reason(counted):
    @jax.jit
    def draw(state, key):
        return counted.sample(state, key, 11, 2, replace=False)

    with pytest.raises(Exception, match="can serve only 10 draws"):
        jax.block_until_ready(draw(counted.state(), jax.random.key(0)))


@pytest.mark.parametrize("kwargs", [dict(cut="full"), dict(cut="end"), dict(replace=False)])
def test_modes_work_inside_jit_and_scan(counted, kwargs):
    @jax.jit
    def run(state, key):
        def step(carry, k):
            state, total = carry
            state, batch = counted.sample(state, k, 4, 5, gx.Uniform(), **kwargs)
            return (state, total + batch.mask.sum()), batch.keys
        return jax.lax.scan(step, (state, jnp.int32(0)), jax.random.split(key, 6))

    (_, total), keys = run(counted.state(), jax.random.key(1))
    assert keys.shape == (6, 4) and int(total) > 0
    eager = counted.sample(jax.random.split(jax.random.key(1), 6)[0], 4, 5, **kwargs)
    np.testing.assert_array_equal(keys[0], eager.keys)  # same key, same table: same batch


@pytest.mark.parametrize("kwargs,error", [
    (dict(cut="middle"), ValueError), (dict(cut=1), ValueError), (dict(cut=None), ValueError),
    (dict(cut="end", window=None), ValueError), (dict(cut="full", window=None), ValueError),
    (dict(replace="no"), TypeError), (dict(replace=None), TypeError),
    (dict(replace=np.array([True, False])), TypeError),
])
def test_bad_modes_raise(counted, kwargs, error):
    args = dict(window=4)
    args.update(kwargs)
    before = counted.stats()["samples"]
    with pytest.raises(error):
        counted.sample(jax.random.key(0), 2, **args)
    assert counted.stats()["samples"] == before


# ------------------------------------------------------ max_times_sampled
def queue(capacity=8, max_times=1, rate_limiter=None):
    return gx.Table({"x": gx.Column((), "int32")}, capacity=capacity, max_length=4,
                    max_times_sampled=max_times, rate_limiter=rate_limiter)


def test_consume_once_draws_each_trajectory_once_then_it_is_gone():
    with queue() as table:
        keys = [table.insert({"x": np.full(3, i)}) for i in range(6)]
        batch = table.sample(jax.random.key(0), 4, 2)
        drawn = np.asarray(batch.keys).tolist()
        assert len(set(drawn)) == 4 and set(drawn) <= set(keys)
        assert len(table) == 2 and table.stats()["evictions"] == 4
        np.testing.assert_array_equal(np.asarray(batch.table_size), 6)  # when drawn
        rest = np.asarray(table.sample(jax.random.key(1), 2, 2).keys).tolist()
        assert sorted(drawn + rest) == keys
        with pytest.raises(Exception, match="empty"):
            table.sample(jax.random.key(2), 1, 2)


def test_max_times_sampled_bounds_draws_within_and_across_batches():
    with queue(max_times=3) as table:
        a, b = table.insert({"x": np.zeros(2, np.int32)}), table.insert({"x": np.ones(2, np.int32)})
        batch = table.sample(jax.random.key(0), 4, 1)
        counts = {k: np.asarray(batch.keys).tolist().count(k) for k in (a, b)}
        assert max(counts.values()) <= 3 and sum(counts.values()) == 4
        contents = table.contents()
        assert dict(zip(contents["key"].tolist(), contents["times_sampled"].tolist())) == \
            {k: n for k, n in counts.items() if n < 3}
        with pytest.raises(Exception, match="max_times_sampled=3"):
            table.sample(jax.random.key(1), 3, 1)  # only 2 draws left
        assert sum(3 - int(n) for n in table.contents()["times_sampled"]) == 2
        table.sample(jax.random.key(1), 2, 1)
        assert len(table) == 0


def test_consumed_trajectories_leave_inside_scan():
    with queue(capacity=16) as table:
        keys = {table.insert({"x": np.full(2, i)}) for i in range(12)}

        def step(state, k):
            state, batch = table.sample(state, k, 3, 2)
            return state, batch.keys

        @jax.jit
        def drain(state, key):
            return jax.lax.scan(step, state, jax.random.split(key, 4))

        state, drawn = jax.block_until_ready(drain(table.state(), jax.random.key(0)))
        drawn = np.asarray(drawn).ravel().tolist()
        assert sorted(drawn) == sorted(keys) and len(table) == 0


def test_a_sampler_waits_for_inserts_within_the_limiters_timeout():
    with queue(rate_limiter=gx.MinSize(1, timeout=10.0)) as table:
        table.insert({"x": np.zeros(2, np.int32)})
        timer = threading.Timer(0.2, lambda: table.insert({"x": np.ones(2, np.int32)}))
        timer.start()
        batch = table.sample(jax.random.key(0), 2, 2)  # one now, one once inserted
        timer.join()
        assert len(set(np.asarray(batch.keys).tolist())) == 2 and len(table) == 0
    with queue(rate_limiter=gx.MinSize(1, timeout=0.1)) as table:
        table.insert({"x": np.zeros(2, np.int32)})
        with pytest.raises(Exception, match="FAILED_PRECONDITION.*waited 0.1 s"):
            table.sample(jax.random.key(0), 2, 2)
        assert len(table) == 1  # the refused sample consumed nothing


def test_concurrent_samplers_consume_every_trajectory_exactly_once():
    """A writer thread inserts while three sampler threads drain a consume-once
    table; every key comes out exactly once, and windows are intact. The rate
    limiter lets an insert in only while fewer than `capacity` trajectories
    are unsampled (error_buffer = capacity - 1), so the remover never evicts
    one before it is drawn: a queue (the docs' recipe)."""
    total = 240
    limiter = gx.SampleToInsertRatio(1.0, 1, error_buffer=15, timeout=20.0)
    with queue(capacity=16, rate_limiter=limiter) as table:
        drawn: list[int] = []
        values: list[tuple[int, np.ndarray]] = []
        lock = threading.Lock()
        errors: list[BaseException] = []

        def write():
            for i in range(total):
                table.insert({"x": np.full(3, i, np.int32)})

        def sample(seed, batches):
            try:
                for n in range(batches):
                    batch = table.sample(jax.random.key(seed * 1000 + n), 4, 3, cut="full")
                    with lock:
                        drawn.extend(np.asarray(batch.keys).tolist())
                        values.extend(zip(np.asarray(batch.keys).tolist(),
                                          np.asarray(batch["x"])))
            except BaseException as e:  # noqa: BLE001 - reported below
                errors.append(e)

        threads = [threading.Thread(target=write)] + [
            threading.Thread(target=sample, args=(s, total // 12)) for s in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
        assert not errors, errors
        assert len(drawn) == total and len(set(drawn)) == total
        for _, row in values:
            assert (row == row[0]).all()  # never half old, half new
        assert len(table) == 0 and table.stats()["evictions"] == total


def test_checkpoints_keep_max_times_sampled_and_the_counts(tmp_path):
    with queue(max_times=3) as table:
        for i in range(3):
            table.insert({"x": np.full(2, i)})
        table.sample(jax.random.key(0), 2, 1)
        table.save(tmp_path / "q.gx")
        with gx.Table.load(tmp_path / "q.gx") as loaded:
            assert loaded.max_times_sampled == 3
            np.testing.assert_equal(loaded.contents(), table.contents())
            a = table.sample(jax.random.key(4), 5, 1)
            b = loaded.sample(jax.random.key(4), 5, 1)
            np.testing.assert_array_equal(a.keys, b.keys)
            np.testing.assert_equal(loaded.contents(), table.contents())


@pytest.mark.parametrize("value,error", [(-1, ValueError), (2**31, ValueError),
                                         (1.5, TypeError), (True, TypeError), ("1", TypeError),
                                         (None, TypeError)])
def test_bad_max_times_sampled_is_refused(value, error):
    with pytest.raises(error, match="max_times_sampled"):
        queue(max_times=value)


def test_the_deprecated_ordered_false_still_consumes_exactly_once():
    # ordered=False once drew without order or exactly-once, and was refused
    # here; now it only warns, and the sample consumes as any other does.
    with queue() as table:
        key = table.insert({"x": np.zeros(2, np.int32)})
        with pytest.warns(DeprecationWarning, match="ordered"):
            batch = table.sample(jax.random.key(0), 1, 2, ordered=False)
        assert np.asarray(batch.keys).tolist() == [key]
        assert len(table) == 0 and table.stats()["evictions"] == 1
