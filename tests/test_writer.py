"""The streaming writer (table.writer(), gearjax/writer.py): episodes go in
whole at end_episode, or as pieces with max_length_overflow="split" (with
overlap); bad steps raise and keep the episode; abandoned writers insert
nothing; nothing is visible to samplers before it is inserted, also while
samplers run in other threads."""

from __future__ import annotations

import gc
import threading

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gearjax as gx
from gearjax.writer import PIECE_PRIORITY

COLUMNS = {"obs": gx.Column((3,), "float32"), "step": gx.Column((), "int32")}


def table(capacity=16, max_length=5, **kwargs) -> gx.Table:
    return gx.Table(COLUMNS, capacity=capacity, max_length=max_length, placement="host",
                    **kwargs)


def step(i: int, episode: int = 0) -> dict:
    return {"obs": np.full(3, episode, np.float32), "step": np.int32(i)}


def test_an_episode_goes_in_whole_at_end_episode():
    t = table()
    w = t.writer()
    for i in range(4):
        w.append(step(i, episode=7))
    assert len(t) == 0 and w.steps == 4  # nothing visible before the end
    key = w.end_episode(priority=2.5)
    assert w.episode_keys == (key,) and w.steps == 0
    stored = t.get(key)
    np.testing.assert_array_equal(stored["step"], np.arange(4))
    np.testing.assert_array_equal(stored["obs"], np.full((4, 3), 7.0))
    assert t.contents()["priority"].tolist() == [2.5]
    # jax arrays and Python scalars are steps too; the next episode starts empty.
    w.append({"obs": jnp.ones(3), "step": 3})
    assert t.get(w.end_episode())["step"].tolist() == [3]


def test_an_episode_longer_than_max_length_raises_by_default_and_keeps_what_it_had():
    t = table(max_length=3)
    w = t.writer()
    for i in range(3):
        w.append(step(i))
    with pytest.raises(ValueError, match="max_length=3"):
        w.append(step(3))
    assert t.get(w.end_episode())["step"].tolist() == [0, 1, 2]


@pytest.mark.parametrize("overlap", [0, 2])
def test_split_episodes_insert_each_full_piece_at_once_with_overlap(overlap):
    t = table(max_length=4)
    w = t.writer(max_length_overflow="split", overlap=overlap)
    for i in range(4):
        w.append(step(i))
    assert len(t) == 1  # the first piece went in when it filled
    for i in range(4, 9):
        w.append(step(i))
    last = w.end_episode(priority=3.0)
    pieces = [t.get(k)["step"].tolist() for k in w.episode_keys]
    if overlap == 0:
        assert pieces == [[0, 1, 2, 3], [4, 5, 6, 7], [8]]
    else:  # each piece repeats the last two steps of the one before
        assert pieces == [[0, 1, 2, 3], [2, 3, 4, 5], [4, 5, 6, 7], [6, 7, 8]]
    assert last == w.episode_keys[-1]
    priorities = dict(zip(t.contents()["key"].tolist(), t.contents()["priority"].tolist()))
    assert [priorities[k] for k in w.episode_keys] == [1.0] * (len(pieces) - 1) + [3.0]


def test_a_full_piece_whose_insert_timed_out_goes_in_at_flush_and_nothing_is_lost():
    # Two inserts are admitted, then one more per sampled row.
    limiter = gx.SampleToInsertRatio(samples_per_insert=1.0, min_size_to_sample=1,
                                     error_buffer=1.0, timeout=0.1)
    t = table(max_length=2, rate_limiter=limiter)
    w = t.writer(max_length_overflow="split")
    for i in range(5):
        w.append(step(i))  # pieces [0, 1] and [2, 3] go in as they fill
    with pytest.raises(TimeoutError):
        w.append(step(5))  # [4, 5] is full, but the limiter holds it back
    assert w.steps == 2 and len(t) == 2
    t.sample(jax.random.key(0), 1)
    w.flush()  # the pending piece goes in now
    assert len(t) == 3 and w.steps == 0
    w.append(step(6))
    t.sample(jax.random.key(1), 1)
    w.end_episode()
    assert [t.get(k)["step"].tolist() for k in w.episode_keys] == [[0, 1], [2, 3], [4, 5], [6]]


