"""Prints the requirements of gearjax with an extra, one a line, read from
pyproject.toml: the core's dependencies and the extra's, with the extras it
names (``gearjax[rl]``) followed. scripts/_env.sh installs them while the
wheel builds; the wheel's own install afterwards settles anything left.

    python scripts/extra_requirements.py test
"""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path

PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"
SELF = re.compile(r"^gearjax\[([^\]]+)\]$")


def requirements(project: dict, extra: str) -> list[str]:
    """The core's requirements, then `extra`'s, each once, in order; an extra
    of gearjax named inside another is followed. Raises KeyError naming an
    extra that does not exist."""
    extras = project.get("optional-dependencies", {})
    found: dict[str, None] = dict.fromkeys(project.get("dependencies", []))
    pending, seen = [extra], set()
    while pending:
        name = pending.pop(0)
        if name in seen:
            continue
        seen.add(name)
        if name not in extras:
            raise KeyError(f"gearjax has no extra {name!r}; it has {sorted(extras)}")
        for requirement in extras[name]:
            named = SELF.match(requirement.replace(" ", ""))
            if named:
                pending.extend(part.strip() for part in named.group(1).split(","))
            else:
                found.setdefault(requirement)
    return list(found)


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python scripts/extra_requirements.py EXTRA", file=sys.stderr)
        return 2
    project = tomllib.loads(PYPROJECT.read_text())["project"]
    try:
        print("\n".join(requirements(project, argv[0])))
    except KeyError as e:
        print(f"scripts/extra_requirements.py: {e.args[0]}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
