"""insert_batch: trajectories made inside jit (on-device rollouts) go into the
table: contents, keys, eviction, use inside lax.scan next to sampling, and bad
input refused with nothing inserted."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gearjax as gx

COLUMNS = {"obs": gx.Column((3,), "float32", pad=-1.0), "step": gx.Column((), "int32", pad=-7)}


@pytest.fixture
def table():
    t = gx.Table(COLUMNS, capacity=6, max_length=8)
    yield t
    t.close()


def rollout(key, rows=3, steps=5):
    obs = jax.random.normal(key, (rows, steps, 3))
    step = jnp.broadcast_to(jnp.arange(steps, dtype=jnp.int32), (rows, steps))
    return {"obs": obs, "step": step}


def insert_batch_twice_in_jit_and_check(table: gx.Table) -> None:
    """Two jitted rollouts of 3 trajectories (lengths 5, 2, 4) into a table of
    4 slots, on JAX's default device: keys in insertion order (key = sequence
    << slot_bits | slot, so the sequences are 0..5, never the raw keys),
    evictions, contents, priorities, and a bad length refused with nothing
    inserted. Shared with test_gpu.py (the CUDA handler)."""

    @jax.jit
    def rollout_and_insert(state, key):
        columns = rollout(key)
        state, keys = table.insert_batch(state, columns, jnp.array([5, 2, 4]),
                                         jnp.array([1.0, 2.0, 0.5]))
        return state, keys, columns["obs"]

    state, keys, obs = rollout_and_insert(table.state(), jax.random.key(0))
    state, keys2, obs2 = rollout_and_insert(state, jax.random.key(1))  # 6 into 4 slots: evicts 2
    jax.block_until_ready(state)  # contents() sees what has run
    sequence = lambda k: (np.asarray(k) >> table.slot_bits).tolist()  # noqa: E731
    assert sequence(keys) == [0, 1, 2] and sequence(keys2) == [3, 4, 5]
    stored = np.concatenate([np.asarray(keys), np.asarray(keys2)])[2:]
    assert table.contents()["key"].tolist() == stored.tolist()
    np.testing.assert_array_equal(table.get(int(stored[0]))["obs"], np.asarray(obs)[2, :4])
    for i, length in enumerate([5, 2, 4]):
        got = table.get(int(np.asarray(keys2)[i]))
        np.testing.assert_array_equal(got["obs"], np.asarray(obs2)[i, :length])
        np.testing.assert_array_equal(got["step"], np.arange(length))
    assert table.contents()["priority"].tolist() == [0.5, 1.0, 2.0, 0.5]
    with pytest.raises(Exception, match="outside \\[1, 5\\]; nothing was inserted"):
        jax.block_until_ready(jax.jit(lambda s: table.insert_batch(
            s, {"obs": jnp.zeros((1, 5, 3)), "step": jnp.zeros((1, 5), jnp.int32)},
            jnp.array([6])))(state))
    assert table.contents()["key"].tolist() == stored.tolist()


def test_two_rollouts_inside_jit_go_in_with_their_keys_and_evict():
    with gx.Table(COLUMNS, capacity=4, max_length=6) as table:
        insert_batch_twice_in_jit_and_check(table)


def test_inside_jit_inserts_the_real_steps(table):
    key = jax.random.key(0)
    columns = rollout(key)
    lengths = jnp.array([5, 2, 1])
    _, keys = jax.jit(lambda s, k: table.insert_batch(s, rollout(k), lengths,
                                                      jnp.array([1.0, 2.0, 3.0])))(
        table.state(), key)
    assert keys.dtype == jnp.int64
    keys = np.asarray(keys)  # the program has run
    np.testing.assert_array_equal(keys, table.contents()["key"])
    np.testing.assert_array_equal(np.asarray(keys) >> table.slot_bits, [0, 1, 2])
    np.testing.assert_array_equal(table.contents()["length"], [5, 2, 1])
    np.testing.assert_array_equal(table.contents()["priority"], [1.0, 2.0, 3.0])
    for i, length in enumerate([5, 2, 1]):
        stored = table.get(int(keys[i]))
        np.testing.assert_array_equal(stored["obs"], np.asarray(columns["obs"][i, :length]))
        np.testing.assert_array_equal(stored["step"], np.arange(length))


def test_eager_call_and_dtype_conversion(table):
    columns = {"obs": np.ones((2, 3, 3), np.float64), "step": np.zeros((2, 3), np.int64)}
    keys = table.insert_batch(columns, np.array([3, 3]))
    np.testing.assert_array_equal(np.asarray(keys) >> table.slot_bits, [0, 1])
    assert table.get(int(keys[1]))["obs"].dtype == np.float32


def test_an_eager_call_runs_no_program_and_matches_the_compiled_one(table, monkeypatch):
    """Eagerly, host data goes straight to the native core (no program made or
    run), stores what the compiled call stores (its float32 priorities
    aside: they are kept as given, as insert keeps them) and returns the keys
    as a NumPy array, as insert_many does; the state form too, after the
    state's program."""
    columns = {"obs": np.arange(24, dtype=np.float32).reshape(2, 4, 3),
               "step": np.arange(8, dtype=np.int32).reshape(2, 4)}
    compiled = gx.Table(COLUMNS, capacity=6, max_length=8)
    state, compiled_keys = jax.jit(lambda s, c: compiled.insert_batch(
        s, c, jnp.array([4, 2]), jnp.array([0.5, 2.0])))(compiled.state(), columns)
    jax.block_until_ready(state)

    def no_program(spec):
        raise AssertionError("an eager insert_batch made a program")

    monkeypatch.setattr(type(table._spec), "insert_batch_program", no_program)
    keys = table.insert_batch(columns, np.array([4, 2]), np.array([0.5, 2.0]))
    assert isinstance(keys, np.ndarray) and keys.dtype == np.int64
    np.testing.assert_array_equal(keys, compiled_keys)
    for key in np.asarray(keys).tolist():
        for name in COLUMNS:
            np.testing.assert_array_equal(table.get(key)[name], compiled.get(key)[name])
    np.testing.assert_array_equal(table.contents()["length"], [4, 2])
    state, more = table.insert_batch(table.state(), columns, np.array([1, 1]),
                                     np.array([0.1, 0.3]))
    assert (np.asarray(more) >> table.slot_bits).tolist() == [2, 3]
    assert table.contents()["priority"].tolist() == [0.5, 2.0, 0.1, 0.3]  # not float32's
    compiled.close()


