"""The Quick start runs as written, both where a newcomer meets it (the README)
and where the docs explain it line by line (docs/getting-started.md), so
neither can rot."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def quick_start(path: Path) -> str:
    """The first python block of the file's "## Quick start" section."""
    text = path.read_text()
    section = text[text.index("## Quick start"):]
    return section.split("```python\n", 1)[1].split("```", 1)[0]


@pytest.mark.parametrize("page", ["README.md", "docs/getting-started.md"])
def test_quick_start_runs_and_prints_what_the_docs_say(page, capsys):
    namespace: dict = {}
    exec(compile(quick_start(ROOT / page), f"{page}#quick-start", "exec"), namespace)  # noqa: S102 - our own docs
    table = namespace["table"]
    printed = capsys.readouterr().out.split()
    assert printed[0] == "6400", "the printed count must be every step's (100 x 64 rows)"
    assert math.isfinite(float(printed[1]))
    assert table.stats()["samples"] == 100 * 64
    # The memory the comment beside capacity says is reserved.
    assert table.stats()["bytes_reserved"] >= 960_000_000
    assert "960 MB reserved now" in (ROOT / page).read_text()
    table.close()


@pytest.mark.parametrize("page", ["README.md", "docs/getting-started.md"])
def test_the_shapes_the_quick_start_comments_give(page):
    """The comments say batch["obs"] is [64, 20, 17] and the mask [64, 20]."""
    import jax

    namespace: dict = {}
    code = quick_start(ROOT / page).split("def loss_fn")[0]  # the table, filled; no training
    exec(compile(code, f"{page}#quick-start", "exec"), namespace)  # noqa: S102 - our own docs
    table, gx = namespace["table"], namespace["gx"]
    batch = table.sample(jax.random.key(0), batch_size=64, window=20,
                         strategy=gx.Prioritized(0.6), pad="left")
    assert batch["obs"].shape == (64, 20, 17) and batch.mask.shape == (64, 20)
    text = quick_start(ROOT / page)
    assert 'batch["obs"]: [64, 20, 17]; batch.mask: [64, 20]' in text
    table.close()


def test_every_relative_link_of_the_readme_exists():
    """Links and backticked paths a newcomer follows from the README."""
    import re

    text = (ROOT / "README.md").read_text()
    targets = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text)
    relative = [t for t in targets if not re.match(r"[a-z]+://", t)]
    assert len(relative) > 20  # the README links its docs and results
    missing = [t for t in relative if not (ROOT / t).exists()]
    assert missing == [], missing


def test_stats_does_not_wait_for_a_program_in_flight():
    """The Quick start's last comment: stats() itself does not wait (the
    float(loss) before it does)."""
    import jax
    import numpy as np

    import gearjax as gx

    table = gx.Table({"x": gx.Column((), "float32")}, capacity=64, max_length=4)
    table.insert({"x": np.zeros(4, np.float32)})

    @jax.jit
    def slow_insert(state, m):
        for _ in range(12):
            m = jax.numpy.tanh(m @ m)  # about a second of work on 2 cores
        state, _ = table.insert_batch(state, {"x": jax.numpy.zeros((8, 4)) + 0 * m[0, 0]},
                                      jax.numpy.full(8, 4))
        return state

    m = jax.numpy.full((1200, 1200), 1e-3)
    jax.block_until_ready(slow_insert(table.state(), m))  # compiled
    state = slow_insert(table.state(), m)
    assert table.stats()["size"] == 9  # the program in flight has not inserted yet
    assert not state.is_ready()  # and stats() returned before it ended
    jax.block_until_ready(state)
    assert table.stats()["size"] == 17
    table.close()
