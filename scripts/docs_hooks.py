"""MkDocs hooks for the docs/ site (mkdocs.yml `hooks:`).

A `|` inside code in a Markdown table is written `\\|` so that the table keeps its columns on the
repository host (GitHub's tables split on every unescaped pipe, code spans included). Python-
Markdown splits the row right too, but keeps the backslash inside the code span; drop it there,
so the site shows `exact|any|PATTERN` as the repository host does."""

from __future__ import annotations

import re
from typing import Any

_CODE = re.compile(r"<code>(.*?)</code>", re.DOTALL)


def on_page_content(html: str, **_: Any) -> str:
    return _CODE.sub(lambda m: "<code>" + m.group(1).replace("\\|", "|") + "</code>", html)
