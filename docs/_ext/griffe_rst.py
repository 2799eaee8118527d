"""A Griffe extension for the docs build: gearjax's docstrings are Google-style
with a few reStructuredText habits, which Markdown would show literally.

* Sphinx roles (``:class:`gearjax.Table```, ``:meth:`...```, ``:mod:`...```,
  ...) become code spans: the name stays readable, and no cross-reference is
  made that could fail to resolve under ``mkdocs build --strict``.
* A paragraph ending in ``::`` before an indented literal block ends in ``:``
  (the indented block is a code block in Markdown too).

It changes only the text the docs render, never the sources.
"""

from __future__ import annotations

import re

import griffe

_ROLE = re.compile(r":(?:py:)?(?:class|meth|func|mod|attr|data|exc|obj|const):`~?([^`]+)`")
_LITERAL = re.compile(r"::\n(\s*\n)")


def _markdown(text: str) -> str:
    text = _ROLE.sub(r"`\1`", text)
    text = re.sub(r"(?m)^(\s*)::\n(\s*\n)", r"\1\n\2", text)  # a lone "::" line
    return _LITERAL.sub(r":\n\1", text)


def _rewrite(obj: griffe.Object) -> None:
    """Rewrites the docstrings of ``obj`` and of everything defined in it
    (aliases, i.e. imported names, are left to where they are defined)."""
    if obj.is_alias:
        return
    if obj.docstring is not None:
        obj.docstring.value = _markdown(obj.docstring.value)
    for member in obj.members.values():
        _rewrite(member)


class RstToMarkdown(griffe.Extension):
    """Rewrites Sphinx roles and ``::`` literal-block markers in every docstring
    of a package once it is loaded (Griffe 2 calls ``on_package``, Griffe 1
    ``on_package_loaded``; rewriting twice changes nothing)."""

    def on_package(self, *, pkg: griffe.Module, **kwargs) -> None:
        _rewrite(pkg)

    def on_package_loaded(self, *, pkg: griffe.Module, **kwargs) -> None:
        _rewrite(pkg)