def test_an_eager_call_held_back_raises_as_the_compiled_call_does():
    limited = gx.Table(COLUMNS, capacity=6, max_length=8,
                       rate_limiter=gx.SampleToInsertRatio(1.0, 1, 1.0, timeout=0.05))
    columns = {"obs": np.zeros((3, 2, 3), np.float32), "step": np.zeros((3, 2), np.int32)}
    with pytest.raises(jax.errors.JaxRuntimeError,
                       match=r"gearjax \[timeout\]: .*stopped after inserting 2 of 3") as e:
        limited.insert_batch(columns, np.array([2, 2, 2]))
    assert gx.table_error(e.value) == "timeout"
    assert len(limited) == 2
    limited.close()
    with pytest.raises(RuntimeError):
        limited.insert_batch(columns, np.array([2, 2, 2]))


def test_scan_that_rolls_out_inserts_and_samples(table):
    """An on-device loop: each step inserts one trajectory, then samples it
    back with Recent(1) in the same compiled program."""

    def body(state, key):
        columns = rollout(key, rows=1, steps=4)
        state, _ = table.insert_batch(state, columns, jnp.array([4]))
        state, batch = table.sample(state, jax.random.fold_in(key, 1), 1, None, gx.Recent(1),
                                    pad="right")
        return state, (columns["obs"][0], batch["obs"][0, :4], batch.keys[0])

    state, (made, sampled, keys) = jax.jit(lambda s, ks: jax.lax.scan(body, s, ks))(
        table.state(), jax.random.split(jax.random.key(1), 10))
    jax.block_until_ready(state)
    np.testing.assert_array_equal(made, sampled)
    np.testing.assert_array_equal(np.asarray(keys) >> table.slot_bits, np.arange(10))
    assert table.stats()["evictions"] == 4  # capacity 6


