"""A pure NumPy reference for what a sampled row must contain, and helpers that
build self-describing trajectories."""

from __future__ import annotations

import numpy as np

import gearjax as gx


def expected_window(trajectory: dict[str, np.ndarray], columns: dict[str, gx.Column],
                    start: int, window: int, pad: str,
                    valid: int | None = None) -> dict[str, np.ndarray]:
    """The row the table must return for this trajectory and start: columns,
    plus 'mask' and 'timestep'. `valid` real steps from `start` on (default:
    cut at the trajectory's end, as cut="start" does)."""
    length = len(next(iter(trajectory.values())))
    if valid is None:
        valid = min(window, length - start)
    offset = window - valid if pad == "left" else 0
    row = {}
    for name, column in columns.items():
        out = np.full((window, *column.shape), column.pad, dtype=column.dtype)
        out[offset:offset + valid] = trajectory[name][start:start + valid]
        row[name] = out
    row["mask"] = np.zeros(window, bool)
    row["mask"][offset:offset + valid] = True
    row["timestep"] = np.zeros(window, np.int32)
    row["timestep"][offset:offset + valid] = np.arange(start, start + valid)
    return row


def check_batch(batch: gx.Batch, stored: dict[int, dict[str, np.ndarray]],
                columns: dict[str, gx.Column], window: int, pad: str) -> None:
    """Asserts every row of `batch` equals the reference window of the stored
    trajectory its key names, at its start."""
    keys = np.asarray(batch.keys)
    starts = np.asarray(batch.start)
    for b, (key, start) in enumerate(zip(keys, starts)):
        trajectory = stored[int(key)]
        length = len(next(iter(trajectory.values())))
        assert 0 <= start < length, (key, start, length)
        row = expected_window(trajectory, columns, int(start), window, pad)
        for name in columns:
            np.testing.assert_array_equal(np.asarray(batch[name][b]), row[name],
                                          err_msg=f"row {b} column {name}")
        np.testing.assert_array_equal(np.asarray(batch.mask[b]), row["mask"])
        np.testing.assert_array_equal(np.asarray(batch.timestep[b]), row["timestep"])


def assert_emulated_gpu_sample_equals(table: gx.Table, key, batch: gx.Batch, strategy,
                                      window: int | None, pad: str, threads: int,
                                      cut: str = "start", replace: bool = True,
                                      device_completion: bool = False,
                                      fused: bool = False) -> None:
    """Samples `table` with the GPU kernels' code run on the CPU for the same
    key, and asserts it equals `batch` (what the CPU handler drew for that key)
    field by field: the host selection and the gather kernel
    (emulate_gpu_sample), or with `fused` the one kernel that selects on the
    GPU and gathers (emulate_fused_gpu_sample). With `device_completion`, the
    ticket comes back through the completion ring."""
    from gearjax import _gearjax
    from gearjax._sample import seed_words

    seed = np.asarray(seed_words(key))
    words = (int(seed[0]), int(seed[1]))
    if fused:
        *fixed, columns = _gearjax.testing.emulate_fused_gpu_sample(
            table.handle, words, len(batch.keys), strategy.code, strategy.alpha, window or 0,
            pad == "left", threads, cut=gx.table.CUTS[cut], device_completion=device_completion)
    else:
        *fixed, columns = _gearjax.testing.emulate_gpu_sample(
            table.handle, words, len(batch.keys), strategy.code, strategy.alpha,
            min(strategy.count, table.capacity), window or 0, pad == "left", threads,
            cut=gx.table.CUTS[cut], replace=replace, device_completion=device_completion)
    for name, got in zip(("keys", "start", "probability", "table_size"), fixed):
        np.testing.assert_array_equal(got, getattr(batch, name), err_msg=name)
    np.testing.assert_array_equal(fixed[4], np.asarray(batch.mask).sum(axis=1), err_msg="valid")
    for (name, column), raw in zip(table.columns.items(), columns):
        np.testing.assert_array_equal(raw.view(column.dtype).reshape(batch[name].shape),
                                      batch[name], err_msg=name)


def random_trajectory(rng: np.random.Generator, columns: dict[str, gx.Column],
                      length: int) -> dict[str, np.ndarray]:
    out = {}
    for name, c in columns.items():
        shape = (length, *c.shape)
        if np.issubdtype(c.dtype, np.floating):
            out[name] = rng.standard_normal(shape).astype(c.dtype)
        elif c.dtype == np.bool_:
            out[name] = rng.random(shape) < 0.5
        else:
            info = np.iinfo(c.dtype)
            out[name] = rng.integers(max(info.min, -1000), min(info.max, 1000), shape,
                                     dtype=c.dtype)
    return out
