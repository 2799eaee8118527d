"""ShardedTable across 2-3 local jax.distributed processes (CPU, gloo), each
run under a hard timeout by tests/multihost.py: the global distribution of
every strategy over shards of different sizes and priority masses, the
content of every sampled window, global keys, probabilities and sizes, the
shard_map mode inside a jitted scan, routed priority updates, eviction races
with remote samplers, save/load, a killed process, a restarted one, and misuse
refused with a clear error (columns in another order included). The bodies are
in tests/multihost_bodies.py."""

from __future__ import annotations

import collections
import json
import math
import os
import subprocess
import sys

import jax
import numpy as np
import pytest
from scipy import stats

import gearjax as gx
from gearjax.sharded import agreement, coordination, exchange as exchange_module
import multihost
from conftest import nixl_missing
from multihost_bodies import shard_contents

P_MIN = 1e-4


needs_nixl = pytest.mark.skipif(nixl_missing() is not None,
                                reason=f"the nixl exchange needs NIXL: {nixl_missing()}")


def _verbs_missing() -> str | None:
    try:
        from gearjax.sharded import verbs
        verbs.verbs_api()
    except ValueError as e:
        return str(e)
    return None


# No machine this project runs on has an RDMA device: these skip, saying why
# (pyverbs missing, or the device list failing).
needs_verbs = pytest.mark.skipif(_verbs_missing() is not None,
                                 reason=f"the verbs exchange needs an RDMA device: "
                                        f"{_verbs_missing()}")
ONE_SIDED = [pytest.param("nixl", marks=needs_nixl), pytest.param("verbs", marks=needs_verbs)]
SHIFT_2 = 62  # 63 - shard bits; two or three processes: one and two shard bits
SHIFT_3 = 61


def expected_weights(strategy: str, inserted: dict, stamps: dict) -> dict[int, float]:
    """Each key's weight in one table holding every shard: by the strategy's
    formula, or for TopK(5) and Recent(6) 1 for the global best (ranked by
    priority, then insertion stamp, then shard; Recent by stamp, then
    shard) and 0 for the rest."""
    if strategy in ("topk", "recent"):
        count = {"topk": 5, "recent": 6}[strategy]
        rank = {"topk": lambda k: (inserted[k][2], stamps[k], k >> SHIFT_3),
                "recent": lambda k: (stamps[k], k >> SHIFT_3)}[strategy]
        best = set(sorted(inserted, key=rank, reverse=True)[:count])
        return {k: float(k in best) for k in inserted}
    return {k: {"uniform": 1.0, "timestep": float(length),
                "prioritized": priority ** 0.7 if priority > 0 else 0.0}[strategy]
            for k, (_, length, priority) in inserted.items()}


STRATEGIES = ["uniform", "timestep", "prioritized", "topk", "recent"]


@pytest.mark.parametrize("exchange", ["xla", *ONE_SIDED])
def test_rows_follow_the_global_distribution(tmp_path, exchange):
    """Every strategy, one after another in one job (a job per strategy spent most of
    its time starting processes)."""
    processes, calls, batch = 3, 12, 512
    results = multihost.run("global_distribution", processes, tmp_path, timeout=300,
                            strategies=STRATEGIES, calls=calls, batch=batch, window=4,
                            exchange=exchange)
    inserted = {int(k): v for r in results for k, v in r["inserted"].items()}
    assert len(inserted) == sum(len(shard_contents(p)) for p in range(processes))
    stamps = {int(k): v for r in results for k, v in r["stamps"].items()}
    for strategy in STRATEGIES:
        check_global_distribution(strategy, exchange, [r["strategies"][strategy] for r in results],
                                  inserted, stamps, processes * calls * batch)
    # What the owners served to the all-to-all, summed over shards in stats():
    # every row asked for (the calls and one more per strategy), in whole
    # blocks of the compiled sizes.
    last = results[0]["strategies"][STRATEGIES[-1]]["exchange"]
    if exchange != "xla":
        assert last["exchange_serves"] == 0 and last["exchange_bytes_per_useful_byte"] is None
        return
    samples = len(STRATEGIES) * (calls + 1)
    row_bytes = 4 * 2 * 4  # window 4 of int32[2]
    assert last["exchange_serves"] == processes * samples
    assert last["exchange_rows_asked"] == processes * samples * batch
    assert last["exchange_bytes_asked"] == last["exchange_rows_asked"] * row_bytes
    assert last["exchange_bytes_sent"] == last["exchange_rows_sent"] * row_bytes
    sizes = exchange_module.block_sizes(batch, processes)
    by_block = {int(b): n for b, n in last["exchange_serves_by_block"].items()}
    assert set(by_block) <= set(sizes) and sum(by_block.values()) == processes * samples
    assert last["exchange_rows_sent"] == processes * sum(b * n for b, n in by_block.items())
    assert last["exchange_bytes_per_useful_byte"] == pytest.approx(
        last["exchange_rows_sent"] / last["exchange_rows_asked"])
    assert 1.0 <= last["exchange_bytes_per_useful_byte"] <= processes


def check_global_distribution(strategy, exchange, results, inserted, stamps, draws):
    weights = expected_weights(strategy, inserted, stamps)
    total = sum(weights.values())
    counts = collections.Counter()
    for r in results:
        assert r["errors"] == [], (strategy, r["errors"][:5])
        assert r["size"] == len(inserted), strategy
        for key, shard, probability, table_size, ident in r["rows"]:
            assert inserted[key][0] == ident, strategy  # the key names the trajectory's data
            assert shard == key >> SHIFT_3, strategy
            assert table_size == len(inserted), strategy
            assert probability == pytest.approx(weights[key] / total, rel=1e-6), strategy
            counts[key] += 1
    keys = sorted(inserted)
    observed = np.array([counts[k] for k in keys])
    expected = np.array([weights[k] for k in keys]) / total
    assert observed.sum() == draws, strategy
    assert observed[expected == 0].sum() == 0, f"{strategy} drew a trajectory of probability 0"
    support = expected > 0
    assert stats.chisquare(observed[support], draws * expected[support]).pvalue > P_MIN, strategy
    # The same key in every process still gives each process its own rows.
    assert len({tuple(r["first"]) for r in results}) == len(results), strategy
    # Each shard counts exactly the rows it served (one-sided reads are not
    # seen by their owner).
    served = collections.Counter(key >> SHIFT_3 for key in counts.elements())
    for p, r in enumerate(results):
        assert r["served"] == (served[p] if exchange == "xla" else 0), strategy


