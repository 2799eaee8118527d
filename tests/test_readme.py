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
