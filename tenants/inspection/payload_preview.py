"""A payload as a person can read it, bounded: JSON, text or hex.

Readers fetch at most `FETCH_BYTES` of a payload from the database (`substring`), never the whole
of a large one; the preview shows at most `PREVIEW_BYTES` of it. A payload is `json` when all of
it was fetched and parses as JSON, `text` when its first bytes are UTF-8 without control
characters (other than tab and line breaks), else `hex`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

PREVIEW_BYTES = 1024  # what a preview shows at most
FETCH_BYTES = 8192  # what a reader fetches: whole payloads up to this size can be JSON

_ALLOWED_CONTROLS = {"\t", "\n", "\r"}


@dataclass(frozen=True, slots=True)
class Preview:
    encoding: str  # "json", "text", "hex" or "empty"
    text: str
    truncated: bool  # the preview shows only the start of the payload


def preview(head: bytes, size: int) -> Preview:
    """The preview of a payload of `size` bytes whose first bytes are `head` (all of it when
    `size <= len(head)`)."""
    if size == 0:
        return Preview("empty", "", False)
    whole = len(head) >= size
    if whole and size <= FETCH_BYTES:
        parsed = _json(head)
        if parsed is not None:
            text = json.dumps(parsed, ensure_ascii=False, separators=(", ", ": "))
            if len(text) <= PREVIEW_BYTES:
                return Preview("json", text, False)
            return Preview("json", text[:PREVIEW_BYTES], True)
    shown = head[:PREVIEW_BYTES]
    truncated = size > len(shown)
    text = _text(shown, cut=truncated)
    if text is not None:
        return Preview("text", text, truncated)
    return Preview("hex", shown.hex(" "), truncated)


def _json(data: bytes) -> object | None:
    try:
        parsed = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        return None
    # A bare number or string is text to a reader, not a document.
    return parsed if isinstance(parsed, (dict, list)) else None


def _text(data: bytes, *, cut: bool) -> str | None:
    """`data` as text, or None when it is not readable text. `cut`: it may end inside a
    character (the payload goes on), which is not a reason to call it binary."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        if not cut or error.start < len(data) - 3:
            return None
        text = data[: error.start].decode("utf-8")
    if any((ch < " " and ch not in _ALLOWED_CONTROLS) or ch == "\x7f" for ch in text):
        return None
    return text
