"""The many-device exchange check of tests/test_exchange_blocks.py, run in its
own process (it needs --xla_force_host_platform_device_count before JAX
starts): P shards of unequal size and mass on P host devices, global samples
through gearjax.sharded.local, every window read back. Prints one JSON line."""

from __future__ import annotations

import json
import sys

import jax
import numpy as np
from jax.extend import core as jax_core

import gearjax as gx
from gearjax.sharded import exchange, local
from gearjax.sharded import keys as keys_of

STRATEGIES = {"uniform": gx.Uniform(), "prioritized": gx.Prioritized(0.7), "topk": gx.TopK(5)}
ROUND_CAP = 8  # the block cap of the rounds check: far below every plan's largest count


def fill(shards: int, seed: int = 0):
    """Shard k holds 3 + 4k trajectories; shard 0's priorities are 10x the
    others'. Each step of trajectory i stores ident(i) * 100 + its timestep."""
    tables = local.shard_tables({"ident": gx.Column((), "int32")}, capacity=64, max_length=12,
                                shards=shards)
    rng = np.random.default_rng(seed)
    shift = keys_of.shard_shift(shards)
    inserted = {}  # global key -> [ident, length, priority]
    for k, table in enumerate(tables):
        for i in range(3 + 4 * k):
            length = int(rng.integers(1, 13))
            priority = float(rng.uniform(0.1, 5.0)) * (10.0 if k == 0 else 1.0)
            ident = k * 100 + i
            key = table.insert({"ident": ident * 100 + np.arange(length, dtype=np.int32)},
                               priority=priority)
            inserted[(k << shift) | key] = [ident, length, priority]
    return tables, inserted, shift


