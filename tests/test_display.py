"""What Jupyter shows for a Table and a Batch (gearjax/display.py): the
figures are the table's, names are escaped, histograms have one bar a bin,
and closed tables or traced batches still display."""

from __future__ import annotations

import re

import jax
import numpy as np

import gearjax as gx
from gearjax import display


def table() -> gx.Table:
    t = gx.Table({"obs<script>": gx.Column((2,), "float32"), "r": gx.Column((), "int32")},
                 capacity=8, max_length=6, placement="host", name="demo & co")
    for i in range(6):
        t.insert({"obs<script>": np.zeros((i + 1, 2), np.float32),
                  "r": np.zeros(i + 1, np.int32)}, priority=float(i))
    return t


def test_a_table_shows_its_figures_columns_and_histograms():
    t = table()
    shown = t._repr_html_()
    assert "6 / 8 trajectories" in shown and "75%" in shown
    assert "21 (max_length 6)" in shown  # 1 + 2 + ... + 6 steps
    assert "obs&lt;script&gt;" in shown and "<script>" not in shown
    assert "demo &amp; co" in shown
    assert re.search(r"max_times_sampled</th>\s*<td[^>]*>unlimited<", shown)
    assert len(re.findall("class='bar'", shown)) == 2 * display.BINS  # priority and length
    assert "priority: 0 .. 5, 6 items" in shown and "length: 1 .. 6, 6 items" in shown
    t.close()
    assert "(closed)" in t._repr_html_()


def test_a_consume_once_table_shows_its_draw_limit():
    with gx.Table({"x": gx.Column((), "int32")}, capacity=2, max_length=2,
                  max_times_sampled=3) as t:
        assert re.search(r"max_times_sampled</th>\s*<td[^>]*>3<", t._repr_html_())


def test_an_empty_table_says_there_is_nothing_to_show():
    t = gx.Table({"x": gx.Column((), "int32")}, capacity=2, max_length=2, placement="host")
    assert "no priority to show" in t._repr_html_()


def test_a_batch_shows_shapes_padding_and_where_rows_came_from():
    t = table()
    batch = t.sample(jax.random.key(0), 16, 4)
    shown = batch._repr_html_()
    assert "16 x 4" in shown and "[16, 4, 2]" in shown and "float32" in shown
    real = float(np.asarray(batch.mask).mean())
    assert f"{real:.0%}" in shown
    assert f"{len(np.unique(np.asarray(batch.keys)))} of 16 rows" in shown
    # Inside jit there are no values: the plain repr, never an error.
    traced = []

    @jax.jit
    def show(state, key):
        state, batch = t.sample(state, key, 2, 2)
        traced.append(batch._repr_html_())
        return state

    jax.block_until_ready(show(t.state(), jax.random.key(1)))
    assert traced[0].startswith("<pre>")