@pytest.mark.parametrize("exchange", ["xla", ONE_SIDED[0]])
def test_step_priorities_sample_and_update_globally(tmp_path, exchange):
    """PrioritizedSteps over two shards: every row's step is drawn in
    proportion to its priority ** 0.8 over every shard's steps (the reported
    probability exactly, the counts by a chi-square test); with the xla
    exchange per-step updates reach their owners, eagerly and inside
    shard_map; with nixl a per-process jitted sample too, a step tree its
    owner publishes when asked, and step updates sent to their owner."""
    processes, calls, batch, alpha = 2, 6, 512, 0.8
    results = multihost.run("step_priorities", processes, tmp_path, timeout=300, calls=calls,
                            batch=batch, exchange=exchange)
    inserted = {int(k): v for r in results for k, v in r["inserted"].items()}
    weights = {(key, t): w ** alpha if w > 0 else 0.0
               for key, (_, steps) in inserted.items() for t, w in enumerate(steps)}
    total = sum(weights.values())
    counts = collections.Counter()
    for r in results:
        assert r["errors"] == [], r["errors"][:5]
        for key, shard, probability, table_size, ident, start in r["rows"]:
            assert inserted[key][0] == ident and shard == key >> SHIFT_2
            assert table_size == len(inserted)
            assert probability == pytest.approx(weights[key, start] / total, rel=1e-5)
            counts[key, start] += 1
    cells = sorted(weights)
    observed = np.array([counts[c] for c in cells])
    expected = np.array([weights[c] for c in cells]) / total
    assert observed.sum() == processes * calls * batch
    assert observed[expected == 0].sum() == 0, "drew a step of priority 0"
    support = expected > 0
    assert stats.chisquare(observed[support],
                           observed.sum() * expected[support]).pvalue > P_MIN
    assert [r["batch_shards"] for r in results] == [[p] for p in range(processes)]
    held = {int(k): v for r in results for k, v in r["held"].items() if int(k) in inserted}
    firsts = results[0]["firsts"]
    if exchange != "xla":
        assert results[0]["asked_errors"] == []  # the other owner answered the tree request
        assert all(r["jit_errors"] == [] and r["refused"] == 0 for r in results)
        assert results[0]["one_sided_count"] == 1  # its own shard's; the other's was sent
        for key, (_, steps) in inserted.items():
            shard = key >> SHIFT_2
            expected = list(steps)
            if key == firsts[shard]:
                expected[:2] = [100.0 + shard, 200.0 + shard]
            assert held[key] == expected, key
        return
    # The eager routed update: each shard's first trajectory got steps 0 and
    # 1 from process 0 (the padding entry, NaN, skipped); the inside-shard_map
    # update then set each process's drawn steps to 0.25.
    assert [r["eager_count"] for r in results] == [processes] * processes
    set_in_jit = {(k, t) for r in results for k, steps in zip(r["drawn_keys"], r["drawn_steps"])
                  for t in steps if t >= 0}
    for shard, key in enumerate(firsts):
        for t, value in ((0, 100.0 + shard), (1, 200.0 + shard)):
            assert held[key][t] == (0.25 if (key, t) in set_in_jit else value)
    for key, t in set_in_jit:
        assert held[key][t] == 0.25
    assert [r["jit_count"] for r in results] == [4 * processes] * processes
    for key, (_, steps) in inserted.items():  # everything else as inserted
        for t, w in enumerate(steps):
            if (key, t) not in set_in_jit and not (key in firsts and t < 2):
                assert held[key][t] == w
    for r in results:  # shard 0 refused the step past its length; nothing changed
        assert "shard(s) [0] refused their entries" in r["past_length"] and r["unchanged"]
        widths, with_and_without = r["mismatches"]
        assert "one width W" in widths and "W = [2, 3]" in widths
        assert "every process passes steps= or none does" in with_and_without
    # The last process's NaN priority: it raises why, the others name it; no
    # process waited (multihost.run's timeout) and nothing changed.
    for r in results[:-1]:
        with_steps, without = r["one_refuses"][:2]
        for message in (with_steps, without):
            assert f"process(es) [{processes - 1}] refused their own arguments" in message
    for message in results[-1]["one_refuses"][:2]:
        assert "nan" in message
    assert all(r["one_refuses"][2] for r in results)
    sample_refused, update_refused = results[0]["refusals"]
    assert "step_priorities=True" in sample_refused
    assert "step_priorities=True" in update_refused


def test_shard_map_mode_samples_and_updates_inside_a_jitted_scan(tmp_path):
    steps = 6
    results = multihost.run("in_shard_map", 2, tmp_path, steps=steps)
    for r in results:
        assert len(r["keys"]) == steps
        assert len(set(r["keys"])) == steps, "a zeroed key was drawn again by its process"
        for key, ident in zip(r["keys"], r["idents"]):
            assert ident // 1000 == key >> SHIFT_2  # data from the shard the key names
        assert r["updated"] == [2] * steps  # both processes' updates applied each step
        xla_in_jit, bad_axis, *stateless = r["refusals"]
        assert xla_in_jit.startswith("ValueError") and \
            "cannot run inside a per-process jax.jit" in xla_in_jit, xla_in_jit
        assert bad_axis.startswith("ValueError") and \
            "not an axis of the enclosing shard_map" in bad_axis, bad_axis
        # The stateless forms of sample, update_priorities, insert_batch: refused while tracing.
        assert len(stateless) == 3
        for message in stateless:
            assert message is not None and message.startswith("TypeError") and \
                "without a table state was traced" in message, message
        assert "no shard holds anything" in r["drained"]
        assert r["priorities"] == [0.0] * 8
    for p, r in enumerate(results):  # insert_batch in jit returns global keys of its shard
        assert [k >> SHIFT_2 for k in r["insert_batch_keys"]] == [p, p]
    drawn = {k for r in results for k in r["keys"]}
    zeroed = sum(p == 0.0 for r in results for p in r["zeroed"])
    assert zeroed == len(drawn)  # exactly the keys drawn were set to 0, by their owners


