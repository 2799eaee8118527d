"""Two (or more) local processes sampling one global gearjax table.

    python scripts/sharded_demo.py            # starts 2 processes on this machine
    python scripts/sharded_demo.py --processes 3

Each process joins one JAX job (jax.distributed, CPU, gloo), fills its own
shard with trajectories of its own (shard k's are k + 1 times longer than
shard 0's, so Timestep draws them k + 1 times as often), then samples the
global table twice: eagerly (every process at the same call), and inside a
jitted ``lax.scan`` under ``jax.shard_map``, where each step also sends new
priorities back to the shards that own the rows. It prints, per process, how
many rows came from each shard against what the global distribution expects.
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys


def say(line: str) -> None:
    """One line in one write, so the processes' lines never interleave."""
    os.write(1, (line + "\n").encode())


def run_process(process: int, processes: int, port: int) -> None:
    import jax
    import numpy as np
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

    jax.distributed.initialize(f"127.0.0.1:{port}", processes, process)
    import gearjax as gx

    table = gx.ShardedTable({"obs": gx.Column((4,), "float32"), "shard": gx.Column((), "int32")},
                            capacity=1000, max_length=200)
    length = 20 * (process + 1)
    for _ in range(100):
        table.insert({"obs": np.random.default_rng(process).standard_normal((length, 4)),
                      "shard": np.full(length, process, np.int32)})
    batch = table.sample(jax.random.key(0), 4096, window=10, strategy=gx.Timestep())
    rows = np.bincount(np.asarray(batch.shard), minlength=processes)
    weights = np.arange(1, processes + 1)
    expected = 4096 * weights / weights.sum()
    say(f"process {process}: {len(table)} trajectories in {processes} shards; an eager sample "
          f"of 4096 rows drew {rows.tolist()} from the shards (expected about "
          f"{expected.round().astype(int).tolist()})")

    mesh = Mesh(np.array(jax.devices()), ("hosts",))

    def train(key):
        # The table state orders the step's table calls: each call takes the
        # state the previous one returned, through the scan's carry.
        def step(carry, k):
            state, count = carry
            state, b = table.sample(state, k, 256, 10, gx.Prioritized(0.6), axis_name="hosts")
            # A learner would compute TD errors here; any positive value will do.
            new_priorities = 1.0 + b["obs"][:, -1, 0] ** 2
            state, _ = table.update_priorities(state, b.keys, new_priorities, axis_name="hosts")
            return (state, count + jax.numpy.bincount(b.shard, length=processes)), None
        carry = (table.state(), jax.numpy.zeros(processes, jax.numpy.int32))
        return jax.lax.scan(step, carry, jax.random.split(key[0], 20))[0][1][None]

    program = jax.jit(jax.shard_map(train, mesh=mesh, in_specs=P("hosts"),
                                    out_specs=P("hosts")))
    keys = jax.make_array_from_process_local_data(
        NamedSharding(mesh, P("hosts")), jax.random.key_data(jax.random.key(process))[None])
    counts = np.asarray(program(keys).addressable_data(0))[0]
    say(f"process {process}: 20 jitted steps of 256 rows inside shard_map drew "
          f"{counts.tolist()} from the shards; this shard applied "
          f"{table.local.stats()['priority_updates']} of the priority updates routed to it")
    table.close()
    jax.distributed.shutdown()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=300.0,
                        help="seconds before every process is killed")
    parser.add_argument("--process", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.process is not None:
        run_process(args.process, args.processes, args.port)
        return 0
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    children = [subprocess.Popen([sys.executable, __file__, "--processes", str(args.processes),
                                  "--process", str(i), "--port", str(port)], env=env)
                for i in range(args.processes)]
    status = 0
    for child in children:
        try:
            status |= child.wait(timeout=args.timeout)
        except subprocess.TimeoutExpired:
            status = 1
    for child in children:
        if child.poll() is None:
            child.kill()
    return status


if __name__ == "__main__":
    sys.exit(main())
