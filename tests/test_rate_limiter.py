"""Rate limiting: MinSize and SampleToInsertRatio block, time out with clear
errors, never hang, and wake up on close."""

from __future__ import annotations

import threading
import time

import jax
import numpy as np
import pytest

import gearjax as gx

COLUMNS = {"x": gx.Column((), "float32")}


def one():
    return {"x": np.zeros(2)}


def sample_now(table, batch_size=2):
    return jax.block_until_ready(table.sample(jax.random.key(0), batch_size, 1))


def two_late_inserts(table) -> tuple[threading.Thread, list[float]]:
    """A started thread that inserts twice, 0.3 s apart after 0.3 s, and the
    list that gets the time just before its second insert."""
    inserted_third: list[float] = []

    def inserter():
        time.sleep(0.3)
        table.insert(one())
        time.sleep(0.3)
        inserted_third.append(time.monotonic())
        table.insert(one())

    thread = threading.Thread(target=inserter)
    thread.start()
    return thread, inserted_third


def test_min_size_waits_for_inserts_from_another_thread():
    with gx.Table(COLUMNS, 8, 4, rate_limiter=gx.MinSize(3, timeout=20.0)) as table:
        table.insert(one())
        thread, inserted_third = two_late_inserts(table)
        batch = sample_now(table)
        done = time.monotonic()
        thread.join()
        assert done >= inserted_third[0]
        assert len(table) == 3 and batch.keys.shape == (2,)


def test_a_sample_inside_lax_scan_waits_for_inserts_from_another_thread():
    """rate-limiters.md: a sample inside lax.scan that waits holds up that
    dispatch until the inserts it needs arrive from other threads."""
    with gx.Table(COLUMNS, 8, 4, rate_limiter=gx.MinSize(3, timeout=20.0)) as table:
        table.insert(one())

        def body(state, key):
            state, batch = table.sample(state, key, 2, 1)
            return state, batch.keys

        scanned = jax.jit(lambda state, keys: jax.lax.scan(body, state, keys))
        keys = jax.random.split(jax.random.key(0), 4)
        thread, inserted_third = two_late_inserts(table)
        _, drawn = jax.block_until_ready(scanned(table.state(), keys))
        done = time.monotonic()
        thread.join()
        assert done >= inserted_third[0]
        assert drawn.shape == (4, 2) and (np.asarray(drawn) >= 0).all()
        assert table.stats()["samples"] == 8


def test_min_size_times_out_with_a_clear_error():
    with gx.Table(COLUMNS, 8, 4, rate_limiter=gx.MinSize(5, timeout=0.2)) as table:
        table.insert(one())
        start = time.monotonic()
        with pytest.raises(Exception, match="rate limiter held sampling back.*size=1, min_size=5"
                           ) as raised:
            sample_now(table)
        # The timeout as written, not 0.20000000000000001.
        assert "held sampling back for 0.2 s" in str(raised.value)
        assert time.monotonic() - start < 10
        assert table.stats()["samples"] == 0


@pytest.mark.parametrize("form", ["eager", "eager state", "jit"])
def test_a_timeout_is_a_failed_precondition_never_deadline_exceeded(form):
    """A rate-limiter timeout in a table call inside a program is reported as
    FAILED_PRECONDITION, as a closed table is: DEADLINE_EXCEEDED from a custom
    call crashed jax 0.11's GPU runtime (SIGSEGV) instead of raising."""
    with gx.Table(COLUMNS, 8, 4, rate_limiter=gx.MinSize(5, timeout=0.05)) as table:
        table.insert(one())
        calls = {"eager": lambda: table.sample(jax.random.key(0), 2, 1),
                 "eager state": lambda: table.sample(table.state(), jax.random.key(0), 2, 1),
                 # a first call: JAX's Python dispatch, so JaxRuntimeError
                 "jit": lambda: jax.jit(lambda s, k: table.sample(s, k, 2, 1))(
                     table.state(), jax.random.key(0))}
        with pytest.raises(jax.errors.JaxRuntimeError) as error:
            jax.block_until_ready(calls[form]())
        message = str(error.value)
        assert message.startswith("FAILED_PRECONDITION: gearjax [timeout]: cannot sample 2 items: "
                                  "the rate limiter held sampling back"), message
        assert "DEADLINE_EXCEEDED" not in message


