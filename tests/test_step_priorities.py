"""Priorities per step (issue 49): tables made with ``step_priorities=True``
keep a priority for every stored step, ``gx.PrioritizedSteps(alpha)`` draws a
step in proportion to ``priority ** alpha`` and places the window there
(TorchRL's PrioritizedSliceSampler), and ``update_priorities(..., steps=)``
sets the sampled steps' priorities, eagerly, in jit and in scan; checkpoints
keep them. Bad input changes nothing."""

from __future__ import annotations

import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

import gearjax as gx
from gearjax import _gearjax

COLUMNS = {"x": gx.Column((), "float32")}
JaxRuntimeError = jax.errors.JaxRuntimeError


def step_table(capacity: int = 8, max_length: int = 10, **kwargs) -> gx.Table:
    return gx.Table(COLUMNS, capacity=capacity, max_length=max_length, step_priorities=True,
                    placement="host", **kwargs)


def insert(table: gx.Table, length: int, priority) -> int:
    """A trajectory whose column holds its step numbers."""
    return table.insert({"x": np.arange(length, dtype=np.float32)}, priority=priority)


def steps_of(table: gx.Table, key: int) -> np.ndarray:
    """contents()'s step priorities of one trajectory."""
    c = table.contents()
    per_trajectory = np.split(c["step_priorities"], np.cumsum(c["length"])[:-1])
    return per_trajectory[list(c["key"]).index(key)]


def draw(table, n, window, cut="start", alpha=1.0, seed=0, **kwargs):
    batch = table.sample(jax.random.key(seed), n, window, gx.PrioritizedSteps(alpha), cut=cut,
                         **kwargs)
    return (np.asarray(batch.keys), np.asarray(batch.start), np.asarray(batch.probability),
            np.asarray(batch.mask), np.asarray(batch["x"]))


@pytest.fixture
def two():
    """Two trajectories: a = 6 steps [1, 2, 0, 0, 4, 1], b = 4 steps of 0.5."""
    table = step_table()
    a = insert(table, 6, np.array([1.0, 2.0, 0.0, 0.0, 4.0, 1.0]))
    b = insert(table, 4, 0.5)
    yield table, a, b
    table.close()


def expected_start_probabilities(weights: dict[int, np.ndarray], eligible) -> dict:
    """(key, start) -> probability: each step's weight over the total of the
    eligible steps (eligible(key, step) says which may start a window)."""
    total = sum(w[s] for k, w in weights.items() for s in range(len(w)) if eligible(k, s))
    return {(k, s): w[s] / total for k, w in weights.items() for s in range(len(w))
            if eligible(k, s) and w[s] > 0}


@pytest.mark.parametrize("cut, window", [("start", 3), ("full", 2)])
def test_normalized_importance_weights_are_those_of_the_drawable_steps(two, cut, window):
    """strategies.md: table_size counts trajectories while probability is a
    step's, so (table_size * probability) ** -beta is the weight over the
    drawable steps times one factor shared by the batch, which dividing by
    the batch's largest weight removes."""
    table, a, b = two
    batch = table.sample(jax.random.key(3), 64, window, gx.PrioritizedSteps(0.7), cut=cut)
    size, probability = np.asarray(batch.table_size), np.asarray(batch.probability, np.float64)
    assert (size == 2).all()  # the trajectories stored, in every row
    lengths = {a: 6, b: 4}
    weights = {a: np.array([1.0, 2.0, 0.0, 0.0, 4.0, 1.0]) ** 0.7, b: np.full(4, 0.5 ** 0.7)}
    weights[a][2:4] = 0.0
    drawable = (lambda k, s: True) if cut == "start" else (lambda k, s: s + window <= lengths[k])
    steps = sum(drawable(k, s) for k in lengths for s in range(lengths[k]))
    expected = expected_start_probabilities(weights, drawable)
    reference = np.array([steps * expected[d] for d in zip(np.asarray(batch.keys).tolist(),
                                                            np.asarray(batch.start).tolist())])
    beta = 0.4
    w, w_reference = (size * probability) ** -beta, reference ** -beta
    np.testing.assert_allclose(w / w.max(), w_reference / w_reference.max(), rtol=1e-5)