def check_rows(batch, inserted, shift, batch_size, errors):
    """Each row's key, shard and window against what was inserted; returns the
    keys drawn and the counts[requester, shard] of the plan."""
    keys = np.asarray(batch.keys)
    shard = np.asarray(batch.shard)
    ident = np.asarray(batch.columns["ident"])
    mask = np.asarray(batch.mask)
    timestep = np.asarray(batch.timestep)
    probability = np.asarray(batch.probability)
    shards = keys.shape[0] // batch_size
    counts = np.zeros((shards, shards), np.int64)
    for row, key in enumerate(keys.tolist()):
        counts[row // batch_size, shard[row]] += 1
        if key not in inserted:
            errors.append(f"row {row}: unknown key {key}")
            continue
        if key >> shift != shard[row]:
            errors.append(f"row {row}: key {key} is not shard {shard[row]}'s")
        want = inserted[key][0] * 100 + timestep[row]
        if not np.array_equal(ident[row][mask[row]], want[mask[row]]):
            errors.append(f"row {row}: window {ident[row].tolist()} is not key {key}'s")
    return keys.tolist(), probability.tolist(), counts


def ragged_dtypes(jaxpr) -> list[tuple[str, str]]:
    """(operand dtype, output dtype) of every ragged_all_to_all in the jaxpr and
    the jaxprs nested in it."""
    found, stack = [], [jaxpr]
    while stack:
        for eqn in stack.pop().eqns:  # Jaxpr and ClosedJaxpr alike
            if eqn.primitive.name == "ragged_all_to_all":
                found.append((str(eqn.invars[0].aval.dtype), str(eqn.invars[1].aval.dtype)))
            stack.extend(jax_core.jaxprs_in_params(eqn.params))
    return found


def main(shards: int, calls: int, batch_size: int, window: int) -> dict:
    tables, inserted, shift = fill(shards)
    sizes = exchange.block_sizes(batch_size, shards)
    out = {"inserted": {str(k): v for k, v in inserted.items()}, "sizes": list(sizes),
           "strategies": {}, "forced": []}
    errors: list[str] = []
    seeds = iter(jax.random.split(jax.random.key(7), 10_000))

    def next_seeds():
        return np.asarray(jax.random.key_data(jax.random.split(next(seeds), shards)))

    programs = {}
    for name, strategy in STRATEGIES.items():
        program = programs[name] = local.sample_program(tables, batch_size, window, strategy)
        drawn, probabilities = [], {}
        for _ in range(calls):
            keys, probability, _ = check_rows(program(next_seeds()), inserted, shift,
                                              batch_size, errors)
            drawn += keys
            probabilities.update(zip(keys, probability))
        out["strategies"][name] = {"keys": drawn,
                                   "probability": {str(k): p for k, p in probabilities.items()}}

    # Every block size, forced: the block that runs is the smallest size that
    # holds both the forced minimum and the plan's largest count, and every
    # owner counts it.
    program = programs["uniform"]  # min_block is traced: no new compilation
    for min_block in (0, *sizes):
        before = [t._native.exchange_stats() for t in tables]
        _, _, counts = check_rows(program(next_seeds(), min_block), inserted, shift, batch_size,
                                  errors)
        after = [t._native.exchange_stats() for t in tables]
        ran = []
        for b, a in zip(before, after):
            grown = {k: v - b["serves_by_block"].get(k, 0) for k, v in a["serves_by_block"].items()
                     if v != b["serves_by_block"].get(k, 0)}
            ran.append(grown)
        out["forced"].append({
            "min_block": min_block, "need": int(counts.max()), "ran": [
                {str(k): v for k, v in r.items()} for r in ran],
            "rows_asked": [a["rows_asked"] - b["rows_asked"] for a, b in zip(after, before)],
            "asked_of_shard": counts.sum(axis=0).tolist(),
            "rows_sent": [a["rows_sent"] - b["rows_sent"] for a, b in zip(after, before)],
            "bytes_per_row": window * 4})
    # Blocks capped far below the plan's counts: the rows move in rounds.
    program = local.sample_program(tables, batch_size, window, STRATEGIES["prioritized"],
                                   max_block=ROUND_CAP)
    drawn, probabilities, rounds = [], {}, []
    for _ in range(calls):
        before = [t._native.exchange_stats() for t in tables]
        keys, probability, counts = check_rows(program(next_seeds()), inserted, shift,
                                               batch_size, errors)
        after = [t._native.exchange_stats() for t in tables]
        drawn += keys
        probabilities.update(zip(keys, probability))
        rounds.append({
            "need": int(counts.max()),
            "ran": [{str(k): v - b["serves_by_block"].get(k, 0)
                     for k, v in a["serves_by_block"].items()
                     if v != b["serves_by_block"].get(k, 0)} for a, b in zip(after, before)],
            "rows_asked": [a["rows_asked"] - b["rows_asked"] for a, b in zip(after, before)],
            "asked_of_shard": counts.sum(axis=0).tolist(),
            "rows_sent": [a["rows_sent"] - b["rows_sent"] for a, b in zip(after, before)]})
    out["rounds"] = {"cap": ROUND_CAP, "calls": rounds, "keys": drawn,
                     "probability": {str(k): p for k, p in probabilities.items()}}
    # A round's fields travel packed (gearjax/sharded/row_words.py): one
    # all-to-all for each block size of round 0 and one for later rounds.
    blocked = local.sample_program(tables, batch_size, window, gx.Uniform())
    out["blocked_lowering"] = blocked.lower(next_seeds()).as_text().count("all_to_all")
    # The ragged path (GPU and TPU; XLA:CPU has no ragged all-to-all) lowers
    # to one ragged all-to-all a round and no all-to-all of blocks.
    ragged = local.sample_program(tables, batch_size, window, gx.Uniform(), ragged=True)
    text = ragged.lower(next_seeds()).as_text()
    out["ragged_lowering"] = {"ragged": text.count("ragged_all_to_all"),
                              "blocked": text.count("all_to_all") - text.count("ragged_all_to_all")}
    # XLA:CPU cannot run a ragged all-to-all, so what the GPU runs is checked
    # here in its program: each one's operand and output buffer must agree in
    # dtype (int64 keys into an int32 buffer gave garbage keys on a GPU).
    out["ragged_dtypes"] = sorted({f"{operand}->{output}" for operand, output in
                                   ragged_dtypes(jax.make_jaxpr(ragged)(next_seeds()))})
    out["errors"] = errors[:20]
    for table in tables:
        table.close()
    return out


if __name__ == "__main__":
    print(json.dumps(main(*(int(a) for a in sys.argv[1:5]))))