@pytest.mark.parametrize("retry", ["append", "end_episode"])
def test_a_full_piece_whose_insert_timed_out_goes_in_at_the_next_append_or_end(retry):
    """writer.md: the held-back piece goes in at the next append, flush() or
    end_episode (the flush route is the test above)."""
    limiter = gx.SampleToInsertRatio(samples_per_insert=1.0, min_size_to_sample=1,
                                     error_buffer=1.0, timeout=0.1)
    t = table(max_length=2, rate_limiter=limiter)
    w = t.writer(max_length_overflow="split")
    for i in range(5):
        w.append(step(i))
    with pytest.raises(TimeoutError):
        w.append(step(5))  # [4, 5] is full, but the limiter holds it back
    t.sample(jax.random.key(0), 1)
    if retry == "append":
        w.append(step(6))  # [4, 5] goes in first, then 6 starts the next piece
        assert len(t) == 3 and w.steps == 1
        t.sample(jax.random.key(1), 1)
        w.end_episode()
        expected = [[0, 1], [2, 3], [4, 5], [6]]
    else:
        w.end_episode()
        expected = [[0, 1], [2, 3], [4, 5]]
    assert [t.get(k)["step"].tolist() for k in w.episode_keys] == expected
    assert w.steps == 0


def test_an_episode_ending_on_a_full_piece_adds_no_empty_one():
    t = table(max_length=3)
    w = t.writer(max_length_overflow="split", overlap=1)
    for i in range(3):
        w.append(step(i))
    key = w.end_episode()
    assert w.episode_keys == (key,) and len(t) == 1


@pytest.mark.parametrize("overlap", [0, 1])
@pytest.mark.parametrize("length", [3, 5, 7])
def test_a_split_episode_ending_on_a_full_piece_gets_the_final_priority(overlap, length):
    """The last piece went in when it filled (priority PIECE_PRIORITY); end_episode's
    priority must still reach it (it was dropped once)."""
    t = table(max_length=3)
    w = t.writer(max_length_overflow="split", overlap=overlap)
    for i in range(length):
        w.append(step(i))
    key = w.end_episode(priority=5.0)
    contents = t.contents()
    priority = dict(zip(contents["key"].tolist(), contents["priority"].tolist()))
    assert key == w.episode_keys[-1] and priority[key] == 5.0
    assert all(priority[k] == PIECE_PRIORITY for k in w.episode_keys[:-1])


def test_the_final_priority_of_an_evicted_last_piece_changes_nothing():
    t = table(capacity=1, max_length=2)
    w = t.writer(max_length_overflow="split")
    w.append(step(0))
    w.append(step(1))  # piece 1 in
    w.append(step(2))
    w.append(step(3))  # piece 2 in, evicting piece 1
    t.insert({"obs": np.zeros((1, 3), np.float32), "step": np.zeros(1, np.int32)})  # evicts 2
    before = t.contents()
    w.end_episode(priority=3.0)
    after = t.contents()
    assert before["key"].tolist() == after["key"].tolist()
    assert after["priority"].tolist() == before["priority"].tolist()


def test_bad_steps_raise_and_leave_the_episode_intact():
    t = table()
    w = t.writer()
    w.append(step(0))
    for bad, error in (({"obs": np.zeros(3)}, ValueError),                       # missing
                       ({**step(1), "extra": 1}, ValueError),                    # unknown
                       ({"obs": np.zeros(4), "step": 1}, ValueError),            # shape
                       ({"obs": np.zeros(3), "step": 2**40}, ValueError),        # range
                       ({"obs": np.zeros(3), "step": 1.5}, TypeError),           # unsafe cast
                       ({"obs": np.array(["a"] * 3), "step": 1}, TypeError),     # not numeric
                       ([1, 2], TypeError)):
        with pytest.raises(error):
            w.append(bad)
    w.append(step(1))
    assert t.get(w.end_episode())["step"].tolist() == [0, 1]
    for bad_priority in (-1.0, float("nan")):
        w.append(step(0))
        with pytest.raises(ValueError):
            w.end_episode(priority=bad_priority)
        assert w.steps == 1  # still pending: end it again with a good one
        w.end_episode()


def test_bad_writer_arguments_are_refused():
    t = table(max_length=4)
    with pytest.raises(ValueError, match="max_length_overflow"):
        t.writer(max_length_overflow="truncate")
    with pytest.raises(ValueError, match="overlap"):
        t.writer(max_length_overflow="split", overlap=4)
    with pytest.raises(ValueError, match="split"):
        t.writer(overlap=1)
    with pytest.raises(ValueError, match="no steps"):
        t.writer().end_episode()


