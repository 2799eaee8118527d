"""The xla exchange's blocks: the sizes it is compiled at, and, over P = 8
host devices in one process (gearjax.sharded.local), that a sample through
any block keeps the global distribution and every window exact, that the
block that runs is the smallest that holds the plan, and that the owners
count what they sent; plans above the block cap move in rounds, blocked and
ragged (the ragged one by an emulation of its documented semantics), each
round in one all-to-all."""

from __future__ import annotations

import collections
import json
import os
import subprocess
import sys
from pathlib import Path

import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from gearjax.sharded import exchange

HERE = Path(__file__).resolve().parent
P_MIN = 1e-4  # chi-square p-value below which a distribution is wrong


def test_block_sizes_grow_by_a_tenth_from_b_over_p_to_the_cap():
    assert exchange.block_sizes(256, 2) == (128, 141, 156, 172, 190, 209, 230, 253, 256)
    assert exchange.block_sizes(256, 1) == (256,)
    assert exchange.block_sizes(5, 8) == (1, 2, 3, 4, 5)  # each at least one more
    assert exchange.block_sizes(256, 8, cap=40) == (32, 36, 40)
    for batch, shards in [(256, 64), (1024, 64), (7, 3), (1, 1), (100_000, 1000)]:
        sizes = exchange.block_sizes(batch, shards)
        assert sizes[0] == -(-batch // shards)
        assert sizes[-1] == exchange.block_cap(batch, shards)
        assert all(b >= max(a + 1, a * exchange.BLOCK_GROWTH) for a, b in zip(sizes[:-2],
                                                                              sizes[1:-1]))
        assert list(sizes) == sorted(set(sizes))


@pytest.mark.parametrize("batch, shards", [(0, 2), (4, 0), (-1, 3)])
def test_block_sizes_refuse_empty_batches_and_meshes(batch, shards):
    with pytest.raises(ValueError, match=">= 1"):
        exchange.block_sizes(batch, shards)
    with pytest.raises(ValueError, match=">= 1"):
        exchange.block_cap(batch, shards)


@pytest.mark.parametrize("cap", [0, -1, 257])
def test_a_block_cap_outside_one_to_b_is_refused(cap):
    with pytest.raises(ValueError, match="cap must be in"):
        exchange.block_sizes(256, 8, cap=cap)


def test_the_cap_bounds_every_device_buffer_by_the_batch_not_the_mesh():
    # P x cap rows a buffer: about 3 B + 16 P, never P x B (at most B a block).
    assert exchange.block_cap(256, 2) == 256
    assert exchange.block_cap(1024, 16) == 208
    assert exchange.block_cap(256, 64) == 28
    assert exchange.block_cap(5, 8) == 5
    for batch in (1, 7, 256, 1024, 100_000):
        for shards in (1, 2, 3, 8, 64, 1000):
            cap = exchange.block_cap(batch, shards)
            assert 1 <= cap <= batch
            assert shards * cap <= exchange.CAP_SHARE * batch + (exchange.CAP_SLACK + 1) * shards


def test_rounds_carry_every_rank_of_every_pair_once():
    cap = 5
    asked = jnp.asarray([0, 1, 5, 6, 12, 23], jnp.int32)
    rounds = int(exchange.rounds_needed(asked.max(), cap))
    assert rounds == 5 and int(exchange.rounds_needed(jnp.int32(0), cap)) == 1
    moved = sum(np.asarray(exchange.round_counts(asked, jnp.int32(r * cap), cap))
                for r in range(rounds))
    np.testing.assert_array_equal(moved, asked)
    # A requester's rows: the rank-th of shard k's rows in the round holding it.
    shard_of_row = jnp.asarray([0, 1, 1, 0, 1, 1, 1, 1, 1, 1, 1, 0], jnp.int32)
    rank = jnp.asarray([0, 0, 1, 1, 2, 3, 4, 5, 6, 7, 8, 2], jnp.int32)
    seen = np.zeros(len(rank), int)
    for r in range(3):
        taken, index = exchange.round_index(shard_of_row, rank, jnp.int32(r * cap), cap)
        taken, index = np.asarray(taken), np.asarray(index)
        seen += taken
        np.testing.assert_array_equal(index[taken], (np.asarray(shard_of_row) * cap
                                                     + np.asarray(rank) - r * cap)[taken])
    np.testing.assert_array_equal(seen, 1)


@pytest.fixture(scope="module")
def eight_devices(tmp_path_factory):
    shards, calls, batch, window = 8, 4, 256, 4
    env = dict(os.environ, JAX_PLATFORMS="cpu",
               XLA_FLAGS=f"--xla_force_host_platform_device_count={shards}",
               PYTHONPATH=str(HERE) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    done = subprocess.run([sys.executable, "-m", "local_shards_body", str(shards), str(calls),
                           str(batch), str(window)], env=env, capture_output=True, text=True,
                          timeout=600, cwd=tmp_path_factory.mktemp("local"))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    result.update(shards=shards, calls=calls, batch=batch, window=window)
    return result


def expected_weights(strategy: str, inserted: dict) -> dict[int, float]:
    if strategy == "topk":
        best = sorted(inserted, key=lambda k: inserted[k][2], reverse=True)[:5]
        return {k: float(k in best) for k in inserted}
    return {k: 1.0 if strategy == "uniform" else priority ** 0.7
            for k, (_, _, priority) in inserted.items()}


def assert_global_distribution(r: dict, strategy: str, drawn: dict) -> None:
    """The rows `drawn` (keys and reported probabilities) of every call follow
    `strategy` over every shard's trajectories: each probability exact, the
    counts by chi-square, nothing drawn outside the support."""
    assert r["errors"] == []  # every window read back is its trajectory's
    inserted = {int(k): v for k, v in r["inserted"].items()}
    weights = expected_weights(strategy, inserted)
    total = sum(weights.values())
    for key, probability in drawn["probability"].items():
        assert probability == pytest.approx(weights[int(key)] / total, rel=1e-6)
    counts = collections.Counter(drawn["keys"])
    keys = sorted(inserted)
    observed = np.array([counts[k] for k in keys])
    expected = np.array([weights[k] for k in keys]) / total
    draws = r["shards"] * r["calls"] * r["batch"]
    assert observed.sum() == draws
    assert observed[expected == 0].sum() == 0
    support = expected > 0
    assert stats.chisquare(observed[support], draws * expected[support]).pvalue > P_MIN


@pytest.mark.parametrize("strategy", ["uniform", "prioritized", "topk"])
def test_eight_shards_on_eight_devices_sample_the_global_distribution(eight_devices, strategy):
    assert_global_distribution(eight_devices, strategy, eight_devices["strategies"][strategy])


def test_the_smallest_block_that_holds_the_plan_runs_and_every_size_can_be_forced(eight_devices):
    r = eight_devices
    sizes, shards, batch = r["sizes"], r["shards"], r["batch"]
    assert sizes == list(exchange.block_sizes(batch, shards))
    ran_sizes = set()
    for forced in r["forced"]:
        want = min(s for s in sizes if s >= max(forced["need"], forced["min_block"]))
        # Every owner ran exactly one serve, at that block.
        assert forced["ran"] == [{str(want): 1}] * shards, forced
        ran_sizes.add(want)
        # Each owner counts the rows asked of it and the whole blocks it sent.
        assert forced["rows_asked"] == forced["asked_of_shard"]
        assert sum(forced["rows_asked"]) == shards * batch
        assert forced["rows_sent"] == [shards * want] * shards
    # The unforced call runs a block below the cap (8 shards: B / P = 32 rows a
    # pair on average), and forcing reaches the cap (never B: 112 rows here).
    cap = exchange.block_cap(batch, shards)
    assert cap < batch
    assert r["forced"][0]["min_block"] == 0 and r["forced"][0]["ran"][0] != {str(cap): 1}
    assert cap in ran_sizes
    # Every size that holds every call's plan ran when forced (below that,
    # a call whose plan needs more runs a larger block instead).
    holds_all = min(s for s in sizes if s >= max(f["need"] for f in r["forced"]))
    assert {s for s in sizes if s >= holds_all} <= ran_sizes


def test_plans_above_the_cap_move_in_rounds_with_the_same_distribution(eight_devices):
    r = eight_devices
    rounds, shards, batch = r["rounds"], r["shards"], r["batch"]
    cap = rounds["cap"]
    for call in rounds["calls"]:
        n = -(-call["need"] // cap)
        assert n >= 2  # every plan here needs rounds
        # Every owner served n rounds of blocks of `cap`, and counts them.
        assert call["ran"] == [{str(cap): n}] * shards, call
        assert call["rows_asked"] == call["asked_of_shard"]
        assert sum(call["rows_asked"]) == shards * batch
        assert call["rows_sent"] == [n * shards * cap] * shards
    # The rows (each window checked against its trajectory by the worker)
    # follow Prioritized(0.7) over every shard.
    assert_global_distribution(r, "prioritized", rounds)


def test_a_round_moves_all_of_its_fields_in_one_all_to_all(eight_devices):
    # keys, start, probability, table_size, valid and one column, packed into
    # uint32 words (gearjax/sharded/row_words.py): one all-to-all in each
    # branch of round 0 (a block size each) and one in the loop of later
    # rounds, where they were six each.
    sizes = exchange.block_sizes(eight_devices["batch"], eight_devices["shards"])
    assert eight_devices["blocked_lowering"] == len(sizes) + 1


def test_the_ragged_path_lowers_to_ragged_all_to_alls_and_is_not_the_cpu_default(eight_devices):
    # The packed fields: one ragged all-to-all in round 0, one in the loop of
    # later rounds.
    assert eight_devices["ragged_lowering"] == {"ragged": 2, "blocked": 0}
    # Words into a buffer of words (once, int64 keys into an int32 buffer
    # gave garbage keys on a GPU).
    assert eight_devices["ragged_dtypes"] == ["uint32->uint32"]
    assert not exchange.ragged_default()  # this is a CPU backend


def emulate_ragged_all_to_all(operands, outputs, plans):
    """jax.lax.ragged_all_to_all's documented semantics over P devices, in
    NumPy: sender k's rows operands[k][input_offsets[j] : + send_sizes[j]]
    land in receiver j's output at output_offsets[j] (the sender's), and
    receiver j's recv_sizes[k] must match."""
    outputs = [o.copy() for o in outputs]
    for k, (input_offsets, send_sizes, output_offsets, _, _) in enumerate(plans):
        for j in range(len(plans)):
            n = int(send_sizes[j])
            assert int(plans[j][3][k]) == n  # recv_sizes agree with send_sizes
            outputs[j][int(output_offsets[j]):int(output_offsets[j]) + n] = \
                operands[k][int(input_offsets[j]):int(input_offsets[j]) + n]
    return outputs


@pytest.mark.parametrize("shards, batch", [(1, 5), (2, 8), (3, 16), (8, 64)])
def test_the_ragged_plan_puts_every_row_where_its_requester_reads_it(shards, batch):
    rng = np.random.default_rng(shards)
    for _ in range(5):
        # Each requester's rows drawn over shards, skewed (some pairs empty).
        weights = rng.dirichlet(np.full(shards, 0.3))
        shard_of_rows = rng.choice(shards, size=(shards, batch), p=weights)
        counts = np.stack([np.bincount(r, minlength=shards) for r in shard_of_rows])
        plans = [[np.asarray(x) for x in exchange.ragged_plan(counts, me, batch)]
                 for me in range(shards)]
        # Owner k's operand: block j holds (k, j, rank) for the rows j asked of k.
        operands = []
        for k in range(shards):
            rows = np.full((shards * batch, 3), -1)
            for j in range(shards):
                n = counts[j, k]
                rows[j * batch:j * batch + n] = np.stack(
                    [np.full(n, k), np.full(n, j), np.arange(n)], 1)
            operands.append(rows)
        received = emulate_ragged_all_to_all(operands, [np.full((batch, 3), -1)] * shards, plans)
        for me in range(shards):
            shard_of_row = shard_of_rows[me]
            rank = np.array([np.sum(shard_of_row[:b] == shard_of_row[b]) for b in range(batch)])
            index = plans[me][4][shard_of_row] + rank
            want = np.stack([shard_of_row, np.full(batch, me), rank], 1)
            np.testing.assert_array_equal(received[me][index], want)
            assert plans[me][3].sum() == batch  # exactly B rows received


@pytest.mark.parametrize("shards, batch, cap", [(2, 8, 3), (3, 16, 4), (8, 64, 5), (8, 64, 64)])
def test_ragged_rounds_put_every_row_where_its_requester_reads_it(shards, batch, cap):
    rng = np.random.default_rng(shards * cap)
    weights = rng.dirichlet(np.full(shards, 0.3))
    shard_of_rows = rng.choice(shards, size=(shards, batch), p=weights)
    counts = np.stack([np.bincount(r, minlength=shards) for r in shard_of_rows])
    ranks = [np.array([np.sum(s[:b] == s[b]) for b in range(batch)]) for s in shard_of_rows]
    rounds = int(exchange.rounds_needed(jnp.int32(counts.max()), cap))
    received = [np.full((batch, 3), -1) for _ in range(shards)]
    for r in range(rounds):
        offset = jnp.int32(r * cap)
        plans = [exchange.ragged_round_plan(counts, me, offset, cap,
                                            jnp.asarray(shard_of_rows[me]), jnp.asarray(ranks[me]))
                 for me in range(shards)]
        # Owner k serves requester j's ranks offset ... at the top of block j.
        operands = []
        for k in range(shards):
            served = np.asarray(plans[k][0])
            rows = np.full((shards * cap, 3), -1)
            for j in range(shards):
                n = served[j]
                rows[j * cap:j * cap + n] = np.stack(
                    [np.full(n, k), np.full(n, j), r * cap + np.arange(n)], 1)
            operands.append(rows)
        outputs = emulate_ragged_all_to_all(
            operands, [np.full((batch, 3), -1)] * shards,
            [[np.asarray(x) for x in (*plan[1], np.zeros(shards))] for plan in plans])
        for me in range(shards):
            taken, index = np.asarray(plans[me][2]), np.asarray(plans[me][3])
            assert np.asarray(plans[me][1][3]).sum() <= batch  # at most B rows a round
            received[me][taken] = outputs[me][index[taken]]
    for me in range(shards):
        want = np.stack([shard_of_rows[me], np.full(batch, me), ranks[me]], 1)
        np.testing.assert_array_equal(received[me], want)