def test_priority_updates_are_routed_to_their_owners(tmp_path):
    results = multihost.run("routed_updates", 3, tmp_path)
    keys = np.array(results[0]["keys"])  # every shard's four keys, by shard
    evicted = results[0]["evicted"]
    for p, r in enumerate(results):
        own = dict(zip(r["local_keys"], r["priorities"]))
        for i, key in enumerate(keys.reshape(-1)):
            local = int(key) & ((1 << SHIFT_3) - 1)
            if int(key) >> SHIFT_3 != p or int(key) == evicted:
                continue
            assert own[local] == (i + 1) * 10, (p, key)
        # The evicted key's update was skipped and counted by its owner alone.
        assert r["skipped"] == (1 if p == 2 else 0)
        assert r["updated"] == keys.size - 1
        # The xla exchange reads only its own shard: get of another's names the owner.
        assert f"belongs to shard {(p + 1) % 3}" in r["remote_get"]
    assert int(evicted) >> SHIFT_3 == 2


@pytest.mark.parametrize("exchange", ["xla", *ONE_SIDED])
def test_remote_samplers_never_see_a_torn_window_while_a_shard_evicts(tmp_path, exchange):
    results = multihost.run("eviction_race", 2, tmp_path, seconds=4, exchange=exchange)
    assert results[1]["inserted"] > 10
    for r in results:
        assert r["calls"] > 0
        assert r["errors"] == []


def test_a_sharded_table_saves_and_loads_every_shard(tmp_path):
    results = multihost.run("save_and_load", 2, tmp_path)
    for p, r in enumerate(results):
        assert r["same"]  # the same key gives the same batch after loading
        assert r["contents_equal"]
        assert r["new_key_shard"] == p
        assert r["files"] == ["manifest.json", "shard-00000.gx", "shard-00001.gx"]


@pytest.mark.parametrize("victim", [1, 0], ids=["a peer", "the coordinator"])
def test_a_killed_process_ends_its_peers_instead_of_hanging(tmp_path, victim):
    # JAX's coordination service aborts the survivors once the victim's
    # heartbeats stop (here after 5 s), or at once when the coordinator
    # (process 0) dies; a survivor inside a collective may raise first. Either
    # way every process ends within the timeout.
    multihost.run("killed_peer", 2, tmp_path, timeout=90, expect_failure=frozenset({0, 1}),
                  victim=victim, heartbeat_timeout_seconds=5)


def test_processes_that_disagree_on_the_spec_are_refused(tmp_path):
    for message in multihost.run("mismatched_spec", 2, tmp_path):
        assert message is not None and "must pass the same arguments" in message


@pytest.mark.parametrize("exchange", ["xla", *ONE_SIDED])
def test_processes_that_list_the_columns_in_another_order_are_refused(tmp_path, exchange):
    """Issue 45: the spec was compared as a dict, so another column order
    passed, and rows from the other shard came back with their columns
    swapped (or both processes aborted in gloo where the shapes differ)."""
    results = multihost.run("column_order", 2, tmp_path, timeout=120, exchange=exchange)
    orders = {0: "['a', 'b']", 1: "['b', 'a']"}
    for process, result in enumerate(results):
        other = 1 - process
        for case, message in result["refusals"].items():
            assert message is not None, f"process {process} made a table ({case})"
            assert f"process {other} made this sharded table with another spec than " \
                   f"process {process}" in message, message
            assert f"the columns in another order: {orders[other]} in process {other} " \
                   f"against {orders[process]} in process {process}" in message, message
            assert "list the columns in the same order on every process" in message, message
        assert result["rows_ok"], "a row holds another column's values"
        assert result["shards"] == [0, 1]


@pytest.mark.parametrize("exchange", ["xla", pytest.param("nixl", marks=needs_nixl)])
def test_a_process_restarted_into_the_running_job_is_refused_saying_what_to_do(tmp_path,
                                                                              exchange):
    """Issue 45: a restarted process got JAX's raw 'ALREADY_EXISTS: key
    gearjax/sharded/0/spec/1 already exists'."""
    result = multihost.run("restarted_process", 2, tmp_path, timeout=120,
                           expect_failure=frozenset({1}),
                           env={"JAX_ENABLE_RECOVERABILITY": "true"}, exchange=exchange)[0]
    assert result["error"] == "RejoinError" and result["is_runtime_error"], result
    message = result["message"]
    assert "process 1 already took part in this jax.distributed job's sharded tables (as " \
           "pid" in message, message
    assert "gearjax cannot rejoin a running job" in message, message
    assert "Restart every process of the job" in message, message
    assert "ALREADY_EXISTS" not in message, message
    assert result["survivor_size"] == 0  # process 0 lived on


def test_processes_that_disagree_on_a_sample_raise_instead_of_aborting(tmp_path):
    """Different batch sizes once killed both processes in gloo ('Received data size
    doesn't match expected size', SIGABRT). One job tries each difference in turn."""
    expected = {"batch": "batch_size=5", "window": "window=3", "strategy": "Prioritized",
                "pad": "pad='right'"}
    results = multihost.run("mismatched_sample", 2, tmp_path, timeout=180)
    for process, result in enumerate(results):
        refused = result.pop("refused")
        assert refused["rows"] == 4
        if process == len(results) - 1:  # its own batch_size=0: its own error
            assert "batch_size" in refused["message"], refused
            assert "disagree" not in refused["message"], refused
        else:
            message = refused["message"]
            assert "process 1 passed" in message and "refused='ValueError: " in message and \
                "batch_size" in message.split("refused=")[1], refused
    for result in results:
        assert set(result) == set(expected)
        for differ, text in expected.items():
            message = result[differ]["message"]
            assert message is not None, differ
            assert "the processes disagree on this sharded table call" in message, differ
            assert text in message and "Nothing was sampled" in message, differ
            assert result[differ]["rows"] == 4, differ


