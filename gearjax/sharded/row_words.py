"""One collective for a row's small fields: of the fields an owner serves for
each row (key, start, probability, table size, valid count and each column's
window), the small ones packed side by side into one array of unsigned
words, moved once, and unpacked bit for bit.

Why: the xla exchange moves each round's rows by an all-to-all (CPU: gloo,
GPU: NCCL) and puts them in order by a gather. Done field by field, that is
one collective and one gather per field in every branch of the compiled
exchange (a branch per block size): at P = 3, B = 512 and one column, 84
all-to-alls in one program, each a round trip of its own when it runs and
more code for XLA to compile. Packed, a round is one all-to-all and one
gather for the small fields together, and one for each large window; the
fields are unpacked once, after the last round (:class:`Layout`).

Only small fields are packed: at most :data:`PACK_ROW_BYTES` a row (the
five fields every sample has, 28 bytes, and columns such as a reward or a
done flag over a short window). Packing copies each packed byte twice, in
and out, and for a large window that costs more than the collective it
saves: packed, 64 windows of 20 steps of 64x64x3 uint8 moved between two
processes at a quarter of the rate they move alone
(benchmarks/results/bench_exchange_pack_all_r*_cpu.txt, against
bench_exchange_pack_none_r1 and r2). A field is packed when
its bits can come back by ``lax.bitcast_convert_type`` (bool through uint8,
int64 without x64 through the ``int64_from_words`` custom call); the rest
(large fields, complex ones, and other 64-bit ones where JAX has x64 off)
each move alone. The word is the widest of uint32, uint16 and uint8 whose
size divides every packed field's bytes per row, so no field is padded.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from gearjax import _ffi

_WORDS = (np.dtype(np.uint32), np.dtype(np.uint16), np.dtype(np.uint8))

# The most bytes a row of a packed field holds (see the module docstring).
PACK_ROW_BYTES = 128


def _x64() -> bool:
    """Whether JAX has 64-bit types now (also inside ``jax.enable_x64(...)``)."""
    return jax.dtypes.canonicalize_dtype(np.int64) == np.int64


def packable(dtype: np.dtype) -> bool:
    """Whether a field of this dtype can travel as words and come back bit for bit."""
    dtype = np.dtype(dtype)
    if dtype.kind == "c" or dtype.itemsize not in (1, 2, 4, 8):
        return False
    return dtype.itemsize < 8 or _x64() or dtype == np.int64


def _row_bytes(x: jax.ShapeDtypeStruct | jax.Array) -> int:
    return math.prod(x.shape[1:]) * np.dtype(x.dtype).itemsize


def word_for(fields: Sequence[jax.ShapeDtypeStruct | jax.Array]) -> np.dtype:
    """The widest word whose size divides every field's bytes per row."""
    return next(w for w in _WORDS if all(_row_bytes(x) % w.itemsize == 0 for x in fields))


def to_words(x: jax.Array, word: np.dtype) -> jax.Array:
    """``x`` [R, ...] as [R, row bytes / word size] words (its bits unchanged)."""
    rows = x.shape[0]
    if x.dtype == np.bool_:
        x = x.astype(np.uint8)
    size, width = np.dtype(x.dtype).itemsize, word.itemsize
    flat = x.reshape(rows, -1)
    if size < width:  # several elements to a word
        flat = flat.reshape(rows, -1, width // size)
    return lax.bitcast_convert_type(flat, word).reshape(rows, -1)


def from_words(words: jax.Array, dtype: np.dtype, shape: tuple[int, ...]) -> jax.Array:
    """The inverse of :func:`to_words`: [R, m] words to [R, *shape] of ``dtype``."""
    rows, dtype = words.shape[0], np.dtype(dtype)
    target = np.dtype(np.uint8) if dtype == np.bool_ else dtype
    size, width = target.itemsize, words.dtype.itemsize
    if size == 8 and not _x64():  # int64 (packable()): from its two uint32 words
        if width < 4:
            words = lax.bitcast_convert_type(words.reshape(rows, -1, 4 // width), np.uint32)
        x = _ffi.int64_from_words(words.reshape(rows, -1, 2))
    elif size > width:  # several words to an element
        x = lax.bitcast_convert_type(words.reshape(rows, -1, size // width), target)
    else:
        x = lax.bitcast_convert_type(words, target)
    x = x.reshape(rows, *shape)
    return x.astype(np.bool_) if dtype == np.bool_ else x


@dataclasses.dataclass(frozen=True)
class Layout:
    """Where each field of a row travels: ``together`` lists the fields
    packed into the words (in order), the rest move alone. Made once per
    compiled exchange (:meth:`of`), from the fields' dtypes and shapes."""

    fields: tuple[tuple[np.dtype, tuple[int, ...]], ...]  # each field's dtype, shape past rows
    together: tuple[int, ...]
    word: np.dtype

    @classmethod
    def of(cls, fields: Sequence[jax.ShapeDtypeStruct | jax.Array]) -> Layout:
        together = tuple(i for i, x in enumerate(fields)
                         if packable(x.dtype) and 0 < _row_bytes(x) <= PACK_ROW_BYTES)
        if len(together) < 2:  # nothing to gain
            together = ()
        word = word_for([fields[i] for i in together])
        return cls(tuple((np.dtype(x.dtype), tuple(x.shape[1:])) for x in fields), together,
                   word)

    def pack(self, fields: Sequence[jax.Array]) -> tuple[jax.Array, ...]:
        """The parts that travel: the words ``[R, m]`` (if any field is
        packed), then each field that moves alone, in order."""
        alone = tuple(x for i, x in enumerate(fields) if i not in self.together)
        if not self.together:
            return alone
        words = jnp.concatenate([to_words(fields[i], self.word) for i in self.together], axis=1)
        return (words, *alone)

    def unpack(self, parts: Sequence[jax.Array]) -> tuple[jax.Array, ...]:
        """The fields again, from the parts (moved: any number of rows)."""
        parts = list(parts)
        words = parts.pop(0) if self.together else None
        out, offset = [], 0
        for i, (dtype, shape) in enumerate(self.fields):
            if i not in self.together:
                out.append(parts.pop(0))
                continue
            count = math.prod(shape) * dtype.itemsize // self.word.itemsize
            out.append(from_words(words[:, offset:offset + count], dtype, shape))
            offset += count
        return tuple(out)