@pytest.mark.parametrize("alpha", [1.0, 0.5])
def test_steps_are_drawn_in_proportion_to_their_weight_and_start_the_window(two, alpha):
    table, a, b = two
    weights = {a: np.array([1.0, 2.0, 0.0, 0.0, 4.0, 1.0]) ** alpha, b: np.full(4, 0.5 ** alpha)}
    weights[a][2:4] = 0.0  # priority 0 weighs 0 for alpha > 0
    expected = expected_start_probabilities(weights, lambda k, s: True)
    keys, start, probability, mask, x = draw(table, 20000, 3, alpha=alpha)
    drawn = list(zip(keys.tolist(), start.tolist()))
    assert set(drawn) <= set(expected), "a step of priority 0 started a window"
    np.testing.assert_allclose(probability, [expected[d] for d in drawn], rtol=1e-6)
    counts = np.array([drawn.count(d) for d in expected])
    assert stats.chisquare(counts, np.array(list(expected.values())) * len(drawn)).pvalue > 1e-4
    # The window starts at the drawn step, cut at the trajectory's end (left-padded).
    row = drawn.index((a, 4))
    assert mask[row].tolist() == [False, True, True] and x[row, 1:].tolist() == [4.0, 5.0]


def test_cut_end_ends_the_window_at_the_drawn_step(two):
    table, a, _ = two
    keys, start, _, mask, x = draw(table, 4000, 3, cut="end")
    rows = np.flatnonzero(keys == a)
    last = start[rows] + mask[rows].sum(axis=1) - 1
    assert set(last.tolist()) == {0, 1, 4, 5}  # the steps of positive priority
    row = rows[np.flatnonzero(last == 1)[0]]
    assert mask[row].tolist() == [False, True, True] and x[row, 1:].tolist() == [0.0, 1.0]


def test_cut_full_draws_among_the_starts_of_full_windows(two):
    table, a, b = two
    weights = {a: np.array([1.0, 2.0, 0.0, 0.0, 4.0, 1.0]), b: np.full(4, 0.5)}
    window = 4
    lengths = {a: 6, b: 4}
    expected = expected_start_probabilities(weights, lambda k, s: s <= lengths[k] - window)
    keys, start, probability, mask, _ = draw(table, 20000, window, cut="full")
    drawn = list(zip(keys.tolist(), start.tolist()))
    assert set(drawn) == set(expected)  # (a, 0), (a, 1), (b, 0): step 4 of a is past them
    assert mask.all()
    np.testing.assert_allclose(probability, [expected[d] for d in drawn], rtol=1e-6)
    counts = np.array([drawn.count(d) for d in expected])
    assert stats.chisquare(counts, np.array(list(expected.values())) * len(drawn)).pvalue > 1e-4


def test_without_replacement_rows_are_distinct_trajectories(two):
    table, a, b = two
    keys, start, probability, _, _ = draw(table, 2, 2, replace=False)
    assert sorted(keys.tolist()) == sorted([a, b])
    with pytest.raises(JaxRuntimeError, match="can serve only 2"):
        draw(table, 3, 2, replace=False)


def test_refusals_name_steps_and_the_strategy():
    """Messages written for Prioritized said "every stored trajectory has
    priority 0" and "trajectories with priority > 0" of a PrioritizedSteps
    sample, and a ninth PrioritizedSteps alpha failed in the native call
    (JaxRuntimeError, even eagerly) where a ninth Prioritized alpha raises
    ValueError at the call."""
    table = step_table()
    key = insert(table, 6, np.array([0.0, 0.0, 0.0, 0.0, 1.0, 2.0]))
    with pytest.raises(JaxRuntimeError, match="steps? of priority > 0 where a full window "
                                              "starts among them can serve only 0"):
        draw(table, 2, 3, cut="full", replace=False)  # steps 0-3 may start it: priority 0
    table.update_priorities(np.array([key]), np.zeros((1, 6)), steps=np.arange(6)[None])
    with pytest.raises(JaxRuntimeError, match="PrioritizedSteps: every stored step has "
                                              "priority 0"):
        draw(table, 2, 1)
    table.update_priorities(np.array([key]), np.ones(1))
    for alpha in range(8):
        draw(table, 1, 1, alpha=float(alpha))
    with pytest.raises(ValueError, match=r"at most 8 PrioritizedSteps alphas .*"
                                         r"PrioritizedSteps\(7.5\) would be one more"):
        draw(table, 1, 1, alpha=7.5)
    with pytest.raises(ValueError, match="at most 8 PrioritizedSteps"):
        jax.jit(lambda s: table.sample(s, jax.random.key(0), 1, 1,
                                       gx.PrioritizedSteps(7.5)))(table.state())
    draw(table, 1, 1, alpha=7.0)  # a kept alpha still samples
    table.sample(jax.random.key(0), 1, 1, gx.Prioritized(0.5))  # Prioritized's own places


