"""Timing forms of one workload against each other on a noisy machine (shared
by the benchmark scripts): each form in turn every round, in a shuffled
order, so a slow phase of the machine hits them alike."""

from __future__ import annotations

import random
import time
from collections.abc import Callable


def take_turns(forms: dict[str, Callable | object], rounds: int,
               warmup: int = 20, run: int = 1) -> dict[str, list[float]]:
    """name -> seconds per call, ``rounds`` per form (each callable form's
    turn once a round, in a shuffled order, its results blocked on), after
    `warmup` untimed rounds. Forms that are not callable (a reason they were
    skipped) are left out.

    ``run`` > 1 makes a turn ``run`` calls in a row, the first of which is
    not timed: what a loop calling one form over and over pays, without the
    aftermath of another form's call (on a 2-core machine, a jitted call
    leaves XLA's worker threads and the caches busy with its program); the
    call index passed on counts every call. ``run=1`` times a form's every
    call right after another form's."""
    import jax
    live = {n: f for n, f in forms.items() if callable(f)}
    times: dict[str, list[float]] = {n: [] for n in live}
    order = list(live)
    shuffle = random.Random(0).shuffle
    timed_per_turn = max(1, run - 1)
    turns = warmup + -(-rounds // timed_per_turn)
    for r in range(turns):
        shuffle(order)
        for name in order:
            for c in range(run):
                begin = time.perf_counter()
                jax.block_until_ready(live[name](r * run + c))
                if r >= warmup and (run == 1 or c > 0) and len(times[name]) < rounds:
                    times[name].append(time.perf_counter() - begin)
    return times
