"""Opt-in prefetching for the one-sided exchanges (``sample(...,
prefetch=True)``): while the caller trains on a batch, the next one is read
in the background (Hoplite's pipelining: no barrier, no other process
involved).

A call returns the batch its previous call started reading, if that call
asked for the same thing (batch size, window, strategy, pad), and starts
reading the next one as soon as it has its own. So a prefetched batch is read
while the step in between trains: at most one step old. It may miss inserts
and priority updates made during that step, and nothing older. Its
random words derive from the previous call's key, so a sequence of calls is
as reproducible as the shards' contents are. A call that asks for something
else (or the first call) reads its batch now, with its own key.
"""

from __future__ import annotations

import concurrent.futures
import threading
from collections.abc import Callable, Hashable
from typing import Any

import numpy as np


def next_words(words: np.ndarray) -> np.ndarray:
    """The random words of the batch read ahead after a call with `words`."""
    state = np.random.SeedSequence([int(words[0]), int(words[1]), 0x70726566]).generate_state(2)
    return state.astype(np.uint32)


class Prefetcher:
    """One batch read ahead, by one background thread."""

    def __init__(self, name: str):
        self._pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix=name)
        self._lock = threading.Lock()
        self._ahead: tuple[Hashable, concurrent.futures.Future] | None = None
        self._closed = False
        self.hits = self.misses = 0

    def take(self, request: Hashable, words: np.ndarray,
             draw: Callable[[np.ndarray], Any]) -> Any:
        """The batch for `request`: the one read ahead if it was for the same
        request (its error, if reading it failed), else one read now with
        `words`; then starts reading the next one."""
        with self._lock:
            ahead, self._ahead = self._ahead, None
        if ahead is not None and ahead[0] == request:
            self.hits += 1
            rows = ahead[1].result()
        else:
            if ahead is not None:  # another request's: let it finish (reads share buffers)
                concurrent.futures.wait([ahead[1]])
            self.misses += 1
            rows = draw(words)
        with self._lock:
            if not self._closed:
                self._ahead = (request, self._pool.submit(draw, next_words(words)))
        return rows

    def close(self) -> None:
        """Waits for a read in flight, then stops. Idempotent."""
        with self._lock:
            self._closed = True  # no read is submitted after this
            self._ahead = None
        self._pool.shutdown(wait=True)
