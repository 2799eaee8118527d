"""Rich HTML representations for notebooks: what Jupyter shows for a
:class:`gearjax.Table` (size, occupancy, placement, columns, histograms of
priorities and lengths) and a :class:`gearjax.Batch` (shapes, padding, where
the rows came from). Self-contained HTML (inline CSS and SVG, no scripts);
every name is escaped.
"""

from __future__ import annotations

import html
from typing import Any

import numpy as np

_STYLE = ("font-family:monospace;font-size:12px;border-collapse:collapse;"
          "margin:2px 0")
_CELL = "padding:1px 8px;text-align:left;border-bottom:1px solid #ddd"
BINS = 12


def _rows(pairs: list[tuple[str, str]]) -> str:
    return "".join(f"<tr><th style='{_CELL}'>{html.escape(k)}</th>"
                   f"<td style='{_CELL}'>{v}</td></tr>" for k, v in pairs)


def _bar(fraction: float, width: int = 160) -> str:
    """An occupancy bar (inline CSS)."""
    fraction = min(max(fraction, 0.0), 1.0)
    return (f"<div style='display:inline-block;width:{width}px;height:8px;background:#eee;"
            f"vertical-align:middle'><div style='width:{fraction * width:.0f}px;height:8px;"
            f"background:#4c78a8'></div></div> {fraction:.0%}")


def histogram_svg(values: np.ndarray, label: str, bins: int = BINS) -> str:
    """A small bar chart of `values` (inline SVG): one bar a bin, the range
    under it. Empty input gives a note instead."""
    values = np.asarray(values, dtype=np.float64)
    values = values[np.isfinite(values)]
    if values.size == 0:
        return f"<i>no {html.escape(label)} to show</i>"
    lo, hi = float(values.min()), float(values.max())
    counts, _ = np.histogram(values, bins=bins, range=(lo, hi if hi > lo else lo + 1))
    width, height, bar = 12 * bins, 40, 12
    top = max(int(counts.max()), 1)
    rects = "".join(
        f"<rect class='bar' x='{i * bar}' y='{height - c / top * height:.1f}' width='{bar - 1}' "
        f"height='{c / top * height:.1f}' fill='#4c78a8'><title>{c}</title></rect>"
        for i, c in enumerate(counts.tolist()))
    return (f"<svg width='{width}' height='{height}' role='img' "
            f"aria-label='{html.escape(label)} histogram'>{rects}</svg>"
            f"<div style='font-size:10px'>{html.escape(label)}: {lo:.4g} .. {hi:.4g}, "
            f"{values.size} items</div>")


def table_html(table: Any) -> str:
    """A gearjax.Table as HTML."""
    title = f"gearjax.Table {html.escape(repr(table.name)) if table.name else ''}"
    if table.closed:
        return f"<div><b>{title}</b> (closed)</div>"
    stats = table.stats()
    contents = table.contents()
    size, capacity = int(stats["size"]), int(stats["capacity"])
    columns = "".join(
        f"<tr><td style='{_CELL}'>{html.escape(name)}</td><td style='{_CELL}'>"
        f"{html.escape(str(column.dtype))}</td><td style='{_CELL}'>{list(column.shape)}</td>"
        f"<td style='{_CELL}'>{html.escape(repr(column.pad))}</td></tr>"
        for name, column in table.columns.items())
    summary = _rows([
        ("size", f"{size:,} / {capacity:,} trajectories {_bar(size / capacity)}"),
        ("steps", f"{int(stats['num_steps']):,} (max_length {table.max_length:,})"),
        ("memory", html.escape(str(stats["memory"]))),
        ("remover", html.escape(table.remover)),
        ("rate limiter", html.escape(repr(table.rate_limiter))),
        ("max_times_sampled", f"{table.max_times_sampled:,}" if table.max_times_sampled
         else "unlimited"),
        ("inserts / samples / evictions",
         f"{int(stats['inserts']):,} / {int(stats['samples']):,} / "
         f"{int(stats['evictions']):,}"),
    ])
    return (f"<div><b>{title}</b><table style='{_STYLE}'>{summary}</table>"
            f"<table style='{_STYLE}'><tr><th style='{_CELL}'>column</th>"
            f"<th style='{_CELL}'>dtype</th><th style='{_CELL}'>shape</th>"
            f"<th style='{_CELL}'>pad</th></tr>{columns}</table>"
            f"<div style='display:flex;gap:24px'>"
            f"<div>{histogram_svg(contents['priority'], 'priority')}</div>"
            f"<div>{histogram_svg(contents['length'], 'length')}</div></div></div>")


def batch_html(batch: Any) -> str:
    """A gearjax.Batch as HTML (its arrays are read to the host)."""
    try:
        mask = np.asarray(batch.mask)
        keys = np.asarray(batch.keys)
        probability = np.asarray(batch.probability)
        table_size = np.asarray(batch.table_size)
    except Exception:  # noqa: BLE001 - tracers (inside jit) have no values
        return f"<pre>{html.escape(repr(batch))}</pre>"
    rows, width = mask.shape
    columns = "".join(
        f"<tr><td style='{_CELL}'>{html.escape(name)}</td><td style='{_CELL}'>"
        f"{html.escape(str(value.dtype))}</td><td style='{_CELL}'>{list(value.shape)}</td></tr>"
        for name, value in batch.columns.items())
    summary = _rows([
        ("rows x steps", f"{rows} x {width}"),
        ("real steps", _bar(float(mask.mean()) if mask.size else 0.0)),
        ("distinct trajectories", f"{len(np.unique(keys))} of {rows} rows"),
        ("probability", f"{probability.min():.4g} .. {probability.max():.4g}" if rows else "-"),
        ("table size", f"{int(table_size.max()):,}" if rows else "-"),
    ])
    return (f"<div><b>gearjax.Batch</b><table style='{_STYLE}'>{summary}</table>"
            f"<table style='{_STYLE}'><tr><th style='{_CELL}'>column</th>"
            f"<th style='{_CELL}'>dtype</th><th style='{_CELL}'>shape</th></tr>{columns}"
            f"</table></div>")