def test_alpha_zero_draws_every_stored_step_alike(two):
    table, a, b = two
    keys, start, probability, _, _ = draw(table, 5000, 1, alpha=0.0)
    np.testing.assert_allclose(probability, 1 / 10)  # 6 + 4 steps, priority 0 included
    assert len(set(zip(keys.tolist(), start.tolist()))) == 10


def test_a_trajectory_s_priority_is_the_largest_of_its_steps(two):
    table, a, b = two
    c = table.contents()
    assert dict(zip(c["key"].tolist(), c["priority"].tolist())) == {a: 4.0, b: 0.5}
    np.testing.assert_array_equal(steps_of(table, b), np.full(4, 0.5))
    # Prioritized draws trajectories by it (and a trajectory update sets every step).
    keys = np.asarray(table.sample(jax.random.key(0), 2000, 1, gx.Prioritized(1.0)).keys)
    assert abs((keys == a).mean() - 4.0 / 4.5) < 0.03
    assert table.update_priorities(np.array([a]), np.array([3.0])) == 1
    np.testing.assert_array_equal(steps_of(table, a), np.full(6, 3.0))


def test_step_updates_in_every_form_set_the_named_steps(two):
    table, a, b = two
    # Eager, stateless: padding (step -1) is skipped, its NaN never looked at.
    assert table.update_priorities(np.array([a]), np.array([[9.0, np.nan, 7.0]]),
                                   steps=np.array([[1, -1, 2]])) == 1
    np.testing.assert_array_equal(steps_of(table, a), [1, 9, 7, 0, 4, 1])
    # The state form eagerly, then in jit, then in scan.
    state, n = table.update_priorities(table.state(), jnp.array([b]), jnp.array([[2.0]]),
                                       steps=jnp.array([[3]]))
    assert int(n) == 1 and steps_of(table, b).tolist() == [0.5, 0.5, 0.5, 2.0]
    update = jax.jit(lambda s, k, p, t: table.update_priorities(s, k, p, steps=t))
    state, n = update(state, jnp.array([a, b]), jnp.array([[0.0, 0.0], [1.0, 1.0]]),
                      jnp.array([[1, 2], [0, -1]]))
    assert int(n) == 2
    np.testing.assert_array_equal(steps_of(table, a), [1, 0, 0, 0, 4, 1])

    def step(s, key):
        s, batch = table.sample(s, key, 8, 3, gx.PrioritizedSteps(1.0), cut="full")
        s, count = table.update_priorities(s, batch.keys, jnp.full((8, 3), 0.25),
                                           steps=jnp.where(batch.mask, batch.timestep, -1))
        return s, count

    state, counts = jax.jit(lambda s, k: jax.lax.scan(step, s, jax.random.split(k, 3)))(
        state, jax.random.key(0))
    assert np.asarray(counts).tolist() == [8, 8, 8]
    assert 0.25 in steps_of(table, a).tolist() + steps_of(table, b).tolist()
    c = table.contents()  # each trajectory's own priority followed its steps
    for key, priority in zip(c["key"].tolist(), c["priority"].tolist()):
        assert priority == steps_of(table, key).max()


def test_duplicates_last_wins_and_stale_keys_are_skipped(two):
    table, a, b = two
    stale = a + (1 << 20)  # same slot, another sequence
    before = table.stats()["skipped_updates"]
    assert table.update_priorities(np.array([a, stale, a]), np.array([[5.0], [6.0], [8.0]]),
                                   steps=np.array([[0], [0], [0]])) == 2
    assert steps_of(table, a)[0] == 8.0
    assert table.stats()["skipped_updates"] == before + 1


