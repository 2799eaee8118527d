"""What the benchmark scripts record about the machine they ran on (shared by
scripts/bench_*.py, which import it as a sibling module)."""

from __future__ import annotations

import importlib.metadata
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
