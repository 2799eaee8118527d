"""update_priorities: eager and traced, skipped keys, validation, and its effect
on sampling within a lax.scan."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gearjax as gx


@pytest.fixture
def table():
    t = gx.Table({"x": gx.Column((), "float32")}, capacity=8, max_length=4)
    for _ in range(8):
        t.insert({"x": np.zeros(2)}, priority=1.0)
    yield t
    t.close()


@pytest.fixture
def keys(table):
    """The table's keys in insertion order."""
    return table.contents()["key"]


def test_eager_update_sets_priorities_and_counts_live_keys(table, keys):
    assert table.update_priorities([keys[1], keys[3], 99], [5.0, 0.5, 2.0]) == 2
    np.testing.assert_array_equal(table.contents()["priority"], [1, 5, 1, 0.5, 1, 1, 1, 1])
    assert table.stats()["priority_updates"] == 2


def test_keys_that_name_no_live_trajectory_are_skipped(table, keys):
    slot_mask = (1 << table.slot_bits) - 1
    older_occupant = int(keys[2]) - (1 << table.slot_bits)  # same slot, an earlier sequence
    never = [-1, older_occupant, int(keys[-1]) + (1 << table.slot_bits), 2**62, 2**63 - 1]
    assert all(k & slot_mask < 8 for k in never[1:4])
    assert table.update_priorities(never, [9.0] * len(never)) == 0
    np.testing.assert_array_equal(table.contents()["priority"], np.ones(8))


def test_repeated_key_last_value_wins(table, keys):
    table.update_priorities(np.array([keys[2]] * 3), np.array([4.0, 3.0, 7.0]))
    assert table.contents()["priority"][2] == 7.0


@pytest.mark.parametrize("dtype", ["bfloat16", "float8_e4m3fn", "float16"])
def test_low_precision_priorities_are_taken_eagerly_as_in_jit(table, keys, dtype):
    """Fails when eager checks ask NumPy whether the dtype is floating: it says
    no for ml_dtypes' bfloat16 and float8, which jitted calls take (mixed
    precision TD errors), and every eager form refused them."""
    low = jnp.asarray([2.0, 3.0], dtype)
    picked = keys[:2]
    assert table.update_priorities(picked, low) == 2
    assert table.update_priorities(picked, np.asarray(low)) == 2  # the NumPy array of it
    state, count = table.update_priorities(table.state(), picked, low)
    assert int(count) == 2
    np.testing.assert_array_equal(table.contents()["priority"][:2], [2.0, 3.0])
    inserted = table.insert_batch({"x": np.ones((2, 2), np.float32)}, np.array([2, 2]),
                                  jnp.asarray([4.0, 0.5], dtype))
    np.testing.assert_array_equal(table.contents()["priority"][-2:], [4.0, 0.5])
    assert len(inserted) == 2


@pytest.mark.parametrize("keys, priorities, error", [
    ([0, 1], [1.0, -1.0], ValueError),
    ([0, 1], [1.0, np.nan], ValueError),
    ([0, 1], [np.inf, 1.0], ValueError),
    ([0, 1], [1.0], ValueError),
    ([0.5, 1.0], [1.0, 1.0], TypeError),
    ([0, 1], ["a", "b"], TypeError),
])
def test_bad_updates_raise_and_change_nothing(table, keys, priorities, error):
    before = table.contents()["priority"].copy()
    with pytest.raises(error):
        table.update_priorities(keys, priorities)
    np.testing.assert_array_equal(table.contents()["priority"], before)


@pytest.mark.parametrize("values", [
    np.arange(1.0, 9.0)[::2],                  # strided
    np.array([1.5, 2.5], ">f8"),                # big-endian
    np.array([[3, 4], [5, 6]], np.int8),        # integers, 2-D
    np.array([1e30, 2.2250738585072014e-308]),  # the bounds themselves
    jnp.asarray([2.0, 0.5], jnp.bfloat16),
], ids=["strided", "big-endian", "int8", "bounds", "bfloat16"])
def test_checked_priorities_are_contiguous_native_float64_of_the_same_values(values):
    """The eager update's check (gearjax._checks.priorities) hands the native
    core its values as they are when all are in range (no copy then): they
    must still arrive as contiguous float64 in this machine's byte order."""
    out = gx._checks.priorities(values)
    assert out.dtype == np.float64 and out.dtype.isnative and out.flags.c_contiguous
    np.testing.assert_array_equal(out, np.asarray(values, np.float64))