@pytest.mark.parametrize("bad", [np.nan, -1.0, np.inf, 1e31, 1e-320])
def test_a_bad_step_priority_changes_nothing(two, bad):
    table, a, b = two
    before = steps_of(table, a).copy()
    with pytest.raises(ValueError, match="priorities must each be"):
        table.update_priorities(np.array([a]), np.array([[1.0, bad]]), steps=np.array([[0, 1]]))
    if bad != 1e-320:  # in float32 (jit's), 1e-320 is 0.0: a good priority
        with pytest.raises((JaxRuntimeError, ValueError)) as raised:
            jax.block_until_ready(jax.jit(lambda s: table.update_priorities(
                s, jnp.array([a]), jnp.array([[1.0, bad]], jnp.float32),
                steps=jnp.array([[0, 1]])))(table.state()))
        assert gx.table_error(raised.value) == "failed"
    np.testing.assert_array_equal(steps_of(table, a), before)
    with pytest.raises(ValueError, match="step priorities must each be .*; entry 1 is"):
        insert(table, 3, np.array([1.0, bad, 1.0]))
    assert len(table.contents()["key"]) == 2


def test_a_step_past_its_trajectory_changes_nothing(two):
    table, a, b = two
    before = (steps_of(table, a).copy(), steps_of(table, b).copy())
    with pytest.raises(ValueError, match=f"names step 4 of key {b}, which has 4 steps"):
        table.update_priorities(np.array([a, b]), np.array([[7.0], [7.0]]),
                                steps=np.array([[0], [4]]))
    with pytest.raises(ValueError, match="past max_length"):
        table.update_priorities(np.array([a]), np.array([[7.0]]), steps=np.array([[10]]))
    np.testing.assert_array_equal(steps_of(table, a), before[0])
    np.testing.assert_array_equal(steps_of(table, b), before[1])


def test_wrong_shapes_types_and_tables_are_refused(two):
    table, a, _ = two
    with pytest.raises(ValueError, match=r"priorities and steps \[B, W\] alike"):
        table.update_priorities(np.array([a]), np.array([1.0]), steps=np.array([0]))
    with pytest.raises(ValueError, match=r"\[B, W\] alike"):
        table.update_priorities(np.array([a]), np.ones((1, 2)), steps=np.zeros((1, 3), int))
    with pytest.raises(TypeError, match="steps must be signed integers"):
        table.update_priorities(np.array([a]), np.ones((1, 1)), steps=np.zeros((1, 1)))
    with pytest.raises(ValueError, match=r"shape \(5,\)"):
        insert(table, 5, np.ones(4))
    with pytest.raises(ValueError, match="give a window"):
        table.sample(jax.random.key(0), 2, None, gx.PrioritizedSteps(1.0))
    with gx.Table(COLUMNS, capacity=4, max_length=4, placement="host") as plain:
        key = plain.insert({"x": np.zeros(2, np.float32)})
        with pytest.raises(TypeError, match="step_priorities=True"):
            plain.insert({"x": np.zeros(2, np.float32)}, priority=np.ones(2))
        with pytest.raises(ValueError, match="step_priorities=True"):
            plain.update_priorities(np.array([key]), np.ones((1, 1)), steps=np.zeros((1, 1), int))
        with pytest.raises(ValueError, match="step_priorities=True"):
            plain.sample(jax.random.key(0), 2, 1, gx.PrioritizedSteps(1.0))
        assert len(plain.contents()["key"]) == 1
    with pytest.raises(TypeError, match="step_priorities must be a bool"):
        gx.Table(COLUMNS, capacity=4, max_length=4, step_priorities=1)
    with pytest.raises(ValueError, match=r"alpha"):
        gx.PrioritizedSteps(9.0)


def test_an_evicted_trajectory_s_steps_are_never_drawn_again():
    with step_table(capacity=2, max_length=10) as table:
        insert(table, 10, 100.0)  # long and heavy
        first = insert(table, 3, 1.0)
        newest = insert(table, 2, 1.0)  # evicts the long one: its slot now holds 2 steps
        keys, start, probability, _, _ = draw(table, 4000, 1)
        assert set(keys.tolist()) == {first, newest}
        assert set(zip(keys.tolist(), start.tolist())) == {(first, 0), (first, 1), (first, 2),
                                                           (newest, 0), (newest, 1)}
        np.testing.assert_allclose(probability, 1 / 5, rtol=1e-6)