def test_a_process_given_a_failed_state_raises_and_the_others_name_it(tmp_path):
    """Eager xla calls given a state wait for its program: where one
    process's failed, it raises that failure and the others a ValueError
    naming its refusal, instead of waiting for it in the collective."""
    results = multihost.run("failed_state_eager", 2, tmp_path, timeout=180)
    for process, result in enumerate(results):
        assert result["priorities"] == [1.0], result
        assert result["after"] == 4 and result["updated"] == 8, result
        last = process == len(results) - 1
        assert result["sample"].startswith("JaxRuntimeError" if last else "ValueError"), result
        assert result["update"].startswith("JaxRuntimeError" if last else "ValueError"), result
        if not last:  # the refusal named, with its error for the sample
            refusal = result["sample"].split("refused=")[1]
            assert refusal[1:].startswith("JaxRuntimeError: "), result
            assert "process(es) [1] refused" in result["update"], result


# ------------------------------------------------------- one process, no setup
def one_shard() -> gx.ShardedTable:
    table = gx.ShardedTable({"x": gx.Column((2,), "int32")}, capacity=8, max_length=4)
    for i in range(3):
        table.insert({"x": np.full((i + 1, 2), i, np.int32)}, priority=i)
    return table


def test_sharded_samples_take_no_cut_or_replace():
    """The docs: a ShardedTable samples with cut="start" and replacement
    only; asking for another mode is refused, not ignored."""
    table = one_shard()
    with pytest.raises(ValueError, match="cut='start' and replacement only .*cut='full'"):
        table.sample(jax.random.key(0), 2, 2, cut="full")
    with pytest.raises(ValueError, match="cut='start' and replacement only .*replace=False"):
        table.sample(jax.random.key(0), 2, 2, replace=False)
    # Priorities per step need a table that keeps them: refused, saying so.
    with pytest.raises(ValueError, match=r"PrioritizedSteps\(alpha=1.0\) draws steps .* "
                                         r"step_priorities=True"):
        table.sample(jax.random.key(0), 2, 2, strategy=gx.PrioritizedSteps(1.0))
    # The shared contract's checks come first: a bad cut is named as for a Table.
    with pytest.raises(ValueError, match="cut must be one of"):
        table.sample(jax.random.key(0), 2, 2, cut="middle")
    # The defaults, said out loud, are the defaults.
    table.sample(jax.random.key(0), 2, 2, cut="start", replace=True, pad=None)


def test_one_process_needs_no_distributed_setup():
    table = one_shard()
    batch = table.sample(jax.random.key(0), 16, 2, gx.Prioritized(1.0))
    contents = table.local.contents()
    # Shard 0's global keys are its own; priority 0 (the first) is never drawn.
    assert set(np.asarray(batch.keys).tolist()) == set(contents["key"][1:].tolist())
    assert np.asarray(batch.probability).tolist() == [
        pytest.approx(contents["priority"][k >> table.local.slot_bits] / 3)
        for k in np.asarray(batch.keys)]
    assert np.asarray(batch.shard).tolist() == [0] * 16
    assert len(table) == 3
    stats = table.stats()
    assert stats["num_shards"] == 1 and len(stats["shards"]) == 1
    assert 0 <= stats["age_seconds"][0] < 60 and stats["shards"][0]["size"] == 3
    assert table.update_priorities(batch.keys, np.ones(16)) == 16
    # The state form eagerly: the same calls, the state returned as it came.
    state = table.state()
    given, again = table.sample(state, jax.random.key(0), 16, 2, gx.Prioritized(1.0))
    assert given is state and again.keys.shape == (16,)
    assert set(np.asarray(again.keys).tolist()) <= set(contents["key"][1:].tolist())
    given, count = table.update_priorities(state, again.keys, np.full(16, 2.0))
    assert given is state and count == 16
    # insert_batch in jit (the state form): this shard's global keys.
    state, keys = jax.jit(lambda s, x: table.insert_batch(s, {"x": x}, np.array([1, 2])))(
        table.state(), np.full((2, 2, 2), 7, np.int32))
    assert gx.state.is_state(state) and keys.dtype == np.int64
    assert [table.shard_of(int(k)) for k in np.asarray(keys)] == [0, 0]
    assert [table.get(int(k))["x"].shape for k in np.asarray(keys)] == [(1, 2), (2, 2)]
    keys = table.insert_batch({"x": np.full((1, 2, 2), 8, np.int32)}, np.array([2]))  # eagerly
    assert isinstance(keys, np.ndarray) and keys.dtype == np.int64
    assert table.get(int(keys[0]))["x"].tolist() == [[8, 8], [8, 8]]
    table.close()
    assert table.closed


def _failed_state(empty: gx.Table) -> jax.Array:
    """A table state whose program failed when it ran (a sample of the empty
    table `empty` in XLA:CPU's threads): what a call given it waits for."""

    @jax.jit
    def heavy(state, key):
        state, batch = empty.sample(state, key, 2)
        m = jax.numpy.full((16, 16), batch["y"].sum(), jax.numpy.float32)
        return state, (m @ m).sum()

    failed, _ = heavy(empty.state(), jax.random.key(0))
    return failed