def test_a_long_double_too_small_for_float64_is_refused_not_taken_as_zero():
    """A positive long double below float64's range rounds to 0 there: it is
    out of range (so never drawn), not priority 0."""
    tiny = np.longdouble("1e-4000")
    if tiny == 0:
        pytest.skip("this platform's long double is float64: no such value")
    with pytest.raises(ValueError, match="entry 1"):
        gx._checks.priorities(np.array([1.0, tiny, 0.0], np.longdouble))
    with pytest.raises(ValueError, match="priority must be"):
        gx._checks.priority(tiny)
    np.testing.assert_array_equal(
        gx._checks.priorities(np.array([1.0, 0.0], np.longdouble)), [1.0, 0.0])


def test_checked_zero_priorities_come_back_positive():
    out = gx._checks.priorities(np.array([-0.0, 0.0, 1.0]))
    np.testing.assert_array_equal(out, [0.0, 0.0, 1.0])
    assert not np.signbit(out).any()


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf, -1.0, 5e-324, 1e-310, 1.1e30])
def test_a_bad_priority_is_refused_naming_its_entry(bad):
    with pytest.raises(ValueError, match="entry 2 is"):
        gx._checks.priorities(np.array([1.0, 0.0, bad, 2.0]))


@pytest.mark.parametrize("dtype", [bool, np.complex64, object, "U3", "datetime64[s]"])
def test_priorities_and_keys_of_other_kinds_are_refused(table, dtype):
    values = np.zeros(2, dtype)
    with pytest.raises(TypeError, match="real numbers"):
        table.update_priorities(np.array([0, 1]), values)
    with pytest.raises(TypeError, match="keys must be"):
        table.update_priorities(values, np.ones(2))
    with pytest.raises(TypeError, match="keys must be"):
        table.update_priorities(np.array([0, 1], np.uint64), np.ones(2))
    with pytest.raises(TypeError):
        table.update_priorities(jax.random.split(jax.random.key(0)), np.ones(2))


def test_traced_update_returns_count_and_applies(table, keys):
    update = jax.jit(lambda s, k, p: table.update_priorities(s, k, p))
    state, count = update(table.state(), jnp.array([keys[0], keys[5], 42]),
                          jnp.array([3.0, 2.0, 1.0]))
    jax.block_until_ready(state)
    assert count.dtype == jnp.int32 and int(count) == 2
    np.testing.assert_array_equal(table.contents()["priority"][[0, 5]], [3.0, 2.0])


def test_traced_update_with_bad_values_fails_and_changes_nothing(cpu_device, table, keys):
    # On the CPU; a GPU update returns -1 and the next call raises instead
    # (test_gpu.py::test_gpu_priority_updates_count_and_defer_a_bad_value).
    update = jax.jit(lambda s, k, p: table.update_priorities(s, k, p))
    with pytest.raises(Exception, match="entry 1 is -2; priorities must be finite, >= 0 and"):
        jax.block_until_ready(update(table.state(), jnp.array(keys[:2]),
                                     jnp.array([1.0, -2.0])))
    np.testing.assert_array_equal(table.contents()["priority"], np.ones(8))


def test_update_inside_scan_steers_the_next_sample(table):
    """Each step samples one trajectory by priority, then zeroes its priority:
    the eight steps must visit all eight trajectories once."""

    def step(state, key):
        state, batch = table.sample(state, key, 1, 1, gx.Prioritized(1.0))
        state, _ = table.update_priorities(state, batch.keys, jnp.zeros(1))
        return state, batch.keys[0]

    state, visited = jax.jit(lambda s, ks: jax.lax.scan(step, s, ks))(
        table.state(), jax.random.split(jax.random.key(0), 8))
    jax.block_until_ready(state)
    assert sorted(np.asarray(visited).tolist()) == sorted(table.contents()["key"].tolist())
    np.testing.assert_array_equal(table.contents()["priority"], np.zeros(8))


def test_topk_follows_updates(table, keys):
    table.update_priorities([keys[6], keys[2]], [10.0, 9.0])
    drawn = np.asarray(table.sample(jax.random.key(0), 128, 1, gx.TopK(2)).keys)
    assert set(drawn.tolist()) == {keys[2], keys[6]}