def test_batch_inserts_and_consume_once_tables_keep_step_priorities():
    with step_table(capacity=8, max_length=6, max_times_sampled=1) as table:
        state, keys = jax.jit(lambda s: table.insert_batch(
            s, {"x": jnp.zeros((2, 6))}, jnp.array([6, 3]), jnp.array([2.0, 1.0])))(table.state())
        keys = np.asarray(keys).tolist()
        np.testing.assert_array_equal(steps_of(table, keys[0]), np.full(6, 2.0))
        drawn = draw(table, 2, 2)[0]
        assert sorted(drawn.tolist()) == sorted(keys)  # each consumed once
        assert len(table.contents()["key"]) == 0


def test_checkpoints_keep_step_priorities_and_batches(two, tmp_path):
    table, a, b = two
    table.update_priorities(np.array([b]), np.array([[3.0]]), steps=np.array([[2]]))
    path = tmp_path / "steps.gx"
    table.save(path)
    with gx.Table.load(path, placement="host") as loaded:
        for key in (a, b):
            np.testing.assert_array_equal(steps_of(loaded, key), steps_of(table, key))
        for cut in ("start", "full"):
            for got, want in zip(draw(loaded, 64, 3, cut=cut, seed=4),
                                 draw(table, 64, 3, cut=cut, seed=4)):
                np.testing.assert_array_equal(got, want)


def _full_draws(table, window, seed=7):
    batch = table.sample(jax.random.key(seed), 64, window, gx.PrioritizedSteps(1.0), cut="full")
    return np.asarray(batch.keys).tolist(), np.asarray(batch.start).tolist()


def test_full_windows_do_not_depend_on_the_widths_sampled_before(tmp_path):
    """strategies.md: the same key and contents give the same batch. Fails
    when a width beyond the selector's kept full-window trees (2) is drawn by
    listing the trajectories instead: the same key drew other starts than
    from a tree, so a table that had sampled two other widths first, and the
    checkpoint of it, drew another batch than a fresh table."""
    def filled():
        table = step_table(capacity=6, max_length=8)
        rng = np.random.default_rng(4)
        for length in (8, 6, 7, 5, 8, 4):
            insert(table, length, rng.choice([0.5, 1.0, 2.0, 3.0], length))
        return table

    fresh, used = filled(), filled()
    for window in (2, 3):  # the two widths whose trees the selector keeps
        _full_draws(used, window)
    path = tmp_path / "used.gx"
    used.save(path)
    loaded = gx.Table.load(path, placement="host")
    want = _full_draws(fresh, 4)
    assert _full_draws(used, 4) == want  # a third width: the oldest tree rebuilt for it
    assert _full_draws(loaded, 4) == want
    for window in (2, 3, 4, 2):  # widths in turn, each rebuilt when it comes back
        assert _full_draws(used, window, seed=window) == _full_draws(filled(), window,
                                                                     seed=window)


def test_a_checkpoint_whose_priorities_disagree_with_their_steps_is_refused(two, tmp_path):
    import zipfile

    table, *_ = two
    path = tmp_path / "steps.gx"
    table.save(path)
    bad = tmp_path / "bad.gx"
    with zipfile.ZipFile(path) as zin, zipfile.ZipFile(bad, "w") as zout:
        for item in zin.infolist():
            data = zin.read(item)
            if item.filename == "step_priorities.npy":
                steps = np.load(__import__("io").BytesIO(data))
                steps[4] = 5.0  # a's largest becomes 5, its priority says 4
                buffer = __import__("io").BytesIO()
                np.save(buffer, steps)
                data = buffer.getvalue()
            zout.writestr(item, data)
    with pytest.raises(gx.CheckpointError, match="largest of its steps"):
        gx.Table.load(bad, placement="host")
    assert os.path.exists(path)


def test_the_memory_estimate_counts_the_step_priorities():
    plain = _gearjax.worst_bookkeeping_bytes(1000, 1000, 0)
    steps = _gearjax.worst_bookkeeping_bytes(1000, 1000, 0, True)
    assert steps - plain >= 1000 * 1000 * 8 * 2  # the priorities and at least one tree


