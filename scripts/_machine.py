"""What the benchmark scripts record about the machine they ran on (shared by
scripts/bench_*.py, which import it as a sibling module)."""

from __future__ import annotations

import importlib.metadata
import json
import platform
from pathlib import Path


def cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo (Linux), else what platform says."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def version_of(package: str) -> str | None:
    """The installed version of a distribution, or None where it is not installed."""
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def write_results(out: str | Path, result: dict, text: str) -> Path:
    """Writes a benchmark's results as JSON to `out` and its printed report
    beside it (same name, .txt); returns the JSON file's path."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n")
    out.with_suffix(".txt").write_text(text + "\n")
    return out
