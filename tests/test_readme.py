"""The README's Quick start runs as written (so the docs cannot rot)."""

from __future__ import annotations

import math
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def test_quick_start_runs():
    text = README.read_text()
    section = text[text.index("## Quick start"):]
    code = section.split("```python\n", 1)[1].split("```", 1)[0]
    namespace: dict = {}
    exec(compile(code, "README.md#quick-start", "exec"), namespace)  # noqa: S102 - our own docs
    table = namespace["table"]
    assert table.stats()["samples"] == 100 * 64
    assert math.isfinite(float(namespace["loss"]))
    table.close()