def test_full_window_draws_stay_exact_through_every_kind_of_write():
    """cut="full" with replacement draws from a tree per window width (at most
    2 an alpha; a third width lists the trajectories instead): after step and
    trajectory updates, inserts and evictions, every row's probability is its
    step's weight over the eligible steps' total, as the records give."""
    rng = np.random.default_rng(1)
    with step_table(capacity=6, max_length=8) as table:
        def insert_random():
            length = int(rng.integers(1, 9))
            return insert(table, length, rng.uniform(0, 3, length).round(2))

        def check(window, alpha, seed):
            c = table.contents()
            per = np.split(c["step_priorities"], np.cumsum(c["length"])[:-1])
            weights = {k: np.where(p > 0, p ** alpha, 0.0) for k, p in zip(c["key"].tolist(), per)}
            expected = expected_start_probabilities(
                weights, lambda k, s: s <= len(weights[k]) - window)
            if not expected:
                return
            keys, start, probability, mask, _ = draw(table, 512, window, cut="full", alpha=alpha,
                                                     seed=seed)
            drawn = list(zip(keys.tolist(), start.tolist()))
            assert set(drawn) <= set(expected) and mask.all()
            np.testing.assert_allclose(probability, [expected[d] for d in drawn], rtol=1e-6)

        for _ in range(6):
            insert_random()
        for round_ in range(8):
            for window in (1, 2, 3, 4):  # four widths: the third and fourth list
                check(window, 0.7, round_ * 10 + window)
            keys = table.contents()["key"]
            if round_ % 3 == 0:  # steps, lowering and raising the largest
                table.update_priorities(keys[:3], rng.uniform(0, 5, (3, 2)).round(2),
                                        steps=np.array([[0, 1], [0, -1], [1, 0]]) % np.minimum(
                                            table.contents()["length"][:3, None], 2))
            elif round_ % 3 == 1:  # whole trajectories
                table.update_priorities(keys[-2:], np.array([0.0, 2.5]))
            else:  # inserts, evicting
                insert_random()
                insert_random()


def test_a_trajectory_s_priority_follows_its_largest_step_through_random_updates():
    """Windows that hold a trajectory's largest step, raised or lowered, with
    another named step rising past it or not, and windows that do not hold
    it: after every update each trajectory's priority is the largest of its
    steps, and Prioritized draws trajectories by it."""
    rng = np.random.default_rng(7)
    rows, width = 3, 3
    table = step_table(capacity=6, max_length=12)
    try:
        keys = [insert(table, int(n), rng.uniform(0.1, 3.0, int(n)).round(2))
                for n in rng.integers(4, 13, 6)]
        for round_ in range(60):
            c = table.contents()
            per = dict(zip(c["key"].tolist(),
                           np.split(c["step_priorities"], np.cumsum(c["length"])[:-1])))
            named = rng.choice(keys, rows)
            steps = np.full((rows, width), -1)
            for r, key in enumerate(named):
                n = len(per[int(key)])
                if round_ % 2 == 0:  # a window around the largest step
                    first = min(max(int(np.argmax(per[int(key)])) - 1, 0), n - width)
                else:
                    first = int(rng.integers(0, n - width + 1))
                steps[r] = np.arange(first, first + width)
            if round_ % 4 == 1:
                steps[0, -1] = -1  # padding: skipped
            priorities = rng.uniform(0.0, 4.0, (rows, width)).round(2)
            priorities[rng.random((rows, width)) < 0.15] = 0.0
            table.update_priorities(named, priorities, steps=steps)
            c = table.contents()
            per = np.split(c["step_priorities"], np.cumsum(c["length"])[:-1])
            np.testing.assert_array_equal(c["priority"], [p.max() for p in per])
        c = table.contents()
        drawn = np.asarray(table.sample(jax.random.key(1), 4000, 1, gx.Prioritized(1.0)).keys)
        positive = c["priority"] > 0
        assert set(drawn.tolist()) <= set(c["key"][positive].tolist())
        observed = [(drawn == k).sum() for k in c["key"][positive]]
        expected = 4000 * c["priority"][positive] / c["priority"].sum()
        assert stats.chisquare(observed, expected).pvalue > 1e-3
    finally:
        table.close()