def test_closed_or_dropped_writers_insert_nothing():
    t = table()
    with t.writer() as w:
        w.append(step(0))
    assert w.closed and len(t) == 0
    with pytest.raises(RuntimeError, match="closed"):
        w.append(step(1))
    dropped = t.writer()
    dropped.append(step(0))
    del dropped
    gc.collect()
    assert len(t) == 0
    w = t.writer()
    w.append(step(0))
    t.close()
    with pytest.raises(RuntimeError):
        w.end_episode()


def test_a_split_episode_stopped_part_way_names_the_pieces_it_left():
    """writer.md: a writer closed mid-episode inserts nothing more of it; with
    "split" the pieces that filled stay, and inserted_keys names them (they
    were lost: episode_keys still named the episode before)."""
    t = table(max_length=4)
    with pytest.raises(KeyError):
        with t.writer(max_length_overflow="split") as w:
            for i in range(3):
                w.append(step(i))
            w.end_episode()
            assert w.inserted_keys == ()
            for i in range(9):  # pieces [0-3] and [4-7] go in as they fill
                w.append(step(i, episode=1))
                assert len(w.inserted_keys) == (i + 1) // 4
            raise KeyError("the actor's environment failed")
    assert len(w.inserted_keys) == 2 and len(t) == 3  # the 9th step went nowhere
    assert [t.get(k)["step"].tolist() for k in w.inserted_keys] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert len(w.episode_keys) == 1 and w.episode_keys[0] not in w.inserted_keys
    t.update_priorities(list(w.inserted_keys), [0.0, 0.0])  # e.g. never drawn by priority


def test_end_episode_takes_one_priority_on_a_step_priority_table_too():
    t = gx.Table(COLUMNS, capacity=4, max_length=5, placement="host", step_priorities=True)
    w = t.writer()
    for i in range(3):
        w.append(step(i))
    with pytest.raises(TypeError, match="priority must be a real number"):
        w.end_episode(priority=np.array([1.0, 2.0, 3.0]))
    assert w.steps == 3  # kept
    key = w.end_episode(priority=2.0)
    np.testing.assert_array_equal(t.contents()["step_priorities"], [2.0, 2.0, 2.0])
    assert t.contents()["key"].tolist() == [key]


@pytest.mark.parametrize("value", ["fast", "general"])
def test_a_writer_of_a_closed_table_refuses_appends(value):
    """append used to go on accepting steps (only end_episode raised)."""
    t = table()
    w = t.writer()
    w.append(step(0))  # the fast path's buffers exist now
    t.close()
    # "fast": exactly typed values (the native path); "general": lists (the checked path)
    bad = step(1) if value == "fast" else {"obs": [0.0, 0.0, 0.0], "step": 1}
    with pytest.raises(RuntimeError, match="table .* is closed"):
        w.append(bad)
    assert w.steps == 1


def test_samplers_in_other_threads_never_see_a_partial_episode():
    length, episodes = 5, 60
    t = table(capacity=8, max_length=length)
    first = t.writer()
    for i in range(length):
        first.append(step(i, episode=0))
    first.end_episode()
    errors: list[str] = []
    done = threading.Event()

    def write():
        w = t.writer()
        for e in range(1, episodes):
            for i in range(length):
                w.append(step(i, episode=e))
            w.end_episode()
        done.set()

    thread = threading.Thread(target=write)
    thread.start()
    sample = jax.jit(lambda s, k: t.sample(s, k, 32))
    n, state = 0, t.state()
    while not done.is_set() or n < 5:
        state, b = sample(state, jax.random.key(n))
        n += 1
        valid = np.asarray(b.mask).sum(axis=1)
        obs, steps = np.asarray(b["obs"]), np.asarray(b["step"])
        for row in range(32):
            if valid[row] != length:
                errors.append(f"a row of {valid[row]} steps")
            real = np.asarray(b.mask)[row]
            if not (steps[row][real] == np.arange(length)).all() or \
                    len(set(obs[row][real][:, 0].tolist())) != 1:
                errors.append(f"a mixed or torn row {steps[row][real]}")
    thread.join()
    assert errors == [] and n >= 5
    assert t.stats()["inserts"] == episodes
