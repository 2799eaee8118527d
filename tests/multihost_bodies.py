"""Bodies that tests/test_sharded.py runs in several jax.distributed processes
(tests/multihost.py starts them: ``python -m multihost_bodies BODY PROCESS
PROCESSES PORT DIRECTORY KWARGS``). Each returns something JSON-able.

Trajectories describe themselves: step t of the i-th trajectory of shard k
holds [1000 k + i, t], so every sampled window can be checked against the key
and start it reports, in the process that sampled it.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time

import jax
import numpy as np

def shard_contents(process: int) -> list[tuple[int, int, float]]:
    """(id, length, priority) of what shard `process` holds: shards differ in
    size, lengths and priority mass."""
    return [(1000 * process + i, 1 + (5 * i + 3 * process) % 12,
             float((process + 1) * (1 + i % 3)) if i % 4 else 0.0)
            for i in range(3 + 4 * process)]


def fill(table, process: int) -> dict[str, list]:
    inserted = {}
    for ident, length, priority in shard_contents(process):
        x = np.stack([np.full(length, ident), np.arange(length)], 1).astype(np.int32)
        inserted[str(table.insert({"x": x}, priority=priority))] = [ident, length, priority]
    return inserted


def check_rows(batch, window: int, table) -> tuple[list[str], list[list]]:
    """Checks every row against what it says it is; returns (errors, rows as
    [key, shard, probability, table_size, id])."""
    errors, rows = [], []
    # Host copies first: indexing a jax.Array row by row costs a dispatch each.
    x = np.asarray(batch["x"])
    mask, timestep = np.asarray(batch.mask), np.asarray(batch.timestep)
    start, shard = np.asarray(batch.start), np.asarray(batch.shard)
    probability, table_size = np.asarray(batch.probability), np.asarray(batch.table_size)
    for b, key in enumerate(np.asarray(batch.keys)):
        key = int(key)
        real = x[b][mask[b]]
        if len(real) == 0 or len(real) > window:
            errors.append(f"row {b}: {len(real)} real steps")
            continue
        ident = int(real[0, 0])
        if not (real[:, 0] == ident).all() or not (real[:, 1] == timestep[b][mask[b]]).all():
            errors.append(f"row {b}: torn or misplaced window {real.tolist()}")
        if real[0, 1] != int(start[b]):
            errors.append(f"row {b}: starts at {real[0, 1]}, reports {int(start[b])}")
        if int(shard[b]) != key >> table.shard_shift or ident // 1000 != key >> table.shard_shift:
            errors.append(f"row {b}: key {key}, shard {int(shard[b])}, id {ident}")
        rows.append([key, int(shard[b]), float(probability[b]), int(table_size[b]), ident])
    return errors, rows


def strategy_of(name: str, gx):
    return {"uniform": gx.Uniform(), "timestep": gx.Timestep(),
            "prioritized": gx.Prioritized(0.7), "topk": gx.TopK(5), "recent": gx.Recent(6)}[name]


def insertion_stamps(table, process: int) -> dict[str, int]:
    """Global key -> insertion stamp of this shard's items (the clock TopK and
    Recent rank shards by; not public)."""
    keys, slots, _, _, stamps, _ = table.local._native.pin_items()
    table.local._native.unpin_slots(slots)
    return {str((process << table.shard_shift) | int(k)): int(s) for k, s in zip(keys, stamps)}


def global_distribution(process, processes, directory, strategies, calls, batch, window,
                        exchange="xla"):
    """Samples `calls` batches with each strategy in turn from one filled
    table (one job for every strategy: starting processes is most of the
    cost); returns strategy -> what the test checks."""
    import gearjax as gx
    table = gx.ShardedTable({"x": gx.Column((2,), "int32")}, capacity=64, max_length=12,
                            exchange=exchange)
    from jax.experimental import multihost_utils
    inserted = fill(table, process)
    stamps = insertion_stamps(table, process)
    if exchange == "nixl":
        multihost_utils.sync_global_devices("filled")
    out = {}
    for strategy in strategies:
        errors, rows = [], []
        served_before = table.local.stats()["samples"]
        for c in range(calls):
            b = table.sample(jax.random.key(c), batch, window, strategy_of(strategy, gx))
            e, r = check_rows(b, window, table)
            errors += e
            rows += r
        served = table.local.stats()["samples"] - served_before
        # Same key in every process: the rows must still differ between processes.
        first = np.asarray(table.sample(jax.random.key(0), batch, window,
                                        strategy_of(strategy, gx)).keys).tolist()
        table.stats()  # publishes this shard's figures now
        multihost_utils.sync_global_devices(f"published-{strategy}")
        stats = table.stats()
        out[strategy] = {"errors": errors, "rows": rows, "first": first, "size": stats["size"],
                         "served": served, "exchange": {k: v for k, v in stats.items()
                                                        if k.startswith("exchange_")}}
    # Owners keep serving (nixl) and publishing until every process is done.
    multihost_utils.sync_global_devices("sampled")
    table.close()
    return {"inserted": inserted, "stamps": stamps, "strategies": out}


def in_shard_map(process, processes, directory, steps):
    """Mode 2: a jitted lax.scan inside shard_map samples globally and sets
    the priority of every row drawn to 0, so no key is drawn twice."""
    import gearjax as gx
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

    table = gx.ShardedTable({"x": gx.Column((2,), "int32")}, capacity=64, max_length=12)
    for i in range(6):  # 8 trajectories of priority 1 per shard: 6 from the host ...
        x = np.stack([np.full(3, 1000 * process + i), np.arange(3)], 1).astype(np.int32)
        table.insert({"x": x}, priority=1.0)
    rows = np.stack([np.stack([np.full(3, 1000 * process + i), np.arange(3)], 1)
                     for i in (6, 7)]).astype(np.int32)  # ... and 2 from a jitted insert_batch
    _, batch_keys = jax.jit(lambda state, x: table.insert_batch(state, {"x": x},
                                                                np.array([3, 3])))(
        table.state(), rows)
    mesh = Mesh(np.array(jax.devices()), ("hosts",))

    def drain(key):
        def step(state, k):
            state, b = table.sample(state, k, 1, 3, gx.Prioritized(1.0), axis_name="hosts")
            state, updated = table.update_priorities(state, b.keys, jax.numpy.zeros(1),
                                                     axis_name="hosts")
            return state, (b.keys, b["x"][:, -1, 0], updated)
        return jax.lax.scan(step, table.state(), jax.random.split(key[0], steps))[1]

    program = jax.jit(jax.shard_map(drain, mesh=mesh, in_specs=P("hosts"),
                                    out_specs=(P("hosts"), P("hosts"), P("hosts"))))
    key = jax.make_array_from_process_local_data(
        NamedSharding(mesh, P("hosts")), jax.random.key_data(jax.random.key(process))[None])
    keys, idents, updated = program(key)
    keys = np.asarray(keys.addressable_data(0)).reshape(-1).tolist()
    idents = np.asarray(idents.addressable_data(0)).reshape(-1).tolist()
    updated = np.asarray(updated.addressable_data(0)).reshape(-1).tolist()
    # Misuse is refused clearly: the xla exchange in a per-process jit, an
    # axis not of the shard_map, and (TypeError) the stateless form traced.
    refusals = []

    def refused(program, *args):
        try:
            program(*args)
            refusals.append(None)
        except (ValueError, TypeError) as e:
            refusals.append(f"{'TypeError' if isinstance(e, TypeError) else 'ValueError'}: {e}")

    refused(jax.jit(lambda state, k: table.sample(state, k, 2, 3)), table.state(),
            jax.random.key(0))
    refused(jax.jit(jax.shard_map(
        lambda k: table.sample(table.state(), k[0], 1, 3, axis_name="nope")[1].keys,
        mesh=mesh, in_specs=P("hosts"), out_specs=P("hosts"))), key)
    refused(jax.jit(jax.shard_map(lambda k: table.sample(k[0], 1, 3, axis_name="hosts").keys,
                                  mesh=mesh, in_specs=P("hosts"), out_specs=P("hosts"))), key)
    refused(jax.jit(jax.shard_map(
        lambda k: table.update_priorities(jax.numpy.zeros(1, jax.numpy.int64),
                                          jax.numpy.zeros(1), axis_name="hosts"),
        mesh=mesh, in_specs=P("hosts"), out_specs=P())), key)
    refused(jax.jit(lambda x: table.insert_batch({"x": x}, np.array([3, 3]))), rows)
    zeroed = table.local.contents()["priority"].tolist()
    table.update_priorities(np.zeros(0, np.int64), np.zeros(0))  # eager, collective: a no-op
    # A failed run raises JaxRuntimeError, or ValueError where JAX's C++ fast
    # dispatch path launched it (later calls of a program: gearjax/errors.py).
    failed = (jax.errors.JaxRuntimeError, ValueError)
    for _ in range(3):  # the second scan drains what is left, then fails
        try:
            jax.block_until_ready(program(key))
        except failed:
            break
    try:  # every priority is 0 now: a clear error in every process, no hang
        jax.block_until_ready(program(key))
        drained = None
    except failed as e:
        drained = str(e)
    return {"keys": keys, "idents": idents, "updated": updated, "refusals": refusals,
            "drained": drained, "zeroed": zeroed,
            "insert_batch_keys": np.asarray(batch_keys).tolist(),
            "priorities": table.local.contents()["priority"].tolist()}


def step_weights(ident: int, length: int) -> np.ndarray:
    """Per-step priorities of trajectory `ident`: varied, some steps 0."""
    return np.array([0.0 if (ident + t) % 5 == 0 else 0.5 + (ident * 7 + t * 3) % 4
                     for t in range(length)])


def step_priorities(process, processes, directory, calls, batch, exchange="xla"):
    """PrioritizedSteps over every shard: eager global samples (every row
    checked; key, start, probability and table size returned), then with the
    xla exchange a routed per-step update eagerly from process 0 to a
    trajectory of every shard, a refused one, and inside shard_map a sample
    whose drawn steps each process sets to 0.25; with a one-sided exchange a
    per-process jitted sample (rows checked) and the refused update. Returns
    what each shard holds at the end."""
    import gearjax as gx
    from jax.experimental import multihost_utils

    table = gx.ShardedTable({"x": gx.Column((2,), "int32")}, capacity=32, max_length=12,
                            step_priorities=True, exchange=exchange)
    inserted = {}
    for ident, length, _ in shard_contents(process):
        x = np.stack([np.full(length, ident), np.arange(length)], 1).astype(np.int32)
        weights = step_weights(ident, length)
        inserted[str(table.insert({"x": x}, priority=weights))] = [ident, weights.tolist()]
    multihost_utils.sync_global_devices("filled")
    errors, rows = [], []
    for c in range(calls):
        b = table.sample(jax.random.key(c), batch, 3, gx.PrioritizedSteps(0.8))
        e, r = check_rows(b, 3, table)
        errors += e
        rows += [row + [int(start)] for row, start in zip(r, np.asarray(b.start))]
    first = next(int(k) for k, (_, w) in inserted.items() if len(w) >= 2)
    firsts = np.asarray(multihost_utils.process_allgather(
        np.array([first], np.int64).view(np.uint32))).view(np.int64).reshape(-1)
    out = {"inserted": inserted, "errors": errors, "rows": rows, "firsts": firsts.tolist()}
    if exchange == "xla":
        out.update(_routed_step_updates(table, process, processes, firsts))
    else:
        # Only process 0 samples with another alpha: the other owner publishes
        # that step tree when asked to (a tree request), not by sampling too.
        if process == 0:
            b = table.sample(jax.random.key(99), 64, 3, gx.PrioritizedSteps(0.3))
            out["asked_errors"] = check_rows(b, 3, table)[0]
        multihost_utils.sync_global_devices("asked")
        step = jax.jit(lambda state, k: table.sample(state, k, 64, 3, gx.PrioritizedSteps(0.8)))
        state, b = step(table.state(), jax.random.key(100 + process))
        out["jit_errors"] = check_rows(b, 3, table)[0]
        # Not collective: process 0's own entries applied at once, the other
        # shard's sent to its owner (the padding entry, NaN, skipped).
        if process == 0:
            steps = np.tile(np.array([[0, 1, -1]]), (processes, 1))
            values = np.array([[100.0 + k, 200.0 + k, np.nan] for k in range(processes)])
            out["one_sided_count"] = table.update_priorities(firsts, values, steps=steps)
        time.sleep(1.0)  # the owners' progress threads apply what arrived
        multihost_utils.sync_global_devices("updated")
        out["refused"] = table.stats()["refused_updates"]
    # Last (its data names no trajectory): an eager insert_batch's NumPy keys
    # are this shard's global keys.
    batch_keys = table.insert_batch({"x": np.zeros((1, 2, 2), np.int32)}, np.array([2]))
    out["batch_shards"] = [table.shard_of(int(k)) for k in batch_keys]
    contents = table.local.contents()
    per_key = np.split(contents["step_priorities"], np.cumsum(contents["length"])[:-1])
    out["held"] = {str((process << table.shard_shift) | int(k)): p.tolist()
                   for k, p in zip(contents["key"], per_key)}
    multihost_utils.sync_global_devices("step-priorities-done")
    table.close()
    return out


def _routed_step_updates(table, process, processes, firsts) -> dict:
    """step_priorities' xla part: the updates, eagerly and inside shard_map,
    and the refusals."""
    import gearjax as gx
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

    # Routed eagerly: process 0 names every shard's first trajectory of two
    # steps or more (steps 0 and 1, a padding entry after them); the others
    # pass no rows, of the same width.
    if process == 0:
        steps = np.tile(np.array([[0, 1, -1]]), (processes, 1))
        values = np.array([[100.0 + k, 200.0 + k, np.nan] for k in range(processes)])
        eager_count = table.update_priorities(firsts, values, steps=steps)
    else:
        eager_count = table.update_priorities(np.zeros(0, np.int64), np.zeros((0, 3)),
                                              steps=np.zeros((0, 3), np.int64))
    # A step past its trajectory's length: its owner refuses its entries, and
    # every process raises (none waits on the refusing one).
    before = table.local.contents()["step_priorities"]
    try:
        table.update_priorities(firsts[:1], np.ones((1, 1)), steps=np.array([[50]]))
        past_length = None
    except ValueError as e:
        past_length = str(e)
    unchanged = bool(np.array_equal(before, table.local.contents()["step_priorities"]))
    # Processes that disagree on the call's shape: every one raises, none waits.
    mismatches = []
    width = 2 + process  # each process its own W
    for call in (lambda: table.update_priorities(np.zeros(0, np.int64), np.zeros((0, width)),
                                                 steps=np.zeros((0, width), np.int64)),
                 lambda: table.update_priorities(np.zeros(0, np.int64), np.zeros((0, 2)),
                                                 steps=np.zeros((0, 2), np.int64))
                 if process == 0 else table.update_priorities(np.zeros(0, np.int64),
                                                              np.zeros(0))):
        try:
            call()
            mismatches.append(None)
        except ValueError as e:
            mismatches.append(str(e))
    # One process's own arguments refused (a NaN priority, with steps= and
    # without): it raises its error, every other process a ValueError naming
    # it, none waits, and nothing changes anywhere.
    one_refuses = []
    before = table.local.contents()
    bad = np.nan if process == processes - 1 else 1.0
    for call in (lambda: table.update_priorities(firsts[:1], np.array([[bad]]),
                                                 steps=np.array([[0]])),
                 lambda: table.update_priorities(firsts[:1], np.array([bad]))):
        try:
            call()
            one_refuses.append(None)
        except (TypeError, ValueError) as e:
            one_refuses.append(str(e))
    after = table.local.contents()
    one_refuses.append(all(np.array_equal(before[k], after[k]) for k in before))
    mesh = Mesh(np.array(jax.devices()), ("hosts",))

    def step(key):
        state, b = table.sample(table.state(), key[0], 4, 3, gx.PrioritizedSteps(0.8),
                                axis_name="hosts")
        steps = jax.numpy.where(b.mask, b.timestep, -1)
        state, count = table.update_priorities(state, b.keys, jax.numpy.full((4, 3), 0.25),
                                               axis_name="hosts", steps=steps)
        return b.keys[None], steps[None], count[None]

    program = jax.jit(jax.shard_map(step, mesh=mesh, in_specs=P("hosts"),
                                    out_specs=(P("hosts"), P("hosts"), P("hosts"))))
    key = jax.make_array_from_process_local_data(
        NamedSharding(mesh, P("hosts")), jax.random.key_data(jax.random.key(process))[None])
    drawn_keys, drawn_steps, jit_count = (np.asarray(a.addressable_data(0))
                                          for a in program(key))
    refusals = []
    plain = gx.ShardedTable({"x": gx.Column((2,), "int32")}, capacity=4, max_length=12)
    for call in (lambda: plain.sample(jax.random.key(0), 2, 3, gx.PrioritizedSteps(1.0)),
                 lambda: plain.update_priorities(np.zeros(1, np.int64), np.ones((1, 1)),
                                                 steps=np.zeros((1, 1), np.int64))):
        try:
            call()
            refusals.append(None)
        except ValueError as e:
            refusals.append(str(e))
    plain.close()
    return {"eager_count": eager_count, "drawn_keys": drawn_keys.reshape(-1).tolist(),
            "drawn_steps": drawn_steps.reshape(-1, 3).tolist(),
            "jit_count": int(jit_count.reshape(-1)[0]), "refusals": refusals,
            "past_length": past_length, "unchanged": unchanged, "mismatches": mismatches,
            "one_refuses": one_refuses}


def routed_updates(process, processes, directory):
    """Process 0 updates keys of every shard; only owners apply them; an
    evicted key is skipped and counted."""
    import gearjax as gx
    table = gx.ShardedTable({"x": gx.Column((2,), "int32")}, capacity=4, max_length=12)
    keys = [table.insert({"x": np.zeros((2, 2), np.int32)}, priority=1.0) for _ in range(4)]
    from jax.experimental import multihost_utils
    gathered = np.asarray(multihost_utils.process_allgather(
        np.array(keys, np.int64).view(np.uint32))).reshape(processes, -1).view(np.int64)
    evicted = int(gathered[processes - 1][0])
    if process == processes - 1:
        table.insert({"x": np.zeros((2, 2), np.int32)}, priority=1.0)  # evicts its first key
    multihost_utils.sync_global_devices("evicted")
    if process == 0:
        targets = gathered.reshape(-1)
        priorities = np.arange(1, len(targets) + 1, dtype=np.float64) * 10
        updated = table.update_priorities(targets, priorities)
    else:
        updated = table.update_priorities(np.zeros(0, np.int64), np.zeros(0))
    contents = table.local.contents()
    try:
        table.get(int(gathered[(process + 1) % processes][1]))
        remote_get = ""
    except ValueError as e:
        remote_get = str(e)
    time.sleep(0.3)
    return {"updated": updated, "evicted": evicted, "keys": gathered.tolist(),
            "remote_get": remote_get,
            "local_keys": contents["key"].tolist(), "priorities": contents["priority"].tolist(),
            "skipped": table.local.stats()["skipped_updates"], "stats": table.stats()["size"]}


def eviction_race(process, processes, directory, seconds, exchange="xla"):
    """The last process inserts and evicts without pause from a thread while
    every process samples globally: no window may be torn."""
    import gearjax as gx
    from jax.experimental import multihost_utils
    table = gx.ShardedTable({"x": gx.Column((2,), "int32")}, capacity=6, max_length=12,
                            exchange=exchange)
    fill_ids = iter(range(1000 * process, 1000 * process + 1000))

    def put():
        ident = next(fill_ids)
        length = 1 + ident % 12
        x = np.stack([np.full(length, ident), np.arange(length)], 1).astype(np.int32)
        table.insert({"x": x})

    for _ in range(6):
        put()
    stop = threading.Event()
    inserted = [0]

    def writer():
        while not stop.is_set():
            put()
            inserted[0] += 1

    thread = threading.Thread(target=writer) if process == processes - 1 else None
    if thread:
        thread.start()
    errors, calls = [], 0
    deadline = time.monotonic() + seconds
    while True:
        go = np.asarray(multihost_utils.process_allgather(np.array([time.monotonic() < deadline])))
        if not go.all():
            break
        b = table.sample(jax.random.key(calls), 64, 5)
        errors += check_rows(b, 5, table)[0]
        calls += 1
    stop.set()
    if thread:
        thread.join()
    multihost_utils.sync_global_devices("done")
    table.close()
    return {"errors": errors[:5], "calls": calls, "inserted": inserted[0]}


def save_and_load(process, processes, directory):
    import gearjax as gx
    table = gx.ShardedTable({"x": gx.Column((2,), "int32")}, capacity=16, max_length=12,
                            name="saved")
    fill(table, process)
    before = jax.block_until_ready(table.sample(jax.random.key(3), 16, 4, gx.Prioritized(0.7)))
    path = os.path.join(directory, "checkpoint")
    table.save(path)
    loaded = gx.ShardedTable.load(path)
    after = jax.block_until_ready(loaded.sample(jax.random.key(3), 16, 4, gx.Prioritized(0.7)))
    key = loaded.insert({"x": np.zeros((1, 2), np.int32)})
    return {"same": bool((np.asarray(before.keys) == np.asarray(after.keys)).all()),
            "before": np.asarray(before.keys).tolist(), "after": np.asarray(after.keys).tolist(),
            "contents_equal": table.local.contents()["key"].tolist() ==
            loaded.local.contents()["key"][:-1].tolist(),
            "new_key_shard": loaded.shard_of(key), "files": sorted(os.listdir(path))}


def killed_peer(process, processes, directory, victim):
    """The victim kills itself with SIGKILL mid-run; the others keep sampling
    and must end (an error, or JAX's coordination service aborting them
    once the victim's heartbeats stop) instead of hanging."""
    import gearjax as gx
    table = gx.ShardedTable({"x": gx.Column((2,), "int32")}, capacity=16, max_length=12)
    fill(table, process)
    for c in range(1000):
        if process == victim and c == 3:
            os.kill(os.getpid(), signal.SIGKILL)
        try:
            table.sample(jax.random.key(c), 8, 4)
        except Exception as e:  # noqa: BLE001 - what the survivor sees
            print(f"survivor {process} got {type(e).__name__}: {str(e)[:200]}", flush=True)
            return {"error": type(e).__name__, "call": c}
    return {"error": None}


def mismatched_spec(process, processes, directory):
    """The last process asks for another capacity: every process refuses."""
    import gearjax as gx
    capacity = 8 if process < processes - 1 else 9
    try:
        gx.ShardedTable({"x": gx.Column((2,), "int32")}, capacity=capacity, max_length=4)
    except ValueError as e:
        return str(e)
    return None


def column_order(process, processes, directory, exchange):
    """The last process lists the same columns in another order, first with
    equal shapes (rows came back with a and b swapped), then with different
    ones (both processes aborted in gloo): every process refuses, naming the
    other. Then the same order: every row holds its own columns."""
    import gearjax as gx
    from jax.experimental import multihost_utils
    last = process == processes - 1
    refusals = {}
    for case, (a, b) in (("same shapes", ((2,), (2,))), ("different shapes", ((2,), (3,)))):
        columns = {"a": gx.Column(a, "int32"), "b": gx.Column(b, "int32")}
        if last:
            columns = dict(reversed(list(columns.items())))
        try:
            gx.ShardedTable(columns, capacity=8, max_length=4, exchange=exchange).close()
            refusals[case] = None
        except ValueError as e:
            refusals[case] = str(e)
        multihost_utils.sync_global_devices(f"refused {case}")
    table = gx.ShardedTable({"a": gx.Column((2,), "int32"), "b": gx.Column((3,), "int32")},
                            capacity=8, max_length=4, exchange=exchange)
    table.insert({"a": np.full((3, 2), 10 + process, np.int32),
                  "b": np.full((3, 3), 20 + process, np.int32)})
    multihost_utils.sync_global_devices("filled")
    batch = table.sample(jax.random.key(process), 32, 2)
    mask, shard = np.asarray(batch.mask), np.asarray(batch.shard)
    rows_ok = all((np.asarray(batch["a"])[i][mask[i]] == 10 + shard[i]).all() and
                  (np.asarray(batch["b"])[i][mask[i]] == 20 + shard[i]).all()
                  for i in range(32))
    multihost_utils.sync_global_devices("sampled")
    table.close()
    return {"refusals": refusals, "rows_ok": rows_ok,
            "shards": sorted(set(shard.tolist()))}


def restarted_process(process, processes, directory, exchange):
    """Run with JAX_ENABLE_RECOVERABILITY=true (JAX lets a restarted process
    reconnect only then). Process 1 makes a table, starts its own
    replacement (process 1 again, under a timeout) and kills itself; the
    replacement makes the same table and must be refused with RejoinError,
    which it writes to a file. Process 0 lives on and returns that file."""
    import subprocess
    import gearjax as gx
    table = gx.ShardedTable({"x": gx.Column((2,), "int32")}, capacity=8, max_length=4,
                            exchange=exchange)
    outcome = os.path.join(directory, "replacement.json")
    if process == 1:
        port = sys.argv[4]  # main's argument: the coordinator the replacement joins
        # Under timeout: an orphan once this process dies, it must never outlive the test.
        subprocess.Popen(["timeout", "-s", "KILL", "60", sys.executable, "-m",
                          "multihost_bodies", "replacement", "1", str(processes), port,
                          directory, json.dumps({"exchange": exchange})])
        os.kill(os.getpid(), signal.SIGKILL)
    deadline = time.monotonic() + 90
    while not os.path.exists(outcome) and time.monotonic() < deadline:
        time.sleep(0.1)
    with open(outcome) as f:
        result = json.load(f)
    result["survivor_size"] = table.local.stats()["size"]
    print("MULTIHOST-RESULT " + json.dumps(result), flush=True)
    os._exit(0)  # process 1 is gone: skip the distributed shutdown


def replacement(process, processes, directory, exchange):
    """restarted_process's second process 1: the same table, refused."""
    import gearjax as gx
    try:
        gx.ShardedTable({"x": gx.Column((2,), "int32")}, capacity=8, max_length=4,
                        exchange=exchange)
        result = {"error": None, "message": None}
    except Exception as e:  # noqa: BLE001 - what the restarted process sees
        result = {"error": type(e).__name__, "message": str(e),
                  "is_runtime_error": isinstance(e, RuntimeError)}
    path = os.path.join(directory, "replacement.json")
    with open(path + ".tmp", "w") as f:
        json.dump(result, f)
    os.replace(path + ".tmp", path)  # whole, or not there
    os._exit(0)


def mismatched_sample(process, processes, directory):
    """The processes call an eager sample with different arguments, one
    difference after another (batch, window, strategy, pad): each call raises
    a ValueError naming the disagreement in every process (a gloo size
    mismatch once aborted every process), and the table still works for a
    call they agree on."""
    import jax
    import numpy as np
    import gearjax as gx
    table = gx.ShardedTable({"x": gx.Column((2,), "int32")}, capacity=8, max_length=4,
                            exchange="xla")
    table.insert({"x": np.full((3, 2), process, np.int32)})
    last = process == processes - 1
    out = {}
    for differ, change in (("batch", {"batch_size": 5 if last else 4}),
                           ("window", {"window": 3 if last else 2}),
                           ("strategy", {"strategy": gx.Prioritized(0.5) if last else gx.Uniform()}),
                           ("pad", {"pad": "right" if last else "left"}),
                           # The last process's own arguments refused: it raises why,
                           # the others name it (it once left them waiting).
                           ("refused", {"batch_size": 0 if last else 4})):
        kwargs = {"batch_size": 4, "window": 2, "strategy": gx.Uniform(), "pad": "left", **change}
        try:
            table.sample(jax.random.key(process), **kwargs)
            message = None
        except ValueError as e:
            message = str(e)
        after = table.sample(jax.random.key(7), 4, 2)  # agreed: works
        out[differ] = {"message": message, "rows": int(np.asarray(after["x"]).shape[0])}
    table.close()
    return out


def failed_state_eager(process, processes, directory):
    """Eager sharded calls given a state wait for its program: the last
    process gives a sample and an update a state whose program failed. It
    raises that failure, the others a ValueError naming its refusal (none
    waits for it in the collective), nothing changes, and the calls they
    then agree on work."""
    import jax
    import numpy as np
    import gearjax as gx
    table = gx.ShardedTable({"x": gx.Column((2,), "int32")}, capacity=8, max_length=4,
                            exchange="xla")
    table.insert({"x": np.full((3, 2), process, np.int32)}, priority=1.0)
    last = process == processes - 1
    empty = gx.Table({"y": gx.Column((), "float32")}, capacity=4, max_length=2)

    @jax.jit
    def heavy(state, key):  # fails as it runs: the table is empty
        state, batch = empty.sample(state, key, 2)
        m = jax.numpy.full((16, 16), batch["y"].sum(), jax.numpy.float32)
        return state, (m @ m).sum()

    state = heavy(empty.state(), jax.random.key(0))[0] if last else table.state()
    keys = np.asarray(table.sample(jax.random.key(1), 4, 1).keys)
    out = {}
    for call in ("sample", "update"):
        try:
            if call == "sample":
                table.sample(state, jax.random.key(process), 4, 1)
            else:
                table.update_priorities(state, keys, np.full(4, 5.0))
            out[call] = None
        except (ValueError, jax.errors.JaxRuntimeError) as e:
            out[call] = f"{type(e).__name__}: {e}"
    out["priorities"] = table.local.contents()["priority"].tolist()
    out["after"] = int(np.asarray(table.sample(jax.random.key(7), 4, 1).keys).shape[0])
    out["updated"] = int(table.update_priorities(keys, np.full(4, 2.0)))
    table.close()
    empty.close()
    return out


def nixl_updates(process, processes, directory):
    """One-sided exchange: process 0 sets priorities of every shard's keys;
    owners apply them from notifications; a notification under another job
    token is refused."""
    import gearjax as gx
    from jax.experimental import multihost_utils
    table = gx.ShardedTable({"x": gx.Column((2,), "int32")}, capacity=8, max_length=4,
                            exchange="nixl")
    keys = [table.insert({"x": np.full((2 + i, 2), 100 * process + i, np.int32)})
            for i in range(3)]
    gathered = np.asarray(multihost_utils.process_allgather(
        np.array(keys, np.int64).view(np.uint32))).reshape(processes, -1).view(np.int64)
    applied = None
    if process == 0:
        targets = gathered.reshape(-1)
        applied = table.update_priorities(targets, np.arange(1, targets.size + 1) * 10.0)
        # A hostile peer: the right agent, the wrong token.
        transport = table._transport
        name = transport._peer(1)
        transport._agent.notify(name, b"GXUP" + b"0" * 32 + np.int64(0).tobytes() +
                                    np.float64(5).tobytes())
    time.sleep(1.0)  # the owners' progress threads apply what arrived
    multihost_utils.sync_global_devices("applied")
    other = (process + 1) % processes  # read another shard's trajectory one-sidedly
    got = table.get(int(gathered[other][1]))["x"].tolist()
    try:
        table.get(int(gathered[other][1]) + (1 << 20))  # a key never issued
        missing = None
    except KeyError as e:
        missing = str(e)
    contents = table.local.contents()
    stats = table.stats()
    multihost_utils.sync_global_devices("read")
    table.close()
    return {"applied": applied, "keys": gathered.tolist(), "local_keys": contents["key"].tolist(),
            "priorities": contents["priority"].tolist(), "refused": stats["refused_updates"],
            "got": got, "missing": missing,
            "sent": stats["sent_updates"]}


def nixl_in_jit(process, processes, directory):
    """The data-loader pattern: a per-process jitted step (and lax.scan)
    samples the global table one-sidedly through the nixl exchange."""
    import gearjax as gx
    from jax.experimental import multihost_utils
    table = gx.ShardedTable({"x": gx.Column((2,), "int32")}, capacity=16, max_length=12,
                            exchange="nixl")
    fill(table, process)
    multihost_utils.sync_global_devices("filled")
    step = jax.jit(lambda state, k: table.sample(state, k, 16, 4, gx.Timestep()))
    errors = []
    shards = set()
    state = table.state()
    for c in range(3):  # each call takes the state the previous one returned
        state, b = step(state, jax.random.key(c))
        errors += check_rows(b, 4, table)[0]
        shards |= set(np.asarray(b.shard).tolist())

    def scan(key):
        def body(carry, k):
            total, state = carry
            state, b = table.sample(state, k, 8, 4)
            return (total + b.mask.sum(), state), b.keys
        (total, _), keys = jax.lax.scan(body, (0, table.state()), jax.random.split(key, 4))
        return total, keys

    total, keys = jax.jit(scan)(jax.random.key(9))
    eager = table.sample(jax.random.key(1), 16, 4, gx.Timestep())
    _, jitted = step(table.state(), jax.random.key(1))
    # A state threaded through a scan; one FFI call of the native sampler per
    # step, no host callback, no JAX effect.
    def threaded(state, key):
        def body(state, k):
            state, b = table.sample(state, k, 8, 4, gx.Prioritized(1.0))
            return state, b
        return jax.lax.scan(body, state, jax.random.split(key, 3))

    threaded_program = jax.jit(threaded)
    hlo = threaded_program.lower(table.state(), jax.random.key(3)).as_text()
    compiled_call = "gearjax_one_sided_sample" in hlo and "callback" not in hlo
    no_effects = not jax.make_jaxpr(threaded)(table.state(), jax.random.key(3)).effects
    state, tb = threaded_program(table.state(), jax.random.key(3))
    for i in range(3):
        errors += check_rows(jax.tree.map(lambda x: x[i], tb), 4, table)[0]
        shards |= set(np.asarray(tb.shard[i]).tolist())
    state, eager_tb = table.sample(table.state(), jax.random.key(4), 8, 4, gx.Prioritized(1.0))
    # Eager samples on another thread while compiled ones run here: they share
    # the agent's staging buffers, one sample at a time.
    import threading
    eager_errors = []

    def eager_loop():
        for c in range(20):
            eager_errors.extend(check_rows(table.sample(jax.random.key(100 + c), 16, 4), 4,
                                           table)[0])

    thread = threading.Thread(target=eager_loop)
    thread.start()
    for c in range(10):
        _, tb = threaded_program(table.state(), jax.random.key(200 + c))
        for i in range(3):
            errors += check_rows(jax.tree.map(lambda x: x[i], tb), 4, table)[0]
    thread.join()
    errors += eager_errors
    ranked_program = jax.jit(lambda state, k: table.sample(state, k, 8, 4, gx.TopK(3)))
    ranked_hlo = ranked_program.lower(table.state(), jax.random.key(5)).as_text()
    ranked_compiled = "gearjax_one_sided_sample" in ranked_hlo and "callback" not in ranked_hlo
    _, ranked = ranked_program(table.state(), jax.random.key(5))
    errors += check_rows(ranked, 4, table)[0]
    # The same key eagerly: the same rows (one sampler, one seed).
    ranked_same = bool((np.asarray(table.sample(jax.random.key(5), 8, 4, gx.TopK(3)).keys) ==
                        np.asarray(ranked.keys)).all())
    try:  # the stateless form is eager only: refused while tracing
        jax.jit(lambda k: table.sample(k, 8, 4))(jax.random.key(6))
        stateless = None
    except TypeError as e:
        stateless = str(e)

    # Mode 2: inside shard_map over one device per process, each process's
    # block of a global batch is read one-sidedly by that process.
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
    mesh = Mesh(np.array(jax.devices()), ("hosts",))

    def blocks(key):
        def body(state, k):
            return table.sample(state, k, 8, 4, gx.Timestep(), axis_name="hosts")
        return jax.lax.scan(body, table.state(), jax.random.split(key[0], 3))[1]

    program = jax.jit(jax.shard_map(blocks, mesh=mesh, in_specs=P("hosts"),
                                    out_specs=P(None, "hosts")))
    key = jax.make_array_from_process_local_data(
        NamedSharding(mesh, P("hosts")), jax.random.key_data(jax.random.key(process))[None])
    mapped = jax.tree.map(lambda x: np.asarray(x.addressable_data(0)), program(key))
    for i in range(3):  # each scan step: this process's block of 8 rows
        b = jax.tree.map(lambda x: x[i], mapped)
        errors += check_rows(b, 4, table)[0]
        shards |= set(np.asarray(b.shard).tolist())
    multihost_utils.sync_global_devices("sampled")
    transfers = table._transport._agent.transfers()
    table.close()
    return {"errors": errors, "shards": sorted(shards), "scan_keys": np.asarray(keys).shape,
            "transfers": transfers,
            "scan_steps": int(total), "key_dtype": str(jitted.keys.dtype),
            "same_as_eager": bool((np.asarray(eager.keys) == np.asarray(jitted.keys)).all()),
            "mapped_rows": int(mapped.keys.size), "compiled_call": compiled_call,
            "ranked_compiled": ranked_compiled, "ranked_same_as_eager": ranked_same,
            "no_effects": no_effects, "eager_state_form": int(eager_tb.keys.size),
            "stateless": stateless}


def nixl_dead_owner(process, processes, directory, signal_name, on_dead_shard, wait=0.5,
                    exchange="nixl"):
    """Process 1 is killed (or frozen) after filling its shard; process 0
    keeps sampling one-sidedly and must get an error naming shard 1 within the
    exchange's timeout, or go on without it (on_dead_shard="skip")."""
    import gearjax as gx
    from jax.experimental import multihost_utils
    table = gx.ShardedTable({"x": gx.Column((2,), "int32")}, capacity=16, max_length=12,
                            exchange=exchange, exchange_timeout=2.0, on_dead_shard=on_dead_shard)
    fill(table, process)
    multihost_utils.sync_global_devices("filled")
    table.sample(jax.random.key(0), 8, 4)  # every peer's metadata is loaded now
    # A compiled sample (state form: one FFI call of the native sampler for
    # nixl), traced and run while every shard lives.
    compiled = jax.jit(lambda state, k: table.sample(state, k, 8, 4))
    jax.block_until_ready(compiled(table.state(), jax.random.key(0)))
    multihost_utils.sync_global_devices("warm")
    if process == 1:
        os.kill(os.getpid(), getattr(signal, signal_name))
        time.sleep(60)
        return None
    time.sleep(wait)  # past the heartbeat timeout, JAX aborts survivors unless recoverable
    outcomes = []
    for c in range(4):
        start = time.monotonic()
        try:
            b = table.sample(jax.random.key(c), 8, 4)
            outcomes.append(["ok", sorted(set(np.asarray(b.shard).tolist())),
                             time.monotonic() - start])
        except Exception as e:  # noqa: BLE001
            outcomes.append([type(e).__name__, str(e)[:200], time.monotonic() - start])
    compiled_outcomes = []
    for c in range(3):
        start = time.monotonic()
        try:
            _, b = compiled(table.state(), jax.random.key(c))
            compiled_outcomes.append(["ok", sorted(set(np.asarray(b.shard).tolist())),
                                      time.monotonic() - start])
        except Exception as e:  # noqa: BLE001
            compiled_outcomes.append([type(e).__name__, str(e)[:300],
                                      time.monotonic() - start])
    stats = table.stats()
    print("MULTIHOST-RESULT " + json.dumps({"outcomes": outcomes,
                                            "compiled_outcomes": compiled_outcomes,
                                            "lost": stats.get("lost_shards")}), flush=True)
    os._exit(0)  # the job's other process is gone: skip the distributed shutdown


def main() -> None:
    body, process, processes, port, directory, kwargs = sys.argv[1:7]
    process, processes = int(process), int(processes)
    kwargs = json.loads(kwargs)
    heartbeat = kwargs.pop("heartbeat_timeout_seconds", 100)
    jax.distributed.initialize(f"127.0.0.1:{port}", processes, process,
                               heartbeat_timeout_seconds=heartbeat)
    result = globals()[body](process, processes, directory, **kwargs)
    print("MULTIHOST-RESULT " + json.dumps(result), flush=True)
    jax.distributed.shutdown()


if __name__ == "__main__":
    main()