def test_a_step_named_twice_ends_with_its_last_value_and_the_largest_follows(two):
    """Row 1 raises the step that held a's largest (4.0, step 4) to 10, row 2
    lowers it to 1: the step ends at 1, and a's priority is the largest of
    what its steps now hold (2.0), not 4 or 10."""
    table, a, _ = two
    table.update_priorities(np.array([a, a]), np.array([[10.0], [1.0]]),
                            steps=np.array([[4], [4]]))
    np.testing.assert_array_equal(steps_of(table, a), [1, 2, 0, 0, 1, 1])
    c = table.contents()
    assert dict(zip(c["key"].tolist(), c["priority"].tolist()))[a] == 2.0


def test_an_insert_uses_the_step_priorities_it_checked_though_the_caller_changes_them():
    """The native core reads an insert's step priorities once it is admitted,
    after the GIL is released: what it stores is the values as they were at
    the call (copied first), not a NaN another thread wrote meanwhile."""
    import threading
    import time
    limiter = gx.SampleToInsertRatio(samples_per_insert=2.0, min_size_to_sample=2,
                                     error_buffer=4.0, timeout=20.0)
    with step_table(capacity=16, max_length=10, rate_limiter=limiter) as table:
        for _ in range(4):
            insert(table, 10, 1.0)  # the ratio now holds the next insert back
        priorities = np.linspace(0.5, 5.0, 10)
        keys = []
        thread = threading.Thread(target=lambda: keys.append(insert(table, 10, priorities)))
        thread.start()
        deadline = time.monotonic() + 10
        while table._native.waiting == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert table._native.waiting == 1, "the fifth insert did not wait for the limiter"
        priorities[:] = np.nan  # the caller's array, changed while the insert waits
        table.sample(jax.random.key(0), 4, 1, numpy=True)  # lets it in
        thread.join(timeout=20)
        assert not thread.is_alive() and len(keys) == 1
        np.testing.assert_array_equal(steps_of(table, keys[0]), np.linspace(0.5, 5.0, 10))


def test_step_updates_racing_a_thread_that_rewrites_their_steps_stay_in_bounds(tmp_path):
    """Another thread rewrites an eager update's steps between a value past
    every trajectory and a good one: each update applies the steps as they
    were when it began (copied, then checked) or is refused, and never writes
    out of bounds (once read past its checks, a crash). In a child process,
    so a crash fails the test rather than the run."""
    import subprocess
    import sys
    code = """
import threading, time, numpy as np, gearjax as gx
t = gx.Table({"x": gx.Column((), "float32")}, capacity=64, max_length=16,
             step_priorities=True, placement="host")
keys = np.array([t.insert({"x": np.zeros(16, np.float32)}, priority=1.0) for _ in range(64)])
rows = 100_000
k = np.ascontiguousarray(np.resize(keys, rows)).astype(np.int64)
steps = np.zeros((rows, 1), np.int64)
p = np.full((rows, 1), 2.0)
stop = False
def rewrite():
    while not stop:
        steps[rows // 2:, 0] = 1 << 40
        steps[rows // 2:, 0] = 3
thread = threading.Thread(target=rewrite); thread.start()
end = time.monotonic() + 1.5
applied = refused = 0
while time.monotonic() < end:
    try:
        t.update_priorities(k, p, steps=steps); applied += 1
    except ValueError:
        refused += 1
stop = True; thread.join()
c = t.contents()
assert np.isfinite(c["step_priorities"]).all()
assert set(np.unique(c["step_priorities"])) <= {1.0, 2.0}
print("ok", applied, refused)
"""
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            cwd=tmp_path,  # not the repository root: its gearjax/ is unbuilt
                            timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.startswith("ok")


