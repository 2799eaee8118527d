"""Timing forms of one workload against each other on a noisy machine (shared
by the benchmark scripts): each form once a round, in a shuffled order, so a
slow phase of the machine hits them alike."""

from __future__ import annotations

import random
import time
from collections.abc import Callable


def take_turns(forms: dict[str, Callable | object], rounds: int,
               warmup: int = 20) -> dict[str, list[float]]:
    """name -> seconds per call over `rounds` rounds (each callable form once
    a round, in a shuffled order, its result blocked on), after `warmup`
    untimed rounds. Forms that are not callable (a reason they were skipped)
    are left out."""
    import jax
    live = {n: f for n, f in forms.items() if callable(f)}
    times: dict[str, list[float]] = {n: [] for n in live}
    order = list(live)
    shuffle = random.Random(0).shuffle
    for r in range(warmup + rounds):
        shuffle(order)
        for name in order:
            begin = time.perf_counter()
            jax.block_until_ready(live[name](r))
            if r >= warmup:
                times[name].append(time.perf_counter() - begin)
    return times