@pytest.mark.parametrize("steps", [False, True])
def test_one_process_eager_state_form_calls_wait_for_their_state_s_program(steps):
    """Given a state eagerly, a sharded sample or update runs once the
    program that returned it has run, as a Table's eager calls do: a state
    whose program failed raises that failure at the call, which changes
    nothing; the same calls given the state they returned work."""
    table = gx.ShardedTable({"x": gx.Column((2,), "int32")}, capacity=8, max_length=4,
                            step_priorities=steps)
    for i in range(3):
        table.insert({"x": np.full((i + 2, 2), i, np.int32)}, priority=float(i + 1))
    before = table.local.contents()
    keys = np.asarray(table.sample(jax.random.key(1), 8, 1).keys)
    empty = gx.Table({"y": gx.Column((), "float32")}, capacity=4, max_length=2)
    failed = _failed_state(empty)
    with pytest.raises(jax.errors.JaxRuntimeError) as raised:
        table.sample(failed, jax.random.key(0), 4, 1)
    assert gx.table_error(raised.value) == "shortfall"
    update = dict(steps=np.zeros((len(keys), 1), np.int64)) if steps else {}
    new = np.full((len(keys), 1) if steps else len(keys), 9.0)
    with pytest.raises(jax.errors.JaxRuntimeError):
        table.update_priorities(failed, keys, new, **update)
    after = table.local.contents()
    assert after["priority"].tolist() == before["priority"].tolist()
    state = table.state()
    state, batch = table.sample(state, jax.random.key(0), 4, 1)
    update = dict(steps=np.zeros((4, 1), np.int64)) if steps else {}
    state, count = table.update_priorities(state, batch.keys, new[:4], **update)
    assert gx.state.is_state(state) and count == 4
    table.close()
    empty.close()


def test_one_process_topk_and_recent_are_those_of_the_table():
    table = one_shard()
    keys = table.local.contents()["key"]  # priorities 0, 1, 2 in key order
    for strategy, best in ((gx.TopK(2), keys[1:]), (gx.Recent(1), keys[2:]),
                           (gx.TopK(99), keys)):
        batch = table.sample(jax.random.key(1), 64, 2, strategy)
        assert set(np.asarray(batch.keys).tolist()) == set(best.tolist()), strategy
        np.testing.assert_allclose(np.asarray(batch.probability), 1 / len(best))
        assert np.asarray(batch.table_size).tolist() == [3] * 64
    table.close()


def _spec(**columns: gx.Column) -> dict:
    """A sharded table's agreed spec, as another process publishes it (through JSON)."""
    spec = agreement.table_spec(columns, 8, 4, "fifo", None, "xla", "", 2)
    return json.loads(json.dumps(spec, sort_keys=True))


def test_the_spec_keeps_the_column_order_and_compares_pads_by_their_bytes():
    """Issue 45: the spec was a dict of columns, compared as JSON with sorted
    keys, so another column order passed (and a pad by its value: -0.0 as 0.0)."""
    a, b = gx.Column((2,), "int32"), gx.Column((3,), "int32")
    assert agreement.differences(_spec(a=a, b=b), _spec(a=a, b=b), 1, 0) == []
    [order] = agreement.differences(_spec(b=b, a=a), _spec(a=a, b=b), 1, 0)
    assert order.startswith("the columns in another order: ['b', 'a'] in process 1 against "
                            "['a', 'b'] in process 0") and "same order on every process" in order
    assert agreement.differences(_spec(a=a), _spec(a=a, b=b), 1, 0) == [
        "other columns: ['a'] in process 1 against ['a', 'b'] in process 0"]
    # A shape, a dtype, a pad: each named with the column.
    for theirs, mine, text in (
            (gx.Column((2,), "int32"), gx.Column((3,), "int32"), "int32[2] pad 0 in process 1 "
                                                                 "against int32[3] pad 0"),
            (gx.Column((2,), "int32"), gx.Column((2,), "uint32"), "int32[2] pad 0 in process 1 "
                                                                  "against uint32[2] pad 0"),
            (gx.Column((), "float32", pad=-0.0), gx.Column((), "float32", pad=0.0),
             "float32[] pad -0.0 in process 1 against float32[] pad 0.0"),
            (gx.Column((), "float32", pad=-math.nan), gx.Column((), "float32", pad=math.nan),
             "float32[] pad nan (bytes 0000c0ff) in process 1 against float32[] pad nan "
             "(bytes 0000c07f)")):
        [found] = agreement.differences(_spec(x=theirs), _spec(x=mine), 1, 0)
        assert found.startswith("column 'x' as ") and text in found, found
    # A column of the other byte order is the machine's (its inserts convert),
    # so it is the same column as one written in the machine's order.
    assert agreement.differences(_spec(x=gx.Column((2,), ">i4")),
                                 _spec(x=gx.Column((2,), "<i4")), 1, 0) == []
    # The same bytes are the same pad, however they were written.
    assert agreement.differences(_spec(x=gx.Column((), "float32", pad=0)),
                                 _spec(x=gx.Column((), "float32", pad=0.0)), 1, 0) == []
    assert agreement.differences(_spec(x=gx.Column((), "bool", pad=True)),
                                 _spec(x=gx.Column((), "bool", pad=1)), 1, 0) == []
    # Every other argument by name.
    other = agreement.table_spec({"a": a}, 9, 4, "lifo", gx.MinSize(2), "xla", "t", 2)
    assert agreement.differences(other, _spec(a=a), 1, 0) == [
        "capacity=9 in process 1 against 8 in process 0",
        "name='t' in process 1 against '' in process 0",
        "rate_limiter={'type': 'MinSize', 'min_size': 2, 'timeout': 60.0} in process 1 "
        "against None in process 0",
        "remover='lifo' in process 1 against 'fifo' in process 0"]


def test_a_complex_pad_is_agreed_on():
    """The spec once held the pad as a JSON number: a complex one raised
    TypeError (not JSON serializable) at construction."""
    table = gx.ShardedTable({"z": gx.Column((), "complex64", pad=1j)}, capacity=4, max_length=4)
    table.insert({"z": np.ones(2, np.complex64)})
    batch = table.sample(jax.random.key(0), 2, 3)
    z, mask = np.asarray(batch["z"]), np.asarray(batch.mask)
    assert (z[mask] == 1).all() and (z[~mask] == 1j).all() and (~mask).any()
    table.close()


