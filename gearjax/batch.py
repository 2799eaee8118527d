"""The sampled batch: windows of every column plus where they came from."""

from __future__ import annotations

import dataclasses
from collections.abc import ItemsView, Iterator, ValuesView
from typing import Any

import jax


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class Batch:
    """A batch of ``B`` windows of ``W`` steps. A pytree: it passes through
    ``jit``, ``scan`` and ``vmap`` like any other.

    Attributes:
      columns: column name -> ``[B, W, *shape]`` array; ``batch["obs"]`` works too.
      mask: ``[B, W]`` bool, True on real steps, False on padding.
      timestep: ``[B, W]`` int32 position of each step in its trajectory (0 on padding).
      keys: ``[B]`` int64 key of each row's trajectory.
      start: ``[B]`` int32 first step of each window in its trajectory.
      probability: ``[B]`` float32 probability with which each row's trajectory
        was drawn.
      table_size: ``[B]`` int64 number of trajectories stored when the row was
        drawn. With ``probability``, what prioritized replay's importance
        weights need: ``w = (table_size * probability) ** -beta``, usually
        divided by its maximum (for ``PrioritizedSteps``, whose probability is
        a step's, always: the division removes a factor the batch shares).

    :meth:`gearjax.Table.sample` makes it, of JAX arrays, or of NumPy arrays
    (the same dtypes and shapes) from an eager ``sample(..., numpy=True)``.
    Its columns read like a mapping's:
    ``batch["obs"]``, ``name in batch``, ``batch.get(name)``, ``iter(batch)``
    and ``len(batch)`` (column names), ``batch.items()``, ``batch.values()``.
    But ``batch.keys`` is the trajectory keys (an array, for
    :meth:`gearjax.Table.update_priorities`), not ``dict.keys()``: for the
    column names as a dict's, use ``batch.columns`` (a ``dict``), e.g.
    ``batch.columns.keys()`` or ``dict(batch.columns)``.

    Examples:
      >>> state, batch = table.sample(state, key, 32, window=8)
      >>> batch["obs"].shape  # [B, W, *shape]
      (32, 8, 3)
      >>> loss_mask = batch.mask  # False on padded steps
      >>> w = (batch.table_size * batch.probability) ** -0.4
      >>> w = w / w.max()
    """

    columns: dict[str, jax.Array]
    mask: jax.Array
    timestep: jax.Array
    keys: jax.Array
    start: jax.Array
    probability: jax.Array
    table_size: jax.Array

    def __getitem__(self, name: str) -> jax.Array:
        return self.columns[name]

    def __contains__(self, name: str) -> bool:
        return name in self.columns

    def __iter__(self) -> Iterator[str]:
        return iter(self.columns)

    def __len__(self) -> int:
        return len(self.columns)

    def get(self, name: str, default: Any = None) -> Any:
        return self.columns.get(name, default)

    def items(self) -> ItemsView[str, jax.Array]:
        return self.columns.items()

    def values(self) -> ValuesView[jax.Array]:
        return self.columns.values()

    def _repr_html_(self) -> str:
        """What Jupyter shows: shapes, padding, where the rows came from
        (gearjax/display.py)."""
        from gearjax import display
        return display.batch_html(self)
