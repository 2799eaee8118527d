"""One-sided NIXL reads between two local processes, by each way gearjax has
had of making them: the native agent the nixl exchange now uses
(gearjax._gearjax.NixlAgent, NIXL's C API, one call with the GIL released),
against NIXL's own Python API doing the same transfer the way the exchange
did before (descriptor lists from NumPy, initialize_xfer, transfer, then
check_xfer_state polled from Python).

    python scripts/bench_nixl_reader.py                      # prints
    python scripts/bench_nixl_reader.py --out benchmarks/results/bench_nixl_reader_cpu.json

An owner process registers a 256 MiB shard and keeps its agent progressing;
the reader process (this one) reads, systems taking turns, each case
``--repeats`` times:

* ``256MiB``: one span of 256 MiB;
* ``1024x4KiB``: 1024 spans of 4 KiB at random places of the shard;
* ``256x1360B``: 256 spans of 1360 bytes (a 20-step window of 17 float32,
  the exchange benchmarks' case A).

Reported: median seconds per read and GB/s, and native / python_api. Then
a snapshot's read (5 spans, 100 KiB: what a sample reads first of each shard)
by the native agent, its transfer made afresh each time against kept and
posted again (``read(..., keep=True)``, what the native sampler does).

Then a whole sample against the read alone: two ``jax.distributed`` processes
hold a nixl ``ShardedTable`` each, all trajectories in process 1's shard, and
process 0 times, taking turns, an eager ``table.sample(key, batch, window)``
(its rows all come from process 1: snapshot, windows, records) and ``read``,
the same number of windows of the same size read from process 1's arena by
the same agent in one call (the transport's own rate, no table logic):

* ``256x1360B``: 256 windows of 20 x 17 float32;
* ``1024x4KiB``: 1024 windows of 16 x 64 float32;
* ``64x4MiB``: 64 windows of 256 x 4096 float32 (256 MiB a sample).

Reported: sample / read as a fraction of the read's rate, and the sample's
round trips and descriptors (as the native sampler counts them). Also the
reader alone: the native sampler's own call (snapshot, descent, windows,
records, redraws, padding; ``gearjax._gearjax.one_sided_sample``) timed
inside the same eager samples, against the read; the rest of an eager
sample is JAX's (the key's words, the rows aliased as JAX arrays, the small
fields in one dispatch). For the two
smaller cases, also seconds per sample inside a jitted ``lax.scan`` of 20
samples (see ``in_jit``): the compiled path (one FFI call a sample),
against the same samples through an ``io_callback`` around the eager sample
(how in-jit one-sided samples ran before the compiled path; results
committed before the native sampler served every strategy ran the Python
sampler there), both with the table state threaded through the scan.
(Results committed before gearjax dropped the stateless compiled form also
have ``compiled_ordered``: the compiled path without a state, ordered by
JAX's ordered effects.)

Over loopback UCX picks shared memory, so these are this machine's numbers,
not a network's. Needs NIXL (``python -m gearjax.sharded.install_nixl``).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _machine import machine_info, write_results  # noqa: E402
from _processes import run_processes  # noqa: E402

SHARD_BYTES = 256 << 20
CASES = {"256MiB": (1, SHARD_BYTES), "1024x4KiB": (1024, 4096), "256x1360B": (256, 1360)}
SCAN_STEPS = 20  # samples per dispatch of the in-jit scans
SAMPLE_CASES = {
    # name: (batch, window, step shape (float32), trajectories in the shard, length)
    "256x1360B": (256, 20, (17,), 2000, 100),
    "1024x4KiB": (1024, 16, (64,), 512, 64),
    "64x4MiB": (64, 256, (4096,), 80, 256),
}


def configure(smoke: bool) -> None:
    """--smoke: a few small cases (what tests/test_scripts.py runs)."""
    global SHARD_BYTES, CASES, SAMPLE_CASES, SCAN_STEPS
    if smoke:
        SHARD_BYTES = 4 << 20
        CASES = {"4MiB": (1, SHARD_BYTES), "64x4KiB": (64, 4096)}
        SAMPLE_CASES = {"32x1360B": (32, 20, (17,), 64, 40)}
        SCAN_STEPS = 4


def owner(conn, smoke: bool) -> None:
    """Registers the shard, sends its metadata and address, progresses until told."""
    configure(smoke)
    from gearjax.sharded import nixl
    agent = nixl.nixl_api()("bench-owner")
    shard = np.random.default_rng(0).integers(0, 256, SHARD_BYTES, dtype=np.uint8)
    agent.register(shard.ctypes.data, shard.nbytes)
    conn.send((agent.metadata(), shard.ctypes.data))
    while not conn.poll(0.0005):
        agent.notifications()
    agent.close()


def spans(case: str, base: int, into: int, rng) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    n, size = CASES[case]
    offsets = np.zeros(1, np.int64) if n == 1 else \
        rng.integers(0, SHARD_BYTES - size, n) // 64 * 64
    remote = (base + offsets).astype(np.uint64)
    local = (into + np.arange(n) * size).astype(np.uint64)
    return remote, local, np.full(n, size, np.uint64)


# A sample's snapshot read of one shard: three sum-tree levels, the shard's
# size, its slot records (xla_ffi/core/one_sided/one_sided.h's read plan).
SNAPSHOT_SIZES = (128, 2048, 32768, 8, 65536)


def kept_against_made(native, peer: str, base: int, into, rng, repeats: int) -> dict:
    """The snapshot's read by the native agent, its transfer made afresh
    every time (keep=False) against kept and posted again (keep=True), taking
    turns; checks the kept one was posted again."""
    sizes = np.array(SNAPSHOT_SIZES, np.uint64)
    remote = (base + rng.integers(0, SHARD_BYTES - int(sizes.max()), len(sizes)) // 64 * 64)
    remote = remote.astype(np.uint64)
    local = (into.ctypes.data + np.concatenate([[0], np.cumsum(sizes)[:-1]])).astype(np.uint64)
    times = {"made": [], "kept": []}
    before = native.transfers()["reposted"]
    for i in range(repeats + 1):
        for name in ("made", "kept"):
            start = time.perf_counter()
            failed, why = native.read([(peer, remote, local, sizes)], 30.0, keep=name == "kept")
            elapsed = time.perf_counter() - start
            if failed >= 0:
                raise RuntimeError(why)
            if i:  # the first of each warms up
                times[name].append(elapsed)
    assert native.transfers()["reposted"] - before == repeats, native.transfers()
    medians = {name: float(np.median(t)) for name, t in times.items()}
    line = (f"snapshot {len(sizes)} spans ({int(sizes.sum())} B): made each time "
            f"{medians['made'] * 1e6:7.1f} us | kept {medians['kept'] * 1e6:7.1f} us | "
            f"made / kept {medians['made'] / medians['kept']:.2f}")
    return {"spans": len(sizes), "bytes": int(sizes.sum()), "median_seconds": medians,
            "made_over_kept": medians["made"] / medians["kept"], "line": line}


def sample_child(process: int, port: int, repeats: int) -> dict:
    """One of the two processes of the sample benchmark (see the docstring)."""
    import jax
    import numpy as np
    jax.distributed.initialize(f"127.0.0.1:{port}", 2, process)
    from jax.experimental import multihost_utils

    import gearjax as gx
    from gearjax import _gearjax as gearjax_native
    out = {}
    for name, (batch, window, shape, count, length) in SAMPLE_CASES.items():
        table = gx.ShardedTable({"x": gx.Column(shape, "float32")}, capacity=count,
                                max_length=length, exchange="nixl")
        if process == 1:
            rng = np.random.default_rng(0)
            for _ in range(count):
                table.insert({"x": rng.random((length, *shape), np.float32)})
        multihost_utils.sync_global_devices(f"{name}-filled")
        if process == 0:
            transport = table._transport
            layout = transport._peer_layout(1, 0, 0.0)
            step_bytes = 4 * int(np.prod(shape))
            rng = np.random.default_rng(1)
            slots = rng.integers(0, count, batch)
            starts = rng.integers(0, length - window + 1, batch)
            addresses = (layout["arena"] + (slots * length + starts) * step_bytes).astype(np.uint64)
            sizes = np.full(batch, window * step_bytes, np.int64)
            counted = {"round_trips": 0, "descriptors": 0}
            inner = transport._read_remote

            def counting(requests):
                counted["round_trips"] += 1
                counted["descriptors"] += sum(len(r[1]) for r in requests.values())
                inner(requests)

            calls = {"sample": lambda r: jax.block_until_ready(
                         table.sample(jax.random.key(r), batch, window)),
                     "read": lambda r: transport.fetch({1: (addresses, sizes)}, "bench")}
            for call in calls.values():
                call(0)
            transport._read_remote = counting
            calls["sample"](0)
            transport._read_remote = inner
            if getattr(transport, "native_counts", None):  # the native sampler counts its own
                counted["round_trips"], counted["descriptors"] = transport.native_counts
            times = {n: [] for n in calls}
            times["reader"] = []  # the native sampler's own call, inside the timed samples
            native_sample = gearjax_native.one_sided_sample

            def timed_reader(*args):
                start = time.perf_counter()
                try:
                    return native_sample(*args)
                finally:
                    times["reader"].append(time.perf_counter() - start)

            gearjax_native.one_sided_sample = timed_reader
            for r in range(repeats):
                for n, call in calls.items():
                    start = time.perf_counter()
                    call(r + 1)
                    times[n].append(time.perf_counter() - start)
            gearjax_native.one_sided_sample = native_sample
            if not times["reader"]:
                del times["reader"]
            medians = {n: float(np.median(t)) for n, t in times.items()}
            payload = int(sizes.sum())
            out[name] = {"batch": batch, "window_bytes": int(sizes[0]), "bytes": payload,
                         "median_seconds": medians,
                         "gb_per_s": {n: payload / t / 1e9 for n, t in medians.items()},
                         "sample_over_read": medians["read"] / medians["sample"], **counted}
            if "reader" in medians:
                out[name]["reader_over_read"] = medians["read"] / medians["reader"]
            if payload <= 8 << 20:
                out[name]["in_jit_seconds_per_sample"] = in_jit(table, transport, batch, window,
                                                                repeats)
        multihost_utils.sync_global_devices(f"{name}-done")
        table.close()
    jax.distributed.shutdown()
    return out


def in_jit(table, transport, batch: int, window: int, repeats: int) -> dict:
    """Seconds per sample inside a jitted lax.scan of SCAN_STEPS samples (each
    summed, so none is dropped): ``compiled_state`` (one FFI call a step,
    ordered by the table state) and ``io_callback`` (the same samples, the
    same state, through a host callback around the eager sample: how every
    in-jit one-sided sample ran before the compiled path). Systems take
    turns."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    def scan():
        def run(key):
            def step(state, k):
                state, b = table.sample(state, k, batch, window)
                return state, b["x"].sum(dtype=jnp.float32)
            return jax.lax.scan(step, table.state(), jax.random.split(key, SCAN_STEPS))[1]
        return jax.jit(run)

    programs = {"compiled_state": scan()}
    compiles = transport._compiles
    transport._compiles = False  # traced now: the io_callback path
    programs["io_callback"] = scan()
    jax.block_until_ready(programs["io_callback"](jax.random.key(0)))
    transport._compiles = compiles
    for name, program in programs.items():
        if name != "io_callback":
            jax.block_until_ready(program(jax.random.key(0)))
    times = {n: [] for n in programs}
    for r in range(max(5, repeats // 3)):
        for name, program in programs.items():
            start = time.perf_counter()
            jax.block_until_ready(program(jax.random.key(r + 1)))
            times[name].append((time.perf_counter() - start) / SCAN_STEPS)
    return {n: float(np.median(t)) for n, t in times.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--out", default=None)
    parser.add_argument("--child", nargs=2, type=int, help=argparse.SUPPRESS)
    parser.add_argument("--smoke", action="store_true",
                        help="a few small cases, to check the script runs")
    args = parser.parse_args(argv)
    configure(args.smoke)
    if args.child:
        print(json.dumps(sample_child(*args.child, args.repeats)), flush=True)
        return 0
    from gearjax.sharded import nixl
    try:
        new_agent = nixl.nixl_api()
    except ValueError as e:
        print(f"bench_nixl_reader: {e}", file=sys.stderr)
        return 1
    from nixl_cu12._api import nixl_agent, nixl_agent_config

    ctx = mp.get_context("spawn")
    here, there = ctx.Pipe()
    process = ctx.Process(target=owner, args=(there, args.smoke), daemon=True)
    process.start()
    metadata, base = here.recv()
    shard = np.random.default_rng(0).integers(0, 256, SHARD_BYTES, dtype=np.uint8)  # the owner's
    native = new_agent("bench-reader")
    into = np.zeros(SHARD_BYTES, np.uint8)
    native.register(into.ctypes.data, into.nbytes)
    peer = native.load_peer(metadata)
    python = nixl_agent("bench-reader-python", nixl_agent_config(enable_prog_thread=False,
                                                                 backends=["UCX"]))
    into_python = np.zeros(SHARD_BYTES, np.uint8)
    python.register_memory([(into_python.ctypes.data, into_python.nbytes, 0, "")], "DRAM")
    python_peer = python.add_remote_agent(metadata)

    def read_native(remote, local, sizes):
        failed, why = native.read([(peer, remote, local, sizes)], 30.0)
        if failed >= 0:
            raise RuntimeError(why)

    def read_python(remote, local, sizes):
        # The exchange's read before the native agent (gearjax/sharded/nixl.py
        # up to 71832db), one shard.
        zeros = np.zeros(len(sizes), np.uint64)
        r = np.stack([remote, sizes, zeros], 1)
        loc = np.stack([local - np.uint64(into.ctypes.data) + np.uint64(into_python.ctypes.data),
                        sizes, zeros], 1)
        handle = python.initialize_xfer("READ", python.get_xfer_descs(loc, "DRAM"),
                                        python.get_xfer_descs(r, "DRAM"), python_peer)
        state = python.transfer(handle)
        while state != "DONE":
            if state == "ERR":
                raise RuntimeError("transfer failed")
            time.sleep(0.00005)
            state = python.check_xfer_state(handle)
        python.release_xfer_handle(handle)

    systems = {"native": read_native, "python_api": read_python}
    rng = np.random.default_rng(1)
    results, lines = {}, []
    for case in CASES:
        remote, local, sizes = spans(case, base, into.ctypes.data, rng)
        payload = int(sizes.sum())
        for read in systems.values():  # warm: connections, registrations
            read(remote, local, sizes)
        for r, l, n in zip(remote.tolist(), local.tolist(), sizes.tolist()):  # both read right
            got = slice(l - into.ctypes.data, l - into.ctypes.data + n)
            assert np.array_equal(into[got], shard[r - base:r - base + n]), case
            assert np.array_equal(into_python[got], shard[r - base:r - base + n]), case
        times = {name: [] for name in systems}
        for _ in range(args.repeats):
            for name, read in systems.items():
                start = time.perf_counter()
                read(remote, local, sizes)
                times[name].append(time.perf_counter() - start)
        medians = {name: float(np.median(t)) for name, t in times.items()}
        results[case] = {"spans": len(sizes), "bytes": payload,
                         "median_seconds": medians,
                         "gb_per_s": {n: payload / t / 1e9 for n, t in medians.items()},
                         "native_over_python_api": medians["python_api"] / medians["native"]}
        line = " | ".join(f"{n} {t * 1e6:9.1f} us {payload / t / 1e9:6.2f} GB/s"
                          for n, t in medians.items())
        lines.append(f"{case:10s} {line} | native "
                     f"{results[case]['native_over_python_api']:.2f}x python_api")
        print(lines[-1], flush=True)
    snapshot = kept_against_made(native, peer, base, into, rng, args.repeats)
    lines.append(snapshot.pop("line"))
    print(lines[-1], flush=True)
    here.send("stop")
    process.join(10)
    native.close()
    samples = run_processes(__file__, 2, lambda i, port: [
        "--child", str(i), str(port), "--repeats", str(args.repeats),
        *(["--smoke"] if args.smoke else [])], timeout=1200)[0]
    for case, r in samples.items():
        first = len(lines)
        if "in_jit_seconds_per_sample" in r:
            t = r["in_jit_seconds_per_sample"]
            lines.append(f"in jit {case:10s} " + " | ".join(
                f"{n} {v * 1e6:9.1f} us" for n, v in t.items()) +
                f" | io_callback / compiled_state {t['io_callback'] / t['compiled_state']:.2f}")
        lines.append(f"sample {case:10s} sample {r['median_seconds']['sample'] * 1e6:9.1f} us "
                     f"{r['gb_per_s']['sample']:6.2f} GB/s | read "
                     f"{r['median_seconds']['read'] * 1e6:9.1f} us {r['gb_per_s']['read']:6.2f} "
                     f"GB/s | sample {r['sample_over_read']:.2f} of read | "
                     f"{r['round_trips']} round trips, {r['descriptors']} descriptors")
        if "reader_over_read" in r:
            lines.append(f"reader {case:10s} native sampler alone "
                         f"{r['median_seconds']['reader'] * 1e6:9.1f} us | "
                         f"{r['reader_over_read']:.2f} of read")
        print("\n".join(lines[first:]), flush=True)
    if args.out:
        write_results(args.out, {"machine": machine_info(("nixl-cu12",)), "repeats": args.repeats,
                                 "reads": results, "snapshot": snapshot, "samples": samples},
                      "\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
