"""Benchmark: gearjax against TorchRL's replay buffers, both in one process on
the same data (issue 49, item 4).

    bash scripts/bench_torchrl_setup.sh      # .venv-torchrl: torch 2.13 (CPU), TorchRL, gearjax
    .venv-torchrl/bin/python scripts/bench_torchrl.py [--quick] [--sizes 1e6,1e7]
        [--calls 500] [--budget 60] [--scan-steps 100] [--run 20]
        [--out benchmarks/results/bench_torchrl_cpu.json] [--gpu-only]

Episodes of 1,000 steps (obs float32[17], action float32[6], reward float32,
and two int32 columns that say where each step came from: ``episode`` and
``step``), generated once and given to both libraries: TorchRL a TensorDict
per episode (``ReplayBuffer.extend`` into a ``LazyTensorStorage``), gearjax a
dict of NumPy arrays per episode (``table.insert`` into a host table of 1,000
steps a slot). ``--sizes`` are numbers of stored steps (default 10^6 and 10^7).
The rows, median ms per call:

1. ``uniform``: 256 windows of 20 steps that never cross an episode end.
   TorchRL ``SliceSampler(slice_len=20, traj_key="episode")`` (strict_length,
   the default) against gearjax ``Uniform`` with ``cut="full"``.
2. ``prioritized``: the same windows by priority, and an update of the
   priorities the sample touched. TorchRL ``PrioritizedSliceSampler(alpha,
   beta)`` then ``update_priority`` of the 5,120 sampled steps (it keeps a
   priority per step); gearjax ``Prioritized(alpha)``, ``cut="full"``, then
   ``update_priorities`` of the 256 sampled trajectories (it keeps one priority
   per trajectory today). Both start from the same priorities: each episode's
   (uniform in [0.1, 2]) on every one of its steps in TorchRL, so the first
   draws of both follow the same distribution.
3. ``per_step``: prioritized windows by per-step priorities, as TorchRL's
   ``PrioritizedSliceSampler`` keeps them. TorchRL's side is row 2's; gearjax's
   is a table of the same episodes made with ``step_priorities=True`` (each
   step starting at its episode's priority, as in TorchRL),
   ``PrioritizedSteps(alpha)``, ``cut="full"``, then ``update_priorities`` of
   the 5,120 sampled steps (``steps=batch.timestep``: a ``cut="full"``
   window is never padded, so there is no mask to apply; a ``jnp.where`` of
   mask and timesteps would also take the update-only program past XLA's CPU
   client's bound for running on the calling thread, scripts/bench_eager.py's
   ``jitted-where``), as TorchRL updates them.
4. ``transitions``: prioritized transitions, batch 256, and the update of
   their priorities: TorchRL ``PrioritizedSampler`` on a storage of N
   transitions against gearjax's transitions recipe (docs/concepts/
   transitions.md: a table of ``max_length=1``, ``window=1``,
   ``Prioritized(alpha)``, ``update_priorities``).
5. ``insert``: one 1,000-step episode, TorchRL ``extend`` against gearjax
   ``table.insert``, over the whole fill of row 1's buffers from empty to N
   steps (the fill cost per episode).

TorchRL's number is the fastest of the configurations timed: for the windows
rows its shipped configuration, ``cache_values=True``, and ``cache_values=True``
with one torch intra-op thread; for the transitions row its shipped
configuration with torch's threads and with one. One thread means
``torch.set_num_threads(1)`` around the call, the process's setting restored
after: on the 2-core VM neither is the faster on every row, and runs on a VM
that drifts cannot be compared, so both are timed in the same run.
``--torch-threads`` sets the process's setting (default: torch's own, the
cores). gearjax's forms: ``eager`` (the
stateless call, ``table.sample(key, ...)``), ``eager-numpy`` (the same with
``numpy=True``: NumPy arrays gathered by the native core, no XLA program),
``jitted`` (one ``jax.jit`` call
taking and returning the table state), ``jitted-no-table`` (a jitted call
returning arrays of the jitted call's shapes made in XLA from the key, with no
table call: what any jitted call returning these outputs pays on this
machine, the floor under the jitted form) and ``scan`` (a jitted ``lax.scan`` of
``--scan-steps`` samples, its time divided by that number). Forms take turns
call by call in a shuffled order (scripts/_turns.py), so a noisy machine's slow
phases hit them alike. Each row is timed twice: interleaved, every call right
after another form's (a 100-sample scan, or TorchRL's call), and then in runs
of ``--run`` calls of one form whose first is not timed (``in_runs`` in the
JSON), which is what a loop calling one form pays. On a 2-core VM the two
differ most for short calls: a call after 10 ms of other work finds the
caches and XLA's threads cold. Ratios are TorchRL's median over gearjax's.

Every window is checked, on both sides: before timing, a few samples of every
form (each window's 20 steps of one episode, consecutive, their obs those of
the generated data at that episode and step; gearjax: ``mask`` all True and
``start`` the first step), and in the scan form every window of every timed
sample (episode and step columns, counted inside the scan).

A GPU section (TorchRL's ``PrioritizedSampler`` with its trees on the GPU,
``sampler_device="cuda"``, against a gearjax host table sampled by a jitted
program on the GPU) runs only where torch and JAX both see a CUDA GPU and
TorchRL's extension has its CUDA trees; elsewhere it is skipped, saying why.
``--gpu-only`` runs that section alone: on a lent GPU, ``bash
scripts/gpu_check.sh --stage torchrl`` rebuilds TorchRL's extension with its
CUDA trees against the machine's torch and runs it.
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import time
from pathlib import Path

import numpy as np

# Its helpers beside it, also under python -P (scripts/gpu_check.sh runs it so).
sys.path.insert(0, str(Path(__file__).resolve().parent))
from _machine import machine_info, write_results  # noqa: E402
from _turns import take_turns  # noqa: E402

LENGTH, OBS, ACT = 1000, 17, 6
BATCH, WINDOW = 256, 20
ALPHA, BETA = 0.6, 0.4
STEP_BYTES = (OBS + ACT + 1) * 4 + 2 * 4          # obs, action, reward, episode, step
TRANSITION_BYTES = (2 * OBS + ACT + 1) * 4 + 1 + 4  # obs, next_obs, action, reward, done, t
PACKAGES = ("torch", "torchrl", "tensordict")
GJ_FORMS = ("eager", "eager-numpy", "jitted", "jitted-no-table", "scan")


# ---------------------------------------------------------------------------
# Data, the same for both libraries
# ---------------------------------------------------------------------------


def episodes_data(episodes: int, seed: int) -> dict[str, np.ndarray]:
    """Columns [episodes, LENGTH, ...]: the steps of every episode."""
    rng = np.random.default_rng(seed)
    return {"obs": rng.standard_normal((episodes, LENGTH, OBS), dtype=np.float32),
            "action": rng.standard_normal((episodes, LENGTH, ACT), dtype=np.float32),
            "reward": rng.standard_normal((episodes, LENGTH), dtype=np.float32),
            "episode": np.repeat(np.arange(episodes, dtype=np.int32), LENGTH)
                         .reshape(episodes, LENGTH),
            "step": np.tile(np.arange(LENGTH, dtype=np.int32), (episodes, 1))}


def transitions_data(n: int, seed: int) -> dict[str, np.ndarray]:
    """Columns [n, ...]: one-step transitions, ``t`` their index."""
    rng = np.random.default_rng(seed)
    return {"obs": rng.standard_normal((n, OBS), dtype=np.float32),
            "action": rng.standard_normal((n, ACT), dtype=np.float32),
            "reward": rng.standard_normal(n, dtype=np.float32),
            "next_obs": rng.standard_normal((n, OBS), dtype=np.float32),
            "done": rng.random(n) < 0.001,
            "t": np.arange(n, dtype=np.int32)}


def available_memory() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")


def windows_bytes(steps: int) -> int:
    """What the windows section holds at once: the generated data, TorchRL's
    storage, gearjax's table (the same bytes each), TorchRL's per-step trees
    (two prioritized samplers, a sum and a min tree each, float32 at twice the
    capacity's power of two) and a margin for the samples."""
    trees = 2 * 2 * 2 * (1 << max(steps - 1, 1).bit_length()) * 4
    return 3 * steps * STEP_BYTES + trees + (1 << 30)


def transitions_bytes(n: int) -> int:
    trees = 2 * 2 * (1 << max(n - 1, 1).bit_length()) * 4
    return 3 * n * TRANSITION_BYTES + trees + 64 * n + (1 << 30)


# ---------------------------------------------------------------------------
# Checks: every window 20 consecutive steps of one episode, the data's own
# ---------------------------------------------------------------------------


def window_errors(episode: np.ndarray, step: np.ndarray, obs: np.ndarray,
                  data: dict[str, np.ndarray]) -> list[str]:
    """What is wrong with windows [B, W] (episode, step) and their obs
    [B, W, OBS], against the generated data; empty when nothing."""
    errors = []
    if episode.shape != (BATCH, WINDOW):
        errors.append(f"shape {episode.shape}, not {(BATCH, WINDOW)}")
        return errors
    if not (episode == episode[:, :1]).all():
        errors.append(f"{int((~(episode == episode[:, :1]).all(1)).sum())} windows mix episodes")
    if not (np.diff(step, axis=1) == 1).all():
        errors.append(f"{int((~(np.diff(step, axis=1) == 1).all(1)).sum())} windows "
                      f"are not consecutive steps")
    if not np.array_equal(obs, data["obs"][episode, step]):
        errors.append("obs differ from the data at the windows' (episode, step)")
    return errors


def check_torchrl_windows(td, data) -> list[str]:
    episode = td["episode"].numpy().reshape(-1, WINDOW)
    step = td["step"].numpy().reshape(-1, WINDOW)
    obs = td["obs"].numpy().reshape(-1, WINDOW, OBS)
    return window_errors(episode, step, obs, data)


def check_gearjax_windows(batch, data) -> list[str]:
    episode = np.asarray(batch["episode"])
    step = np.asarray(batch["step"])
    errors = window_errors(episode, step, np.asarray(batch["obs"]), data)
    if not np.asarray(batch.mask).all():
        errors.append("padded steps in a cut='full' batch")
    if not np.array_equal(np.asarray(batch.start), step[:, 0]):
        errors.append("start is not the first step")
    return errors


def bad_windows_jax(batch):
    """The number of windows in a gearjax batch that are not 20 consecutive
    steps of one episode (inside jit, for the scan form)."""
    import jax.numpy as jnp
    episode, step = batch["episode"], batch["step"]
    ok = ((episode == episode[:, :1]).all(1) & (jnp.diff(step, axis=1) == 1).all(1)
          & batch.mask.all(1))
    return (~ok).sum(dtype=jnp.int32)


def check_transitions(t: np.ndarray, obs: np.ndarray, data) -> list[str]:
    t = t.reshape(-1)
    errors = []
    if t.shape != (BATCH,):
        return [f"{t.shape[0]} rows, not {BATCH}"]
    if not np.array_equal(obs.reshape(BATCH, OBS), data["obs"][t]):
        errors.append("obs differ from the data at the rows' index")
    return errors


# ---------------------------------------------------------------------------
# gearjax forms
# ---------------------------------------------------------------------------


def gearjax_forms(table, keys, step, steps: int, bad_rows) -> dict:
    """eager / eager-numpy / jitted / jitted-no-table / scan forms of one workload.
    step(state_or_None, key, numpy=False) -> (state, out) does the work once:
    with a state, the state form (for jit and scan); with None, the stateless
    eager calls (numpy: the sample with numpy=True); out holds the "batch"
    (and the update's "count"). Each form returns what to block on. The scan
    adds up one obs entry of every row (so that XLA keeps the sample) and
    bad_rows(batch), the rows that fail the check, which the scan form keeps
    in its `bad_counts` list."""
    import jax
    import jax.numpy as jnp

    jitted = jax.jit(lambda state, key: step(state, key))
    jit_state = [table.state()]

    def call_jitted(i):
        jit_state[0], out = jitted(jit_state[0], keys[i % len(keys)])
        return out

    def run_scan(state, key):
        def body(carry, k):
            state, total, bad = carry
            state, out = step(state, k)
            batch = out["batch"]
            return (state, total + batch["obs"][:, :, 0].sum(), bad + bad_rows(batch)), None
        (state, total, bad), _ = jax.lax.scan(
            body, (state, jnp.float32(0), jnp.int32(0)), jax.random.split(key, steps))
        return state, (total, bad)

    scanned = jax.jit(run_scan)
    scan_state = [table.state()]
    bad_counts = []

    def call_scan(i):
        scan_state[0], (total, bad) = scanned(scan_state[0], keys[i % len(keys)])
        bad_counts.append(bad)
        return total, bad

    call_scan.bad_counts = bad_counts
    _, shapes = jax.eval_shape(step, table.state(), keys[0])
    no_table = jax.jit(lambda state, key: (state, outputs_like(shapes, key)))
    no_table_state = [table.state()]

    def call_no_table(i):
        no_table_state[0], out = no_table(no_table_state[0], keys[i % len(keys)])
        return out

    return {"eager": lambda i: step(None, keys[i % len(keys)])[1],
            "eager-numpy": lambda i: step(None, keys[i % len(keys)], numpy=True)[1],
            "jitted": call_jitted, "jitted-no-table": call_no_table, "scan": call_scan}


def outputs_like(shapes, key):
    """Arrays of `shapes`' shapes and dtypes filled in XLA with a word of
    `key` (so the program has an input), no table call. 64-bit dtypes become
    their 32-bit kin where JAX runs without x64, as JAX itself makes none."""
    import jax
    import jax.numpy as jnp
    word = jax.random.key_data(key).ravel()[-1]
    return jax.tree.map(
        lambda s: jnp.full(s.shape, word, jax.dtypes.canonicalize_dtype(s.dtype)), shapes)


def bad_transitions_jax(batch):
    """Rows of a window=1 batch that are padding (inside jit, for the scan)."""
    import jax.numpy as jnp
    return (~batch.mask.all(1)).sum(dtype=jnp.int32)


def uniform_step(table):
    def step(state, key, numpy=False):
        if state is None:
            return None, {"batch": table.sample(key, BATCH, WINDOW, cut="full", numpy=numpy)}
        state, batch = table.sample(state, key, BATCH, WINDOW, cut="full")
        return state, {"batch": batch}
    return step


def prioritized_step(table, priorities: np.ndarray, window: int):
    """Prioritized(ALPHA) sample (windows: cut="full") and the update of the
    sampled trajectories' priorities to `priorities` [BATCH]."""
    import gearjax as gx
    import jax.numpy as jnp
    strategy = gx.Prioritized(ALPHA)
    cut = "full" if window > 1 else "start"
    device_priorities = jnp.asarray(priorities)

    def step(state, key, numpy=False):
        if state is None:
            batch = table.sample(key, BATCH, window, strategy, cut=cut, numpy=numpy)
            return None, {"batch": batch, "count": table.update_priorities(batch.keys, priorities)}
        state, batch = table.sample(state, key, BATCH, window, strategy, cut=cut)
        state, count = table.update_priorities(state, batch.keys, device_priorities)
        return state, {"batch": batch, "count": count}
    return step


def per_step_step(table, priorities: np.ndarray):
    """PrioritizedSteps(ALPHA) windows (cut="full") and the update of the
    sampled steps' priorities to `priorities` [BATCH, WINDOW]: every step of
    a full window is real, so the windows' timesteps name the steps."""
    import gearjax as gx
    import jax.numpy as jnp
    strategy = gx.PrioritizedSteps(ALPHA)
    device_priorities = jnp.asarray(priorities)

    def step(state, key, numpy=False):
        if state is None:
            batch = table.sample(key, BATCH, WINDOW, strategy, cut="full", numpy=numpy)
            return None, {"batch": batch, "count": table.update_priorities(
                batch.keys, priorities, steps=batch.timestep)}
        state, batch = table.sample(state, key, BATCH, WINDOW, strategy, cut="full")
        state, count = table.update_priorities(state, batch.keys, device_priorities,
                                               steps=batch.timestep)
        return state, {"batch": batch, "count": count}
    return step


def per_step_window_forms(table, keys, steps: int, seed: int) -> str | dict:
    """gearjax's side of the per-step prioritized windows row (its forms, on
    `table`, made with step_priorities=True), or why it is skipped (a gearjax
    without step priorities, `table` None)."""
    if table is None:
        return "skipped: this gearjax keeps one priority per trajectory"
    priorities = np.random.default_rng(seed + 3).uniform(0.1, 2.0, (BATCH, WINDOW))
    return gearjax_forms(table, keys, per_step_step(table, priorities.astype(np.float32)),
                         steps, bad_windows_jax)


# ---------------------------------------------------------------------------
# TorchRL buffers
# ---------------------------------------------------------------------------


def torchrl_slice_buffer(storage, prioritized: bool, cache_values: bool, steps: int):
    from torchrl.data import (PrioritizedSliceSampler, ReplayBuffer, SliceSampler)
    kwargs = {"slice_len": WINDOW, "traj_key": "episode", "cache_values": cache_values}
    sampler = (PrioritizedSliceSampler(steps, ALPHA, BETA, **kwargs) if prioritized
               else SliceSampler(**kwargs))
    return ReplayBuffer(storage=storage, sampler=sampler, batch_size=BATCH * WINDOW)


# ---------------------------------------------------------------------------
# Timing
# ---------------------------------------------------------------------------


class Busy:
    """What other processes did to the machine while a row was timed: from
    /proc/stat's busy time of all cores less this process's CPU time."""

    def __init__(self):
        self.wall, self.busy, self.own = time.perf_counter(), self._busy(), self._own()

    @staticmethod
    def _busy() -> float:
        fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
        user, nice, system, idle, iowait, irq, softirq, steal = map(int, fields[:8])
        return (user + nice + system + irq + softirq) / os.sysconf("SC_CLK_TCK")

    @staticmethod
    def _own() -> float:
        t = os.times()
        return t.user + t.system

    def others(self) -> dict:
        """Seconds of wall time, and the cores other processes kept busy on
        average over it (0: a quiet machine; 1: one core of the two)."""
        wall = time.perf_counter() - self.wall
        others = (self._busy() - self.busy) - (self._own() - self.own)
        return {"wall_s": wall, "cores_busy": max(others, 0.0) / max(wall, 1e-9)}


def rounds_for(forms: dict, calls: int, budget_s: float, min_rounds: int) -> int:
    """Rounds that fit `budget_s` seconds, from one untimed call of each form
    (after the checks, so compiled already); between min_rounds and calls."""
    import jax
    begin = time.perf_counter()
    for form in forms.values():
        if callable(form):
            jax.block_until_ready(form(0))
    per_round = time.perf_counter() - begin
    return int(max(min_rounds, min(calls, budget_s / max(per_round, 1e-9))))


def summarise(times: list[float], divide: int = 1) -> dict:
    t = np.asarray(times) / divide
    return {"median_ms": float(np.median(t) * 1e3), "p10_ms": float(np.quantile(t, 0.1) * 1e3),
            "p90_ms": float(np.quantile(t, 0.9) * 1e3), "calls": len(t)}


def summarised(torchrl: dict, gearjax: dict | str, times: dict, scan_steps: int) -> dict:
    """Medians of one timing of a row: TorchRL's configurations, its faster
    one, and gearjax's forms with TorchRL's time over theirs."""
    out = {"torchrl": {n: summarise(times[f"torchrl {n}"]) for n in torchrl}}
    best = min(out["torchrl"], key=lambda n: out["torchrl"][n]["median_ms"])
    out["torchrl_best"] = best
    reference = np.asarray(times[f"torchrl {best}"])
    if isinstance(gearjax, str):
        out["gearjax"] = {"status": "skipped", "reason": gearjax}
        return out
    out["gearjax"] = {}
    for n in gearjax:
        divide = scan_steps if n == "scan" else 1
        s = summarise(times[f"gearjax {n}"], divide)
        s["torchrl_over_gearjax"] = out["torchrl"][best]["median_ms"] / s["median_ms"]
        s["torchrl_over_gearjax_paired"] = float(np.median(
            reference[:len(times[f"gearjax {n}"])] / (np.asarray(times[f"gearjax {n}"]) / divide)))
        out["gearjax"][n] = s
    return out


def timed_row(torchrl: dict, gearjax: dict | str, args, scan_steps: int) -> dict:
    """Times every form of a row (TorchRL configurations and gearjax forms)
    taking turns, twice: interleaved, call by call (the row's top-level
    figures), then in runs of RUN calls of one form (``in_runs``). Picks
    TorchRL's faster configuration in each; ratios per form."""
    forms = {f"torchrl {n}": f for n, f in torchrl.items()}
    if isinstance(gearjax, dict):
        forms |= {f"gearjax {n}": f for n, f in gearjax.items()}
    rounds = rounds_for(forms, args.calls, args.budget, args.min_calls)
    load_start, busy = os.getloadavg(), Busy()
    times = take_turns(forms, rounds, warmup=min(20, max(3, rounds // 10)))
    row = {"rounds": rounds, **summarised(torchrl, gearjax, times, scan_steps)}
    if args.run > 1:
        in_runs = take_turns(forms, rounds, warmup=1, run=args.run)
        row["in_runs"] = {"run": args.run, **summarised(torchrl, gearjax, in_runs, scan_steps)}
    row["load_average"] = [load_start, os.getloadavg()]
    row["others_cpu"] = busy.others()
    if isinstance(gearjax, dict) and "scan" in gearjax:
        bad = int(sum(int(b) for b in getattr(gearjax["scan"], "bad_counts", [])))
        row["scan_windows_checked"] = len(gearjax["scan"].bad_counts) * scan_steps * BATCH
        row["scan_bad_windows"] = bad
        if bad:
            raise AssertionError(f"{bad} windows sampled in the scan are not 20 consecutive "
                                 f"steps of one episode")
    return row


def verify(name: str, errors: list[str], checks: dict) -> None:
    checks[name] = errors or "ok"
    if errors:
        raise AssertionError(f"{name}: {'; '.join(errors)}")


def verify_gearjax_forms(label: str, forms: dict, check, args, checks: dict) -> None:
    """Runs each of gearjax's forms but the scan (which checks every window it
    samples itself) args.checks times and verifies its batch by check(batch)
    (the no-table form's arrays are no sample: run, not checked); then forgets
    what the scan counted meanwhile (before timing)."""
    for name, form in forms.items():
        for i in range(args.checks):
            out = form(i)
            if name not in ("scan", "jitted-no-table"):
                batch = out["batch"] if isinstance(out, dict) else out
                verify(f"{label} gearjax {name}", check(batch), checks)
    forms["scan"].bad_counts.clear()


# ---------------------------------------------------------------------------
# Sections
# ---------------------------------------------------------------------------


def windows_section(steps: int, args, keys) -> dict:
    import gearjax as gx
    import torch
    from tensordict import TensorDict
    from torchrl.data import LazyTensorStorage

    episodes = steps // LENGTH
    print(f"windows at N={steps:.0e} steps ({episodes} episodes): generating data", flush=True)
    data = episodes_data(episodes, args.seed)
    priority = np.random.default_rng(args.seed + 1).uniform(0.1, 2.0, episodes)
    tds = [TensorDict({k: torch.from_numpy(v[e]) for k, v in data.items()}, batch_size=[LENGTH])
           for e in range(episodes)]
    trajectories = [{k: v[e] for k, v in data.items()} for e in range(episodes)]

    storage = LazyTensorStorage(steps)
    uniform_default = torchrl_slice_buffer(storage, False, False, steps)
    table = gx.Table({"obs": gx.Column((OBS,), "float32"), "action": gx.Column((ACT,), "float32"),
                      "reward": gx.Column((), "float32"), "episode": gx.Column((), "int32"),
                      "step": gx.Column((), "int32")},
                     capacity=episodes, max_length=LENGTH, placement="host")
    result = {"steps": steps, "episodes": episodes, "checks": {}}
    checks = result["checks"]

    # Row 5, insert: the whole fill, episode by episode, the two taking turns.
    print("  insert: filling both, one episode each a round", flush=True)
    warmup = min(20, episodes // 5)
    fill = {"torchrl extend": quiet(lambda r: uniform_default.extend(tds[r])),
            "gearjax insert": lambda r: table.insert(trajectories[r], priority=float(priority[r]))}
    load_start, busy = os.getloadavg(), Busy()
    begin = time.perf_counter()
    times = take_turns(fill, episodes - warmup, warmup=warmup)
    fill_s = time.perf_counter() - begin
    result["insert"] = {"rounds": episodes - warmup, "fill_seconds_both": fill_s,
                        "load_average": [load_start, os.getloadavg()],
                        "others_cpu": busy.others(),
                        "torchrl": {"extend": summarise(times["torchrl extend"])},
                        "gearjax": {"insert": summarise(times["gearjax insert"])}}
    result["insert"]["gearjax"]["insert"]["torchrl_over_gearjax"] = (
        result["insert"]["torchrl"]["extend"]["median_ms"]
        / result["insert"]["gearjax"]["insert"]["median_ms"])
    assert len(storage) == steps and table.stats()["size"] == episodes, \
        (len(storage), table.stats())

    # The other TorchRL buffers read the same storage; the prioritized ones get
    # every step's priority set to its episode's (gearjax's insert priority).
    uniform_cached = torchrl_slice_buffer(storage, False, True, steps)
    step_priority = torch.from_numpy(np.repeat(priority, LENGTH).astype(np.float32))
    prioritized = {}
    for name, cache in (("default", False), ("cache_values", True)):
        rb = torchrl_slice_buffer(storage, True, cache, steps)
        rb.update_priority(torch.arange(steps), step_priority)
        prioritized[name] = rb

    # Row 1: uniform windows.
    print("  uniform windows: checking, then timing", flush=True)
    uniform = {"default": uniform_default, "cache_values": uniform_cached}
    for name, rb in uniform.items():
        for _ in range(args.checks):
            verify(f"uniform torchrl {name}", check_torchrl_windows(rb.sample(), data), checks)
    g_uniform = gearjax_forms(table, keys, uniform_step(table), args.scan_steps, bad_windows_jax)
    verify_gearjax_forms("uniform", g_uniform, lambda b: check_gearjax_windows(b, data), args,
                         checks)
    t_uniform = {n: lambda i, rb=rb: rb.sample() for n, rb in uniform.items()}
    t_uniform["cache_values (1 thread)"] = one_thread(t_uniform["cache_values"])
    result["uniform"] = timed_row({n: quiet(c) for n, c in t_uniform.items()},
                                  blockable(g_uniform), args, args.scan_steps)
    print(report_row("uniform", result["uniform"]), flush=True)

    # Row 2: prioritized windows and the update of their priorities.
    print("  prioritized windows + update: checking, then timing", flush=True)
    rng = np.random.default_rng(args.seed + 2)
    torch_priorities = torch.from_numpy(rng.uniform(0.1, 2.0, BATCH * WINDOW).astype(np.float32))
    gj_priorities = rng.uniform(0.1, 2.0, BATCH).astype(np.float32)

    def torchrl_per(rb):
        def call(i):
            td, info = rb.sample(return_info=True)
            rb.update_priority(info["index"], torch_priorities)
            return td
        return call

    t_per = {n: torchrl_per(rb) for n, rb in prioritized.items()}
    for name, call in t_per.items():
        for i in range(args.checks):
            verify(f"prioritized torchrl {name}", check_torchrl_windows(call(i), data), checks)
    t_per["cache_values (1 thread)"] = one_thread(t_per["cache_values"])
    g_per = gearjax_forms(table, keys, prioritized_step(table, gj_priorities, WINDOW),
                          args.scan_steps, bad_windows_jax)
    verify_gearjax_forms("prioritized", g_per, lambda b: check_gearjax_windows(b, data), args,
                         checks)
    result["prioritized"] = timed_row(
        {n: quiet(c) for n, c in t_per.items()}, blockable(g_per), args, args.scan_steps)
    print(report_row("prioritized", result["prioritized"]), flush=True)

    # Row 3: per-step prioritized windows, on a table of the same episodes that
    # keeps a priority per step (made apart: a trajectory update on it writes
    # every step, which row 2 must not pay).
    step_table = None
    if hasattr(gx, "PrioritizedSteps"):
        step_table = gx.Table(table.columns, capacity=episodes, max_length=LENGTH,
                              placement="host", step_priorities=True)
        for e in range(episodes):
            step_table.insert(trajectories[e], priority=float(priority[e]))
    per_step = per_step_window_forms(step_table, keys, args.scan_steps, args.seed)
    if not isinstance(per_step, str):
        verify_gearjax_forms("per-step", per_step, lambda b: check_gearjax_windows(b, data), args,
                             checks)
    if isinstance(per_step, str):
        result["per_step"] = {"torchrl": "the prioritized row's PrioritizedSliceSampler",
                              "gearjax": {"status": "skipped", "reason": per_step}}
    else:
        result["per_step"] = timed_row(
            {n: quiet(c) for n, c in t_per.items()}, blockable(per_step), args,
            args.scan_steps)
    print(f"  per-step prioritized windows: gearjax {per_step if isinstance(per_step, str) else 'timed'}",
          flush=True)
    if step_table is not None:
        step_table.close()

    table.close()
    return result


def transitions_section(n: int, args, keys) -> dict:
    import gearjax as gx
    import torch
    from tensordict import TensorDict
    from torchrl.data import LazyTensorStorage, PrioritizedSampler, ReplayBuffer

    print(f"transitions at N={n:.0e}: generating data and filling both", flush=True)
    data = transitions_data(n, args.seed + 3)
    priority = np.random.default_rng(args.seed + 4).uniform(0.1, 2.0, n).astype(np.float32)
    rb = ReplayBuffer(storage=LazyTensorStorage(n), sampler=PrioritizedSampler(n, ALPHA, BETA),
                      batch_size=BATCH)
    table = gx.Table({"obs": gx.Column((OBS,), "float32"), "action": gx.Column((ACT,), "float32"),
                      "reward": gx.Column((), "float32"), "next_obs": gx.Column((OBS,), "float32"),
                      "done": gx.Column((), "bool"), "t": gx.Column((), "int32")},
                     capacity=n, max_length=1, placement="host")
    chunk = 100_000
    fill = {"torchrl": 0.0, "gearjax": 0.0}
    for begin in range(0, n, chunk):
        part = {k: v[begin:begin + chunk] for k, v in data.items()}
        t0 = time.perf_counter()
        index = rb.extend(TensorDict({k: torch.from_numpy(v) for k, v in part.items()},
                                     batch_size=[len(part["t"])]))
        rb.update_priority(index, torch.from_numpy(priority[begin:begin + chunk]))
        t1 = time.perf_counter()
        table.insert_batch({k: v[:, None] for k, v in part.items()},
                           np.ones(len(part["t"]), np.int32), priority[begin:begin + chunk])
        fill["torchrl"] += t1 - t0
        fill["gearjax"] += time.perf_counter() - t1
    assert len(rb) == n and table.stats()["size"] == n
    result = {"transitions": n, "fill_seconds": fill, "checks": {}}
    checks = result["checks"]

    rng = np.random.default_rng(args.seed + 5)
    torch_priorities = torch.from_numpy(rng.uniform(0.1, 2.0, BATCH).astype(np.float32))
    gj_priorities = rng.uniform(0.1, 2.0, BATCH).astype(np.float32)

    def torchrl_call(i):
        td, info = rb.sample(return_info=True)
        rb.update_priority(info["index"], torch_priorities)
        return td

    for _ in range(args.checks):
        td = torchrl_call(0)
        verify("transitions torchrl", check_transitions(td["t"].numpy(), td["obs"].numpy(), data),
               checks)
    g_forms = gearjax_forms(table, keys, prioritized_step(table, gj_priorities, 1),
                            args.scan_steps, bad_transitions_jax)
    verify_gearjax_forms(
        "transitions", g_forms,
        lambda b: check_transitions(np.asarray(b["t"]), np.asarray(b["obs"]), data), args, checks)
    print("  prioritized transitions + update: timing", flush=True)
    result["prioritized"] = timed_row(
        {"default": quiet(torchrl_call), "default (1 thread)": quiet(one_thread(torchrl_call))},
        blockable(g_forms), args, args.scan_steps)
    print(report_row("transitions", result["prioritized"]), flush=True)
    table.close()
    return result


def gpu_section(args, keys) -> dict:
    """TorchRL's PrioritizedSampler with its trees on the GPU against a gearjax
    host table sampled by a jitted program on the GPU (GPU selection for
    Prioritized with window=1): prioritized transitions + update, batch 256.
    Runs only where both see a CUDA GPU and TorchRL's extension has its CUDA
    trees; returns why not otherwise."""
    import jax
    import torch
    reasons = []
    if not torch.cuda.is_available():
        reasons.append("torch sees no CUDA GPU (torch.cuda.is_available() is False)")
    if not any(d.platform == "gpu" for d in jax.devices()):
        reasons.append(f"JAX sees no GPU (devices: {[str(d) for d in jax.devices()]})")
    try:
        import torchrl._torchrl as ext
        if not hasattr(ext, "CudaSumSegmentTreeFp32"):
            reasons.append("TorchRL's extension has no CUDA segment trees (built without CUDA; "
                           "scripts/bench_torchrl_setup.sh builds the CPU trees only, "
                           "scripts/gpu_check.sh --stage torchrl the CUDA ones)")
    except ImportError as e:
        reasons.append(f"TorchRL's extension does not load: {e}")
    if reasons:
        return {"status": "skipped", "reason": "; ".join(reasons)}
    import gearjax as gx
    from tensordict import TensorDict
    from torchrl.data import LazyTensorStorage, PrioritizedSampler, ReplayBuffer
    n = args.gpu_transitions
    data = transitions_data(n, args.seed + 6)
    priority = np.random.default_rng(args.seed + 7).uniform(0.1, 2.0, n).astype(np.float32)
    rb = ReplayBuffer(storage=LazyTensorStorage(n),
                      sampler=PrioritizedSampler(n, ALPHA, BETA, device="cuda"), batch_size=BATCH)
    table = gx.Table({"obs": gx.Column((OBS,), "float32"), "action": gx.Column((ACT,), "float32"),
                      "reward": gx.Column((), "float32"), "next_obs": gx.Column((OBS,), "float32"),
                      "done": gx.Column((), "bool"), "t": gx.Column((), "int32")},
                     capacity=n, max_length=1, placement="host")
    for begin in range(0, n, 100_000):
        part = {k: v[begin:begin + 100_000] for k, v in data.items()}
        index = rb.extend(TensorDict({k: torch.from_numpy(v) for k, v in part.items()},
                                     batch_size=[len(part["t"])]))
        rb.update_priority(index, torch.from_numpy(priority[begin:begin + 100_000]))
        table.insert_batch({k: v[:, None] for k, v in part.items()},
                           np.ones(len(part["t"]), np.int32), priority[begin:begin + 100_000])
    torch_priorities = torch.rand(BATCH, device="cuda") + 0.1
    gj_priorities = np.random.default_rng(0).uniform(0.1, 2.0, BATCH).astype(np.float32)

    def torchrl_call(i):
        td, info = rb.sample(return_info=True)
        rb.update_priority(info["index"], torch_priorities)
        td = td.to("cuda", non_blocking=True)
        torch.cuda.synchronize()

    forms = gearjax_forms(table, keys, prioritized_step(table, gj_priorities, 1), args.scan_steps,
                          bad_transitions_jax)
    result = {"status": "ok", "transitions": n, "devices": [str(d) for d in jax.devices()],
              "torch_device": torch.cuda.get_device_name(0),
              "table_memory": table.stats().get("memory")}
    result["prioritized"] = timed_row(
        {"cuda trees": torchrl_call}, blockable(forms), args, args.scan_steps)
    table.close()
    return result


def one_thread(call):
    """A TorchRL form with one torch intra-op thread: torch.set_num_threads(1)
    before the call, the process's setting restored after (both timed with
    the call)."""
    import torch

    def run(i):
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            return call(i)
        finally:
            torch.set_num_threads(threads)
    return run


def quiet(call):
    """A TorchRL form: its result (tensors on the CPU, ready) is not handed to
    jax.block_until_ready."""
    return lambda i: (call(i), None)[1]


def blockable(forms: dict) -> dict:
    """gearjax forms for take_turns: the eager and jitted forms return one
    array of their batch (its keys) to block on, the scan form (with its
    bad_counts) its two results. Every result of one XLA program becomes
    ready at once, and an eager call returns once its results are ready
    (the update's count included), so blocking on one waits for the whole
    call; handing jax.block_until_ready the whole batch walked its pytree
    every call, which TorchRL's forms, whose results are not blocked on,
    did not pay."""
    return {n: f if n == "scan" else (lambda i, f=f: f(i)["batch"].keys)
            for n, f in forms.items()}


# ---------------------------------------------------------------------------
# Report
# ---------------------------------------------------------------------------


def report_row(title: str, row: dict) -> str:
    t = row["torchrl"]
    best = row["torchrl_best"]
    lines = [f"  {title}: TorchRL " + ", ".join(
        f"{n} {s['median_ms']:.3f}" + ("*" if n == best else "") for n, s in t.items()) + " ms"]
    g = row["gearjax"]
    if g.get("status") == "skipped":
        lines.append(f"    gearjax {g['reason']}")
    else:
        lines.append("    gearjax " + ", ".join(
            f"{n} {s['median_ms']:.3f} ms (x{s['torchrl_over_gearjax']:.1f})" for n, s in g.items()))
    return "\n".join(lines)


def fmt_cell(s: dict | None) -> str:
    if not s:
        return ""
    return f"{s['median_ms']:.3f} (x{s['torchrl_over_gearjax']:.1f})"


TITLES = {"uniform": "256 windows of 20 (SliceSampler / Uniform, cut='full')",
          "prioritized": "prioritized windows + update (PrioritizedSliceSampler / "
                         "Prioritized + update_priorities, one priority per trajectory)",
          "per_step": "per-step prioritized windows + update (PrioritizedSliceSampler / "
                      "per-step priorities)",
          "transitions": "prioritized transitions + update, batch 256 (PrioritizedSampler / "
                         "transitions recipe)"}


def sample_table(result: dict, timing: str | None) -> list[str]:
    """The report's table of the sample rows: the interleaved figures (timing
    None) or each row's ``timing`` ("in_runs"), where the run has it."""
    lines = ["| workload | N | TorchRL | gearjax eager | gearjax eager, numpy=True | "
             "gearjax jitted call | jitted, no table (the floor) | "
             "gearjax in lax.scan (per sample) |",
             "|---|---|---|---|---|---|---|---|"]
    rows = [(key, size, section, section.get(key)) for key in ("uniform", "prioritized", "per_step")
            for size, section in result["windows"].items()]
    rows += [("transitions", size, section, section.get("prioritized"))
             for size, section in result["transitions"].items()]
    for key, size, section, row in rows:
        title = TITLES[key]
        if "skipped" in section:
            lines.append(f"| {title} | {size} | skipped: {section['skipped']} | | | | | |")
            continue
        if key == "per_step" and "rounds" not in row:
            t = section["prioritized"] if timing is None else section["prioritized"].get(timing)
            if t is not None:
                lines.append(f"| {title} | {size} | "
                             f"{t['torchrl'][t['torchrl_best']]['median_ms']:.3f}"
                             f" | {row['gearjax']['reason']} | | | | |")
            continue
        timed = row if timing is None else row.get(timing)
        if timed is None:
            continue
        t = timed["torchrl"][timed["torchrl_best"]]["median_ms"]
        best = f" ({timed['torchrl_best']})"
        lines.append(f"| {title} | {size} | {t:.3f}{best} | "
                     + " | ".join(fmt_cell(timed["gearjax"].get(f)) for f in GJ_FORMS) + " |")
    return lines


def report(result: dict) -> str:
    m, c = result["machine"], result["config"]
    lines = [f"bench_torchrl: {m['cpu_model']}, {m['cores']} cores, "
             f"{m['total_memory_bytes'] / 2**30:.0f} GiB, python {m['python']}, "
             + ", ".join(f"{p} {v}" for p, v in m["versions"].items())
             + f"; commit {m.get('commit')}, gearjax built from {m.get('gearjax_built_from')}",
             f"episodes of {LENGTH} steps (obs float32[{OBS}], action float32[{ACT}], reward, "
             f"episode and step int32); {BATCH} windows of {WINDOW} (cut='full' / strict_length), "
             f"alpha {ALPHA}, beta {BETA}; median ms per call, TorchRL/gearjax in brackets; "
             f"TorchRL: the fastest configuration timed, named in brackets (its shipped one, "
             f"'default'; cache_values=True; '(1 thread)': torch.set_num_threads(1) around the "
             f"call, else {c.get('torch_threads', '?')} threads); "
             f"scan: per sample, {c['scan_steps']} samples a dispatch"
             + (" [--quick: a smoke test, not a measurement]" if c["quick"] else "")]
    if result["windows"] or result["transitions"]:  # not --gpu-only
        lines += [""] + cpu_report(result)
    lines.append("load average (1, 5, 15 min) at start and end: "
                 f"{result['load_average_start']} -> {result['load_average_end']}")
    gpu = result["gpu"]
    if gpu["status"] == "skipped":
        lines.append(f"GPU section: {gpu['reason']}")
    else:
        lines.append(f"GPU section ({', '.join(gpu['devices'])}; torch: {gpu['torch_device']}; "
                     f"{gpu['transitions']:,} transitions):")
        lines.append(report_row("prioritized transitions + update, interleaved",
                                gpu["prioritized"]))
        if "in_runs" in gpu["prioritized"]:
            lines.append(report_row(f"the same in runs of {c['run']}",
                                    gpu["prioritized"]["in_runs"]))
    return "\n".join(lines)


def cpu_report(result: dict) -> list[str]:
    """The CPU sections' tables and what was checked and how busy the machine was."""
    m, c = result["machine"], result["config"]
    lines = sample_table(result, None)
    for size, section in result["windows"].items():
        if "skipped" in section:
            continue
        row = section["insert"]
        lines.append(f"| insert, per 1,000-step episode (extend / table.insert, the fill to N) | "
                     f"{size} | {row['torchrl']['extend']['median_ms']:.3f} | "
                     f"{fmt_cell(row['gearjax']['insert'])} | | | | |")
    if c.get("run", 1) > 1:
        lines += ["", f"In runs of {c['run']} calls of one form, the first not timed (what a loop "
                      f"calling one form pays; above, every call follows another form's):", ""]
        lines += sample_table(result, "in_runs")
    lines.append("")
    lines.append("TorchRL configurations (median ms): " + "; ".join(
        f"{key} {size}: " + ", ".join(f"{n} {s['median_ms']:.3f}"
                                      for n, s in section[key]["torchrl"].items())
        for size, section in result["windows"].items() if "skipped" not in section
        for key in ("uniform", "prioritized")) + "".join(
        f"; transitions {size}: " + ", ".join(f"{n} {s['median_ms']:.3f}"
                                              for n, s in section["prioritized"]["torchrl"].items())
        for size, section in result["transitions"].items() if "skipped" not in section))
    lines.append("windows checked: " + ", ".join(
        f"{size}: {sum(v == 'ok' for v in s['checks'].values())} sampled forms ok before timing, "
        + ", ".join(f"{k} scan {s[k]['scan_windows_checked']} windows ({s[k]['scan_bad_windows']} bad)"
                    for k in ("uniform", "prioritized"))
        for size, s in result["windows"].items() if "skipped" not in s))
    busy = [f"{key} {size} {section[key]['others_cpu']['cores_busy']:.2f}"
            for size, section in result["windows"].items() if "skipped" not in section
            for key in ("insert", "uniform", "prioritized", "per_step")
            if "others_cpu" in section[key]]
    busy += [f"transitions {size} {section['prioritized']['others_cpu']['cores_busy']:.2f}"
             for size, section in result["transitions"].items() if "skipped" not in section]
    lines.append("cores other processes kept busy, on average over each row (of "
                 f"{m['cores']}; 0 is a quiet machine): " + ", ".join(busy))
    return lines


def provenance() -> dict:
    """The repository's commit, and which sources the gearjax measured was built
    from (scripts/bench_torchrl_setup.sh writes that beside its environment)."""
    import subprocess
    out = {}
    try:
        out["commit"] = subprocess.run(["git", "rev-parse", "--short", "HEAD"], text=True,
                                       capture_output=True, check=True,
                                       cwd=Path(__file__).parent).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        out["commit"] = None
    stamp = Path(sys.prefix) / "gearjax-built"
    out["gearjax_built_from"] = stamp.read_text().strip() if stamp.exists() else None
    return out


def parse_sizes(text: str) -> list[int]:
    return [int(float(s)) for s in text.split(",") if s.strip()]


def label(n: int) -> str:
    exponent = int(round(np.log10(n)))
    return f"10^{exponent}" if 10 ** exponent == n else f"{n:,}"


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default=None,
                        help="stored steps for the windows rows, comma-separated "
                             "(default 1e6,1e7; --quick: 1e5)")
    parser.add_argument("--transition-sizes", default=None,
                        help="stored transitions for the transitions row (default 1e6,1e7; "
                             "--quick: 1e5)")
    parser.add_argument("--calls", type=int, default=None,
                        help="most timed rounds per row (default 500; --quick: 10)")
    parser.add_argument("--min-calls", type=int, default=None,
                        help="fewest timed rounds per row (default 30; --quick: 5)")
    parser.add_argument("--budget", type=float, default=None,
                        help="seconds of timed rounds a row aims at, per timing (each row is "
                             "timed interleaved and in runs: twice that; default 60; "
                             "--quick: 2)")
    parser.add_argument("--scan-steps", type=int, default=None,
                        help="samples per scan dispatch (default 100; --quick: 5)")
    parser.add_argument("--run", type=int, default=None,
                        help="calls in a row of one form in the second timing of each row, "
                             "the first not timed (default 20; --quick: 3; 1: only the "
                             "interleaved timing)")
    parser.add_argument("--checks", type=int, default=3,
                        help="checked samples per form before timing")
    parser.add_argument("--gpu-transitions", type=lambda t: int(float(t)), default=None,
                        help="transitions in the GPU section (default 1e7; --quick: 1e5)")
    parser.add_argument("--torch-threads", type=int, default=None,
                        help="torch's intra-op threads (torch.set_num_threads; default: "
                             "torch's own, the cores)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--gpu-only", action="store_true",
                        help="only the GPU section (scripts/gpu_check.sh --stage torchrl); "
                             "exits 1 where it cannot run, its results saying why")
    parser.add_argument("--quick", action="store_true",
                        help="small tables and few calls: a smoke test, not a measurement")
    parser.add_argument("--out", default="benchmarks/results/bench_torchrl_cpu.json")
    args = parser.parse_args(argv)
    quick = args.quick
    sizes = parse_sizes(args.sizes or ("1e5" if quick else "1e6,1e7"))
    transition_sizes = parse_sizes(args.transition_sizes or ("1e5" if quick else "1e6,1e7"))
    if args.gpu_only:
        sizes, transition_sizes = [], []
    args.calls = args.calls or (10 if quick else 500)
    args.min_calls = args.min_calls or (5 if quick else 30)
    args.budget = args.budget if args.budget is not None else (2.0 if quick else 60.0)
    args.scan_steps = args.scan_steps or (5 if quick else 100)
    args.run = args.run if args.run is not None else (3 if quick else 20)
    if args.run < 1:
        parser.error(f"--run: {args.run} is not a positive number of calls")
    if args.torch_threads is not None and args.torch_threads < 1:
        parser.error(f"--torch-threads: {args.torch_threads} is not a positive number of threads")
    args.gpu_transitions = args.gpu_transitions or (10**5 if quick else 10**7)
    for n in sizes:
        if n % LENGTH or n < 2 * LENGTH:
            parser.error(f"--sizes: {n} is not a multiple of {LENGTH} of at least {2 * LENGTH}")

    import jax
    import torch
    torch.manual_seed(args.seed)
    if args.torch_threads is not None:
        torch.set_num_threads(args.torch_threads)
    keys = [jax.random.key(k) for k in range(64)]
    began = time.perf_counter()
    result = {"config": {"sizes": sizes, "transition_sizes": transition_sizes,
                         "calls": args.calls, "min_calls": args.min_calls, "budget_s": args.budget,
                         "scan_steps": args.scan_steps, "checks": args.checks, "quick": quick,
                         "run": args.run, "gpu_only": args.gpu_only,
                         "length": LENGTH, "obs": OBS, "action": ACT, "batch": BATCH,
                         "window": WINDOW, "alpha": ALPHA, "beta": BETA, "seed": args.seed,
                         "torch_threads": torch.get_num_threads()},
              "machine": machine_info(PACKAGES, **provenance()),
              "load_average_start": os.getloadavg(),
              "windows": {}, "transitions": {}}
    for n in sizes:
        need, have = windows_bytes(n), available_memory()
        if need > have:
            result["windows"][label(n)] = {"skipped": f"needs about {need / 2**30:.1f} GiB, "
                                                      f"{have / 2**30:.1f} GiB available"}
            print(f"windows at N={n:.0e}: {result['windows'][label(n)]['skipped']}", flush=True)
            continue
        result["windows"][label(n)] = windows_section(n, args, keys)
        gc.collect()  # the section's buffers, table and data
    for n in transition_sizes:
        need, have = transitions_bytes(n), available_memory()
        if need > have:
            result["transitions"][label(n)] = {"skipped": f"needs about {need / 2**30:.1f} GiB, "
                                                          f"{have / 2**30:.1f} GiB available"}
            print(f"transitions at N={n:.0e}: {result['transitions'][label(n)]['skipped']}",
                  flush=True)
            continue
        result["transitions"][label(n)] = transitions_section(n, args, keys)
        gc.collect()
    result["gpu"] = gpu_section(args, keys)
    print(f"GPU section: {result['gpu'].get('reason', 'ran')}", flush=True)
    result["memory_needed_gib"] = {
        "windows_1e8_steps": windows_bytes(10**8) / 2**30,
        "transitions_1e8": transitions_bytes(10**8) / 2**30}
    result["load_average_end"] = os.getloadavg()
    result["seconds"] = time.perf_counter() - began
    text = report(result)
    print(text)
    write_results(args.out, result, text)
    if args.gpu_only and result["gpu"]["status"] != "ok":
        sys.exit(f"bench_torchrl: --gpu-only, and the GPU section did not run: "
                 f"{result['gpu']['reason']}")
    return result


if __name__ == "__main__":
    main()