class JaxLikeStore:
    """The calls gearjax makes of JAX's key-value store, failing as JAX's
    does (jax 0.10, checked by setting a key twice in a jax.distributed job:
    a JaxRuntimeError 'ALREADY_EXISTS: key <key> already exists.' and the
    gRPC details; 'NOT_FOUND: Config key <key> not found.' for a missing one)."""

    def __init__(self, values: dict[str, str]):
        self.values = dict(values)

    def key_value_set(self, key: str, value: str, allow_overwrite: bool = False) -> None:
        if key in self.values and not allow_overwrite:
            raise jax.errors.JaxRuntimeError(
                f"ALREADY_EXISTS: key {key} already exists.\nAdditional GRPC error information "
                f"from remote target coordination_service while calling /xla.coordination."
                f"CoordinationService/InsertKeyValue:\n:UNKNOWN:Error received from peer  "
                f"{{grpc_status:6, grpc_message:\"key {key} already exists.\"}}")
        self.values[key] = value

    def key_value_try_get(self, key: str) -> str:
        if key not in self.values:
            raise jax.errors.JaxRuntimeError(f"NOT_FOUND: Config key {key} not found.")
        return self.values[key]

    def blocking_key_value_get(self, key: str, timeout_in_ms: int) -> str:
        return self.key_value_try_get(key)

    def key_value_delete(self, key: str) -> None:
        for k in [k for k in self.values if k == key or k.startswith(key + "/")]:
            del self.values[k]

    def wait_at_barrier(self, barrier_id: str, timeout_in_ms: int) -> None:
        pass


def test_a_restarted_process_is_refused_saying_what_happened_and_what_to_do(monkeypatch):
    """Issue 45: it got JAX's raw 'ALREADY_EXISTS: key gearjax/sharded/0/spec/1
    already exists' (tests/multihost_bodies.py, restarted_process, restarts one
    for real)."""
    before = {"gearjax/sharded/processes/0": json.dumps({"host": "node-7", "pid": 4242,
                                                         "since": 0.0})}
    store = JaxLikeStore(before)
    monkeypatch.setattr(coordination, "client", lambda: store)
    monkeypatch.setattr(coordination, "_joined_store", None)
    with pytest.raises(gx.sharded.RejoinError) as refused:
        gx.ShardedTable({"x": gx.Column((), "int32")}, capacity=4, max_length=2)
    assert isinstance(refused.value, RuntimeError)  # what JAX's error was: caught alike
    assert (refused.value.process, refused.value.previous["pid"]) == (0, 4242)
    message = str(refused.value)
    assert message.startswith("process 0 already took part in this jax.distributed job's "
                              "sharded tables (as pid 4242 on node-7, since 1970-01-01 "
                              "00:00:00 UTC): this process is a restart of it"), message
    assert "Restart every process of the job, then restore the last checkpoint with " \
           "gx.ShardedTable.load" in message
    assert store.values == before  # refused before its spec was published
    # Its predecessor's announcement unreadable: the message still says what to do.
    assert str(coordination.RejoinError(1, {})).startswith(
        "process 1 already took part in this jax.distributed job's sharded tables: this")

    # A process's first job: it announces itself once, for all its tables.
    fresh = JaxLikeStore({})
    monkeypatch.setattr(coordination, "client", lambda: fresh)
    tables = [gx.ShardedTable({"x": gx.Column((), "int32")}, capacity=4, max_length=2)
              for _ in range(2)]
    assert json.loads(fresh.values["gearjax/sharded/processes/0"])["pid"] == os.getpid()
    assert len([k for k in fresh.values if k.startswith("gearjax/sharded/processes/")]) == 1
    for table in tables:
        table.close()


def test_a_closed_table_leaves_its_spec_for_peers_still_agreeing(monkeypatch):
    """A process that made a table and closed it at once deleted its spec
    while a slower peer had yet to read it: the peer waited for it until the
    agreement's timeout, and the fast process in its next collective (found
    under load in test_step_priorities_sample_and_update_globally). Its stats
    still go."""
    store = JaxLikeStore({})
    monkeypatch.setattr(coordination, "client", lambda: store)
    monkeypatch.setattr(coordination, "_joined_store", None)
    table = gx.ShardedTable({"x": gx.Column((), "int32")}, capacity=4, max_length=2)
    path = table._path
    table.stats()  # publishes this shard's stats
    assert f"{path}/stats/0" in store.values
    table.close()
    assert f"{path}/spec/0" in store.values, "a peer still agreeing could not read it"
    assert f"{path}/stats/0" not in store.values


@needs_nixl
def test_prefetched_batches_are_at_most_one_step_old():
    table = gx.ShardedTable({"x": gx.Column((2,), "int32")}, capacity=8, max_length=4,
                            exchange="nixl")
    for i in range(3):
        table.insert({"x": np.full((i + 1, 2), i, np.int32)}, priority=1.0)
    strategy = gx.Prioritized(1.0)
    first = table.sample(jax.random.key(0), 64, 2, strategy, prefetch=True)  # read now
    table._prefetcher._ahead[1].result()  # the next batch is read: before the insert
    late = table.insert({"x": np.full((2, 2), 9, np.int32)}, priority=1e9)
    before = table.sample(jax.random.key(1), 64, 2, strategy, prefetch=True)
    after = table.sample(jax.random.key(2), 64, 2, strategy, prefetch=True)
    assert late not in np.asarray(first.keys) and late not in np.asarray(before.keys)
    assert np.mean(np.asarray(after.keys) == late) > 0.9  # drawn after the previous call
    np.testing.assert_array_equal(np.asarray(after["x"])[np.asarray(after.keys) == late][:, :, 0]
                                  [np.asarray(after.mask)[np.asarray(after.keys) == late]], 9)
    # Another request is read now, with its own key (and a miss).
    other = table.sample(jax.random.key(3), 32, 2, strategy, prefetch=True)
    assert other.keys.shape == (32,) and np.mean(np.asarray(other.keys) == late) > 0.9
    # Inside a per-process jit, through the same callback.
    keys = jax.jit(lambda state, k: table.sample(state, k, 32, 2, strategy,
                                                 prefetch=True)[1].keys)(
        table.state(), jax.random.key(4))
    assert np.mean(np.asarray(keys) == late) > 0.9
    stats = table.stats()
    assert (stats["prefetch_hits"], stats["prefetch_misses"]) == (3, 2)
    table.close()  # waits for the read in flight