@pytest.mark.parametrize("lengths, priorities, match", [
    ([5, 0, 1], None, "trajectory 1 has length 0"),
    ([5, 6, 1], None, "trajectory 1 has length 6"),
    ([5, 2, 1], [1.0, -1.0, 1.0], "the priority of trajectory 1 is -1"),
    ([5, 2, 1], [1.0, 1.0, np.nan], "the priority of trajectory 2 is nan"),
    ([5, 2, 1], [1.0, 1.0, 1e38], "the priority of trajectory 2 is 9.99"),
])
def test_bad_values_insert_nothing(table, lengths, priorities, match):
    table.insert_batch(rollout(jax.random.key(0), 1), jnp.array([2]))
    before = table.stats()
    with pytest.raises(Exception, match=match):
        jax.block_until_ready(jax.jit(lambda s: table.insert_batch(
            s, rollout(jax.random.key(1)), jnp.array(lengths),
            None if priorities is None else jnp.array(priorities)))(table.state()))
    after = table.stats()
    for field in ("size", "inserts", "next_sequence", "num_steps", "evictions"):
        assert before[field] == after[field]
    # The table keeps working after a refused batch.
    _, keys = jax.block_until_ready(jax.jit(lambda s: table.insert_batch(
        s, rollout(jax.random.key(2), 1), jnp.array([3])))(table.state()))
    np.testing.assert_array_equal(np.asarray(keys) >> table.slot_bits, [before["next_sequence"]])


@pytest.mark.parametrize("make, error", [
    (lambda: ({"obs": jnp.zeros((2, 3, 3))}, jnp.array([1, 1])), ValueError),               # missing
    (lambda: ({**rollout(jax.random.key(0), 2, 3), "x": jnp.zeros((2, 3))}, jnp.ones(2, int)),
     ValueError),                                                                           # extra
    (lambda: ({"obs": jnp.zeros((2, 3, 4)), "step": jnp.zeros((2, 3))}, jnp.ones(2, int)),
     ValueError),                                                                           # shape
    (lambda: ({"obs": jnp.zeros((2, 9, 3)), "step": jnp.zeros((2, 9))}, jnp.ones(2, int)),
     ValueError),                                                                           # T > max
    (lambda: (rollout(jax.random.key(0), 2, 3), jnp.ones(3, int)), ValueError),             # lengths
    (lambda: (rollout(jax.random.key(0), 2, 3), jnp.ones(2)), ValueError),                  # float lengths
    (lambda: ([1, 2], jnp.ones(2, int)), TypeError),                                        # not a mapping
])
def test_bad_shapes_and_columns_are_refused_when_traced(table, make, error):
    columns, lengths = make()
    with pytest.raises(error):
        table.insert_batch(columns, lengths)
    assert len(table) == 0


@pytest.mark.parametrize("form", ["eager", "jitted", "insert_many"])
def test_an_insert_of_more_trajectories_than_keys_left_is_refused_whole(form):
    """A table of few key bits (a ShardedTable's shard has fewer) with 2 keys
    left: an insert of 4 is refused before any goes in (2 went in, then it
    raised), and the 2 left are still there to issue."""
    table = gx.Table({"x": gx.Column((), "float32")}, capacity=2, max_length=1,
                     placement="host", _key_bits=4)
    for _ in range(6):
        table.insert({"x": np.ones(1, np.float32)})
    before = table.contents()["key"].tolist()
    error = jax.errors.JaxRuntimeError if form == "jitted" else ValueError
    with pytest.raises(error, match="2 keys left to issue; an insert of 4"):
        if form == "eager":
            table.insert_batch({"x": np.ones((4, 1), np.float32)}, np.ones(4, np.int32))
        elif form == "jitted":
            jax.block_until_ready(jax.jit(lambda s: table.insert_batch(
                s, {"x": jnp.ones((4, 1))}, jnp.ones(4, jnp.int32)))(table.state()))
        else:
            table.insert_many([{"x": np.ones(1, np.float32)}] * 4)
    assert table.contents()["key"].tolist() == before
    assert len(table.insert_batch({"x": np.ones((2, 1), np.float32)}, np.ones(2, np.int32))) == 2
    with pytest.raises(ValueError, match="issued every key it can"):
        table.insert({"x": np.ones(1, np.float32)})