def test_priorities_of_evicted_keys_are_ignored_even_when_the_slot_is_reused(table, keys):
    new = table.insert({"x": np.zeros(2)})  # evicts keys[0] and takes its slot
    assert new & ((1 << table.slot_bits) - 1) == keys[0] & ((1 << table.slot_bits) - 1)
    assert table.update_priorities([keys[0]], [100.0]) == 0
    assert keys[0] not in table.contents()["key"]
    assert table.contents()["priority"][-1] == 1.0  # the new occupant kept its priority


def test_at_most_eight_alphas_per_table(table):
    for alpha in range(8):
        table.sample(jax.random.key(0), 1, 1, gx.Prioritized(float(alpha)))
    with pytest.raises(ValueError, match="at most 8"):
        table.sample(jax.random.key(0), 1, 1, gx.Prioritized(7.5))


def test_a_kept_alpha_is_looked_up_once_and_a_ninth_still_refused(table):
    """The table remembers the (strategy, alpha) trees it keeps: the native
    core is asked about an alpha until it keeps a tree for it, then not
    again (its trees stay while it is open), and the ninth alpha is still
    refused after eight remembered ones."""
    native, asked = table._native, []

    class Counting:  # the native table, counting what the room check asks
        def __getattr__(self, name):
            if name == "alphas":
                asked.append(name)
            return getattr(native, name)

    table._native = Counting()
    for _ in range(3):
        table.sample(jax.random.key(0), 1, 1, gx.Prioritized(0.5))
    assert len(asked) == 2  # before the tree was made, and once it was
    for alpha in range(7):
        table.sample(jax.random.key(0), 1, 1, gx.Prioritized(float(alpha)))
    with pytest.raises(ValueError, match="at most 8"):
        table.sample(jax.random.key(0), 1, 1, gx.Prioritized(7.5))
    table.sample(jax.random.key(0), 1, 1, gx.Prioritized(0.5))  # a kept one still passes


def test_extreme_priorities_and_alphas_keep_every_weight_finite_and_drawable(table, keys):
    table.update_priorities(keys, [1e30, 1e30, 1e30, 1e30, 2.3e-308, 1e-30, 0.0, 1.0])
    for alpha in (0.5, 1.0, 8.0):
        batch = table.sample(jax.random.key(0), 256, 1, gx.Prioritized(alpha))
        probability = np.asarray(batch.probability)
        assert np.isfinite(probability).all() and (probability > 0).all()
        weights = (np.asarray(batch.table_size) * probability) ** -0.4
        assert np.isfinite(weights).all()
        assert 0 < table.stats()["samples"]
    # The weights of positive priorities are never 0, even where p ** 8 underflows.
    only_tiny = table.update_priorities(keys, [0, 0, 0, 0, 2.3e-308, 0, 0, 0])
    assert only_tiny == 8
    drawn = np.asarray(table.sample(jax.random.key(1), 16, 1, gx.Prioritized(8.0)).keys)
    assert set(drawn.tolist()) == {keys[4]}


def test_the_bound_is_1e30_as_a_float32_so_clipping_in_float32_passes_in_jit(table, keys):
    """jnp.clip(td, 0, 1e30) in float32 rounds the bound up to 1.0000000150474662e+30:
    that value is the documented maximum (an exact 1e30 bound failed these programs)."""
    bound = float(np.float32(1e30))
    assert bound == gx._checks.MAX_PRIORITY == 1.0000000150474662e30
    td = jnp.asarray([1e38, 3.0, -1.0, 1e30, 0.5, 2.0, 7.0, 1e31], jnp.float32)
    state = table.state()

    @jax.jit
    def update(state, keys, td):
        return table.update_priorities(state, keys, jnp.clip(td, 0, 1e30))

    state, count = jax.block_until_ready(update(state, jnp.asarray(keys), td))
    assert int(count) == 8
    priority = dict(zip(table.contents()["key"].tolist(), table.contents()["priority"]))
    assert [priority[k] for k in keys] == [bound, 3.0, 0.0, bound, 0.5, 2.0, 7.0, bound]
    # Host updates: the bound itself passes, the next float64 above it is refused.
    assert table.update_priorities(keys[:1], [bound]) == 1
    with pytest.raises(ValueError, match=r"1\.0000000150474662e\+30\] \(1e30 as a float32\)"):
        table.update_priorities(keys[:1], [np.nextafter(bound, np.inf)])
    assert table.contents()["priority"][0] == bound