@needs_nixl
@pytest.mark.parametrize("pad", ["left", "right"])
def test_one_sided_forms_give_the_same_batch_for_a_key(pad):
    """A key draws the same batch eagerly, in a jit through the native
    sampler's FFI call and in a jit through the io_callback (prefetch): the
    rows, and the mask and timestep each form derives for them."""
    table = gx.ShardedTable({"x": gx.Column((2,), "int32")}, capacity=8, max_length=6,
                            exchange="nixl")
    for i in range(4):  # lengths 1..4: windows of 3 are padded in some rows
        table.insert({"x": np.arange(2 * (i + 1), dtype=np.int32).reshape(-1, 2) + 100 * i},
                     priority=1.0 + i)
    key = jax.random.key(5)
    eager = table.sample(key, 32, 3, gx.Prioritized(1.0), pad)
    native = jax.jit(lambda s, k: table.sample(s, k, 32, 3, gx.Prioritized(1.0), pad)[1])(
        table.state(), key)
    called_back = jax.jit(lambda s, k: table.sample(s, k, 32, 3, gx.Prioritized(1.0), pad,
                                                    prefetch=True)[1])(table.state(), key)
    assert not np.asarray(eager.mask).all()  # padding is part of the check
    for batch in (native, called_back):
        for name in ("keys", "start", "mask", "timestep"):
            np.testing.assert_array_equal(np.asarray(getattr(batch, name)),
                                          np.asarray(getattr(eager, name)), err_msg=name)
        np.testing.assert_array_equal(np.asarray(batch["x"]), np.asarray(eager["x"]))
    table.close()


def test_a_backend_without_shard_handlers_is_refused_clearly(monkeypatch):
    table = one_shard()
    monkeypatch.setattr(jax, "default_backend", lambda: "tpu")
    with pytest.raises(ValueError, match="CPU or CUDA programs; JAX's default backend here is "
                                         "'tpu'"):
        table.sample(jax.random.key(0), 4, 2)
    monkeypatch.undo()
    table.close()


def test_bad_arguments_are_refused_and_change_nothing():
    table = one_shard()
    before = table.local.contents()
    with pytest.raises(ValueError, match="exchange"):
        gx.ShardedTable({"x": gx.Column((), "int32")}, 4, 4, exchange="rdma")
    if _verbs_missing() is not None:  # the exact reason: pyverbs or the device list
        with pytest.raises(ValueError, match="exchange='verbs' (needs pyverbs|found no RDMA)"):
            gx.ShardedTable({"x": gx.Column((), "int32")}, 4, 4, exchange="verbs")
    if nixl_missing() is None:
        with pytest.raises(ValueError, match="rate limiter"):
            gx.ShardedTable({"x": gx.Column((), "int32")}, 4, 4, exchange="nixl",
                            rate_limiter=gx.MinSize(1))
    else:
        with pytest.raises(ValueError, match="needs NVIDIA NIXL"):
            gx.ShardedTable({"x": gx.Column((), "int32")}, 4, 4, exchange="nixl")
    with pytest.raises(ValueError, match="on_dead_shard"):
        gx.ShardedTable({"x": gx.Column((), "int32")}, 4, 4, on_dead_shard="ignore")
    with pytest.raises(ValueError, match="batch_size"):
        table.sample(jax.random.key(0), 0, 2)
    # The stateless forms are eager only: refused while tracing, nothing run.
    with pytest.raises(TypeError, match=r"ShardedTable.sample\(rng_key, ...\) without a table "
                                        r"state was traced"):
        jax.jit(lambda k: table.sample(k, 2, 2))(jax.random.key(0))
    with pytest.raises(TypeError, match="without a table state was traced"):
        jax.jit(lambda k: table.update_priorities(k, np.ones(1)))(np.zeros(1, np.int32))
    with pytest.raises(TypeError, match="without a table state was traced"):
        jax.jit(lambda x: table.insert_batch({"x": x}, np.array([2])))(np.zeros((1, 2, 2),
                                                                               np.int32))
    with pytest.raises(TypeError, match="table state"):  # a scalar of another dtype
        table.sample(jax.numpy.zeros((), jax.numpy.int32), jax.random.key(0), 2)
    with pytest.raises(ValueError, match="one-sided exchange"):
        table.sample(jax.random.key(0), 4, 2, prefetch=True)  # xla: every process takes part
    with pytest.raises(TypeError, match="prefetch"):
        table.sample(jax.random.key(0), 4, 2, prefetch=1)
    with pytest.raises(TypeError):
        table.sample(jax.random.key(0), 4, 2, "uniform")
    with pytest.raises(ValueError, match="priorit"):
        table.update_priorities(np.array([0]), np.array([np.nan]))
    with pytest.raises(TypeError, match="keys"):
        table.update_priorities(np.array([0.5]), np.array([1.0]))
    with pytest.raises(KeyError, match="no shard 1"):
        table.get(1 << 62)  # a shard this one-process job does not have
    with pytest.raises(ValueError):
        table.shard_of(-1)
    after = table.local.contents()
    for k in before:
        np.testing.assert_array_equal(before[k], after[k])
    assert table.local.stats()["samples"] == 0
    table.close()


def test_load_refuses_a_hostile_manifest(tmp_path):
    table = one_shard()
    table.save(tmp_path / "t")
    table.close()
    (tmp_path / "t" / "manifest.json").write_text('{"format": "gearjax-sharded-table/1", '
                                                  '"num_shards": 2, "shards": []}')
    with pytest.raises(gx.CheckpointError):
        gx.ShardedTable.load(tmp_path / "t")
    (tmp_path / "t" / "manifest.json").write_bytes(b"\xff" * 100)
    with pytest.raises(gx.CheckpointError):
        gx.ShardedTable.load(tmp_path / "t")
    (tmp_path / "t" / "manifest.json").write_bytes(b"[" * 500_000)  # RecursionError escaped once
    with pytest.raises(gx.CheckpointError, match="nests 500000 levels"):
        gx.ShardedTable.load(tmp_path / "t")
    with pytest.raises(FileNotFoundError):
        gx.ShardedTable.load(tmp_path / "missing")


