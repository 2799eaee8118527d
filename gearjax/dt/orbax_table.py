"""A gearjax table inside an Orbax checkpoint: the replay saved and restored
in the same ``CheckpointManager`` step as the model and optimizer state, so a
run resumes exactly (training and replay). Comes with the ``rl`` extra, which
brings orbax. Orbax records this module's path in every checkpoint that uses
the handler: it stays here.

::

    import orbax.checkpoint as ocp
    from gearjax.dt.orbax_table import TableRestore, TableSave

    with ocp.CheckpointManager(directory) as manager:
        manager.save(step, args=ocp.args.Composite(
            state=ocp.args.StandardSave(state), table=TableSave(table)))
        manager.wait_until_finished()
        restored = manager.restore(manager.latest_step(), args=ocp.args.Composite(
            state=ocp.args.StandardRestore(abstract_state), table=TableRestore()))
    table = restored["table"]          # a new gx.Table, exactly as saved

The table is written as one ordinary gearjax checkpoint file (``table.gx``:
atomic, checksummed, exact; see gearjax/checkpoint.py) inside the item's
directory, which Orbax commits with the rest of the step. Saving pins the
stored slots while it copies them (inserts that would evict them wait); it
runs in the calling thread, before ``save`` returns.
"""

from __future__ import annotations

import dataclasses
import os

import orbax.checkpoint as ocp

import gearjax as gx

FILE = "table.gx"


class TableHandler(ocp.CheckpointHandler):
    """Saves a gx.Table into an Orbax item directory and restores it."""

    def save(self, directory, args: "TableSave") -> None:
        if not isinstance(args.table, gx.Table):
            raise TypeError(f"TableSave needs a gearjax.Table, got {type(args.table).__name__}")
        args.table.save(os.path.join(os.fspath(directory), FILE))

    def restore(self, directory, args: "TableRestore | None" = None) -> gx.Table:
        placement = args.placement if args is not None else None
        return gx.Table.load(os.path.join(os.fspath(directory), FILE), placement=placement)


@ocp.args.register_with_handler(TableHandler, for_save=True)
@dataclasses.dataclass
class TableSave(ocp.args.CheckpointArgs):
    """Save this table in the step (``ocp.args.Composite(..., table=TableSave(t))``)."""

    table: gx.Table


@ocp.args.register_with_handler(TableHandler, for_restore=True)
@dataclasses.dataclass
class TableRestore(ocp.args.CheckpointArgs):
    """Restore the step's table as a new gx.Table (optionally at another
    placement, as :meth:`gearjax.Table.load`)."""

    placement: str | None = None


def latest_table(directory: str | os.PathLike, placement: str | None = None) -> gx.Table | None:
    """The table of the latest step of an Orbax checkpoint directory that
    saved one under the item name ``table``, or None if there is none."""
    directory = os.path.abspath(directory)
    if not os.path.isdir(directory):
        return None
    with ocp.CheckpointManager(directory) as manager:
        step = manager.latest_step()
        if step is None or "table" not in manager.item_metadata(step):
            return None
        return manager.restore(step, args=ocp.args.Composite(
            table=TableRestore(placement)))["table"]