def test_a_full_window_tree_that_cannot_be_made_leaves_the_table_whole(tmp_path):
    """A cut="full" width whose tree cannot be allocated (MemoryError) keeps
    no entry without a tree, whether it was to join the one tree kept or to
    replace the least recently drawn of two: later inserts, updates and
    samples of every width work (before, the next insert dereferenced a null
    tree). In a child process under address-space limits."""
    import subprocess
    import sys
    code = """
import resource, numpy as np, jax, gearjax as gx
s = gx.PrioritizedSteps(1.0)
key = jax.random.key(0)
def vm_bytes():
    for line in open("/proc/self/status"):
        if line.startswith("VmSize"):
            return int(line.split()[1]) * 1024
soft, hard = resource.getrlimit(resource.RLIMIT_AS)
# (widths sampled first, the limit's offset from the address space in use)
# A tree is 37 MB: with one kept, 8 MB more than in use refuses a second;
# with two kept, the third frees one first, so the limit lies 24 MB below.
for widths, offset in (((2,), 8 << 20), ((2, 4), -(24 << 20))):
    t = gx.Table({"x": gx.Column((), "float32")}, capacity=1024, max_length=4096,
                 step_priorities=True, placement="host")
    for _ in range(4):
        t.insert({"x": np.zeros(100, np.float32)}, priority=np.linspace(0.1, 1, 100))
    for width in widths:
        t.sample(key, 4, width, s, cut="full", numpy=True)
    resource.setrlimit(resource.RLIMIT_AS, (vm_bytes() + offset, hard))
    try:
        t.sample(key, 4, 3, s, cut="full", numpy=True)
        refused = False
    except MemoryError:
        refused = True
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
    assert refused, f"the limit let the tree be made after {widths}: nothing was tested"
    k = t.insert({"x": np.zeros(10, np.float32)}, priority=1.0)
    t.update_priorities(np.array([k]), np.full((1, 2), 3.0), steps=np.array([[0, 1]]))
    for width in (3, 2, 4, 3):
        batch = t.sample(key, 64, width, s, cut="full", numpy=True)
        assert batch.mask.all() and (batch.start >= 0).all()
    t.close()
print("ok")
"""
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            cwd=tmp_path,  # not the repository root: its gearjax/ is unbuilt
                            timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip().endswith("ok")


def test_a_step_update_too_large_for_memory_changes_nothing(tmp_path):
    """An update whose scratch cannot be allocated (MemoryError) raises
    before it writes a step: every trajectory's priority stays the largest of
    its steps' (before, the steps were written and the trees and trajectory
    priorities were not). Under a series of address-space limits in a child
    process, so the allocation fails at each of its places in turn; each
    update, of steps or of whole trajectories by turns, either applies whole
    or changes nothing."""
    import subprocess
    import sys
    code = """
import resource, numpy as np, jax, gearjax as gx
L = 4096
t = gx.Table({"x": gx.Column((), "uint8")}, capacity=256, max_length=L,
             step_priorities=True, placement="host")
keys = np.array([t.insert({"x": np.zeros(L, np.uint8)}, priority=1.0) for _ in range(256)])
t.sample(jax.random.key(0), 4, 2, gx.PrioritizedSteps(1.0), cut="start", numpy=True)
rng = np.random.default_rng(0)
rows, width = 1 << 18, 4
k = rng.choice(keys, rows).astype(np.int64)
steps = rng.integers(0, L, (rows, width)).astype(np.int64)
def vm_bytes():
    for line in open("/proc/self/status"):
        if line.startswith("VmSize"):
            return int(line.split()[1]) * 1024
soft, hard = resource.getrlimit(resource.RLIMIT_AS)
outcomes = []
for i, margin in enumerate(range(4, 100, 4)):
    value = 2.0 + i
    p = np.full((rows, width), value)
    trajectories = i % 2 == 1  # every step of every trajectory, by its key
    whole = (keys, np.full(len(keys), value)) if trajectories else None
    before = t.contents()["step_priorities"]
    resource.setrlimit(resource.RLIMIT_AS, (vm_bytes() + (margin << 20), hard))
    try:
        if trajectories:
            t.update_priorities(*whole)
        else:
            t.update_priorities(k, p, steps=steps)
        outcomes.append("applied")
    except MemoryError:
        outcomes.append("refused")
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
    c = t.contents()
    per = c["step_priorities"].reshape(-1, L)
    assert (per.max(1) == c["priority"]).all(), (margin, outcomes[-1])
    if outcomes[-1] == "refused":
        assert np.array_equal(c["step_priorities"], before), margin
    else:
        assert (c["step_priorities"] == value).sum() > 0, margin
assert "refused" in outcomes and "applied" in outcomes, outcomes
print("ok", outcomes)
"""
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            cwd=tmp_path,  # not the repository root: its gearjax/ is unbuilt
                            timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.startswith("ok")