def test_a_mesh_axis_of_another_size_than_the_shards_is_refused(tmp_path):
    code = """
import jax, numpy as np, gearjax as gx
from jax.sharding import Mesh, PartitionSpec as P
table = gx.ShardedTable({"x": gx.Column((), "int32")}, 4, 4)
table.insert({"x": np.zeros(2, np.int32)})
mesh = Mesh(np.array(jax.devices()), ("d",))
try:
    jax.jit(jax.shard_map(lambda k: table.sample(table.state(), k[0], 1, 1, axis_name="d")[1].keys,
                          mesh=mesh, in_specs=P("d"), out_specs=P("d")))(
        jax.random.split(jax.random.key(0), 2))
except ValueError as e:
    print("refused:", e)
"""
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=2",
               JAX_PLATFORMS="cpu")
    run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=120, cwd=tmp_path)  # not the source tree: the installed gearjax
    out = run.stdout + run.stderr
    assert "refused: the mesh axis 'd' has 2 devices, but the table has 1 shards" in out, out


@needs_nixl
def test_nixl_priority_updates_reach_their_owners_and_hostile_ones_are_refused(tmp_path):
    results = multihost.run("nixl_updates", 2, tmp_path)
    keys = np.array(results[0]["keys"]).reshape(-1)
    assert results[0]["applied"] == 3  # its own three; the others were sent
    assert results[0]["sent"] == 3
    for p, r in enumerate(results):
        own = dict(zip(r["local_keys"], r["priorities"]))
        for i, key in enumerate(keys):
            if int(key) >> SHIFT_2 == p:
                assert own[int(key) & ((1 << SHIFT_2) - 1)] == (i + 1) * 10.0
    assert results[1]["refused"] == 1  # the wrong token: nothing applied
    for p, r in enumerate(results):  # get reads another shard's trajectory one-sidedly
        other = (p + 1) % 2
        assert r["got"] == [[100 * other + 1] * 2] * 3
        assert "no trajectory" in r["missing"]


@pytest.mark.parametrize("exchange", ONE_SIDED)
@pytest.mark.parametrize("on_dead_shard", ["raise", "skip"])
def test_a_killed_owner_fails_a_one_sided_sample_in_time_or_is_skipped(tmp_path, on_dead_shard,
                                                                       exchange):
    result = multihost.run("nixl_dead_owner", 2, tmp_path, timeout=120,
                           expect_failure=frozenset({1}), signal_name="SIGKILL",
                           on_dead_shard=on_dead_shard, exchange=exchange)[0]
    for outcome, detail, seconds in result["outcomes"]:
        assert seconds < 2.0 + 1.0  # the exchange's timeout, never a hang
        if on_dead_shard == "raise":
            assert outcome == "ShardUnavailable" and "shard 1" in detail
        else:
            assert outcome == "ok" and detail == [0]  # renormalised over the live shard
    for outcome, detail, seconds in result["compiled_outcomes"]:  # inside jit, the same
        assert seconds < 2.0 + 1.0
        if on_dead_shard == "raise":
            assert outcome != "ok" and "shard 1" in detail
        else:
            assert outcome == "ok" and detail == [0]
    if on_dead_shard == "skip":
        assert result["lost"] == [1]


@needs_nixl
def test_nixl_a_frozen_owner_never_hangs_a_sample(tmp_path):
    result = multihost.run("nixl_dead_owner", 2, tmp_path, timeout=120,
                           expect_failure=frozenset({1}), signal_name="SIGSTOP",
                           on_dead_shard="raise")[0]
    for outcome, detail, seconds in result["outcomes"]:
        # Shared-memory reads of a frozen owner still succeed; over TCP they
        # would time out: either way within the exchange's deadline.
        assert seconds < 2.0 + 1.0
        assert outcome in ("ok", "ShardUnavailable")


@needs_nixl
def test_nixl_samples_inside_a_per_process_jit_and_scan_and_inside_shard_map(tmp_path):
    for r in multihost.run("nixl_in_jit", 2, tmp_path):
        assert r["mapped_rows"] == 3 * 8  # mode 2: this process's block, each of 3 steps
        assert r["errors"] == []
        assert r["shards"] == [0, 1]  # rows from both shards, read one-sidedly
        assert r["scan_keys"] == [4, 8] and r["scan_steps"] > 0
        assert r["key_dtype"] == "int64"
        assert r["same_as_eager"]  # the same key gives the same rows in and out of jit
        assert r["compiled_call"]  # one FFI call of the native sampler, no host callback
        assert r["ranked_compiled"] and r["ranked_same_as_eager"]  # TopK too, same sampler
        assert r["no_effects"]  # with a state: no JAX effect, JAX's fast dispatch path
        assert r["eager_state_form"] == 8
        assert "without a table state was traced" in r["stateless"]  # eager only
        # The native samples here (66, by 3 strategies) read their snapshot
        # through kept transfers, one a strategy, made once and posted again
        # (61 reposts in a run here; without keeping, none).
        assert r["transfers"]["reposted"] >= 60, r["transfers"]


@needs_nixl
def test_nixl_survivors_sample_on_past_the_heartbeat_timeout_with_recoverability(tmp_path):
    # Without JAX_ENABLE_RECOVERABILITY, JAX's coordination service aborts the
    # survivor once the dead process misses its heartbeats (3 s here); with it,
    # the survivor lives on and samples the live shards.
    result = multihost.run("nixl_dead_owner", 2, tmp_path, timeout=90,
                           expect_failure=frozenset({1}),
                           env={"JAX_ENABLE_RECOVERABILITY": "true"}, signal_name="SIGKILL",
                           on_dead_shard="skip", wait=8.0, heartbeat_timeout_seconds=3)[0]
    assert [o[:2] for o in result["outcomes"]] == [["ok", [0]]] * 4
    assert result["lost"] == [1]