def test_close_wakes_a_blocked_sampler():
    table = gx.Table(COLUMNS, 8, 4, rate_limiter=gx.MinSize(4, timeout=60.0))
    errors = []

    def sampler():
        try:
            sample_now(table)
        except Exception as e:  # noqa: BLE001 - the error is the point
            errors.append(e)

    thread = threading.Thread(target=sampler)
    thread.start()
    time.sleep(0.3)
    table.close()
    thread.join(timeout=10)
    assert not thread.is_alive()
    assert errors and "closed" in str(errors[0])


def test_ratio_blocks_inserts_until_sampling_catches_up():
    limiter = gx.SampleToInsertRatio(samples_per_insert=2.0, min_size_to_sample=2,
                                     error_buffer=4.0, timeout=0.2)
    with gx.Table(COLUMNS, 64, 4, rate_limiter=limiter) as table:
        inserted = 0
        with pytest.raises(TimeoutError, match="holds inserts back"):
            for _ in range(10):
                table.insert(one())
                inserted += 1
        # target diff 4, max 8: inserts go on while inserts * 2 <= 8
        assert inserted == 4 and len(table) == 4
        assert table.stats()["inserts"] == 4
        sample_now(table, 4)  # diff 8 -> 4
        table.insert(one())
        table.insert(one())  # diff 8 again
        with pytest.raises(TimeoutError):
            table.insert(one())


def test_ratio_holds_under_concurrent_inserting_and_sampling():
    spi, eb, batch_size = 4.0, 16.0, 8
    limiter = gx.SampleToInsertRatio(samples_per_insert=spi, min_size_to_sample=4,
                                     error_buffer=eb, timeout=20.0)
    with gx.Table(COLUMNS, 32, 4, rate_limiter=limiter) as table:
        sample = jax.jit(lambda s, k: table.sample(s, k, batch_size, 1))
        state = table.state()
        seen, errors = [], []

        # 25 batches (200 samples) need >= 52 inserts and admit <= 58.
        def inserter():
            try:
                for _ in range(55):
                    table.insert(one())
            except Exception as e:  # noqa: BLE001 - reported by the assert below
                errors.append(e)

        thread = threading.Thread(target=inserter)
        thread.start()
        key = jax.random.key(0)
        for i in range(25):
            state, _ = jax.block_until_ready(sample(state, jax.random.fold_in(key, i)))
            s = table.stats()
            seen.append(s["inserts"] * spi - s["samples"])
        thread.join()
        assert not errors
        target = 4 * spi
        # after each sample, diff stays within the limiter's bounds, up to the
        # inserts that land between the sample and the stats read
        assert min(seen) >= target - eb
        assert max(seen) <= target + eb + spi
        assert table.stats()["samples"] == 25 * batch_size


def test_ratio_refuses_a_batch_the_buffer_cannot_hold():
    limiter = gx.SampleToInsertRatio(samples_per_insert=1.0, min_size_to_sample=1,
                                     error_buffer=4.0)
    with gx.Table(COLUMNS, 8, 4, rate_limiter=limiter) as table:
        table.insert(one())
        with pytest.raises(ValueError, match="error_buffer=4.0 is too small for batch_size=16"):
            table.sample(jax.random.key(0), 16, 1)


@pytest.mark.parametrize("make", [
    lambda: gx.MinSize(0),
    lambda: gx.MinSize(2, timeout=-1),
    lambda: gx.MinSize(2, timeout=float("inf")),
    lambda: gx.SampleToInsertRatio(0.0, 1, 1.0),
    lambda: gx.SampleToInsertRatio(1.0, 1, -1.0),
    lambda: gx.SampleToInsertRatio(1.0, 0, 1.0),
])
def test_bad_limiters_are_refused(make):
    with pytest.raises((ValueError, TypeError)):
        make()


def test_min_size_above_capacity_is_refused():
    with pytest.raises(ValueError, match="exceeds capacity"):
        gx.Table(COLUMNS, 4, 4, rate_limiter=gx.MinSize(5))


def test_insert_many_stopped_by_the_limiter_says_how_far_it_got():
    limiter = gx.SampleToInsertRatio(samples_per_insert=1.0, min_size_to_sample=1,
                                     error_buffer=2.0, timeout=0.1)
    with gx.Table(COLUMNS, 8, 4, rate_limiter=limiter) as table:
        with pytest.raises(TimeoutError, match="stopped after inserting 3 of 6"):
            table.insert_many([one() for _ in range(6)])
        assert (table.contents()["key"] >> table.slot_bits).tolist() == [0, 1, 2]
