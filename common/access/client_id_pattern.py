"""Client-id patterns a tenant may set on a device: globs, matched in linear time.

A tenant's pattern runs on the broker's event loop at every CONNECT of the device, so it must
never be able to take long: no regular expressions (`(a+)+$` with 27 `a`s froze the broker
for seconds). The language is a glob:

- `*` any run of characters (also none), `?` exactly one character;
- every other character stands for itself, except that the characters regular expressions use
  for structure (`( ) [ ] { } | + ^ $`) and `\\` must be escaped with a backslash to mean
  themselves: a pattern written as a regex is refused with a clear message rather than misread
  (`.` is an ordinary character, common in client ids; `\\.` is accepted too).

`compile_pattern` checks a pattern (the control plane calls it when a pattern is saved, so a
bad one is a clear 400) and returns a matcher. Matching splits the pattern at its stars: the
first piece must start the client id, the last must end it, and each middle piece is found
leftmost after the previous one (greedy leftmost search is exact for `*`-only gaps). Each
search is a fixed-width scan (`str.find`, or a regex of literals and `.` with no quantifier,
which cannot backtrack), so a match costs O(len(client id) × len(pattern)) at worst, in C.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import lru_cache

MAX_PATTERN_LENGTH = 255
MAX_CLIENT_ID_LENGTH = 256  # longer client ids never match a pattern (bounds the work)
REGEX_SYNTAX = "()[]{}|+^$"
ESCAPABLE = "*?\\" + REGEX_SYNTAX + "."


class PatternError(ValueError):
    """The pattern is not a valid client-id glob; the message says why."""


def _pieces(pattern: str) -> list[list[str | None]]:
    """The pattern as star-separated pieces; each piece a list of characters, None for `?`."""
    pieces: list[list[str | None]] = [[]]
    escaped = False
    for char in pattern:
        if escaped:
            if char not in ESCAPABLE:
                raise PatternError(f"'\\{char}' is not an escape (escape only {ESCAPABLE})")
            pieces[-1].append(char)
            escaped = False
        elif char in REGEX_SYNTAX:
            raise PatternError(
                f"{char!r} looks like a regular expression: patterns are globs (* any run, "
                f"? one character); write \\{char} for the character itself"
            )
        elif char == "\\":
            escaped = True
        elif char == "*":
            pieces.append([])
        elif char == "?":
            pieces[-1].append(None)
        else:
            pieces[-1].append(char)
    if escaped:
        raise PatternError("the pattern ends with a lone backslash")
    return pieces


def validate(pattern: str) -> None:
    """Raise PatternError naming the problem, or return when the pattern is usable."""
    if not pattern:
        raise PatternError("a pattern policy needs a pattern")
    if len(pattern) > MAX_PATTERN_LENGTH:
        raise PatternError(f"at most {MAX_PATTERN_LENGTH} characters")
    if any(ord(c) < 0x20 or c == "\x7f" for c in pattern):
        raise PatternError("control characters are not allowed")
    _pieces(pattern)


class _Piece:
    """One star-free piece: a literal (found with str.find) or literals and `?` (a fixed-width
    regex without quantifiers)."""

    __slots__ = ("width", "literal", "regex")

    def __init__(self, chars: list[str | None]) -> None:
        self.width = len(chars)
        self.literal: str | None
        self.regex: re.Pattern[str] | None
        if None in chars:
            self.literal = None
            self.regex = re.compile(
                "".join("." if c is None else re.escape(c) for c in chars), re.DOTALL
            )
        else:
            self.literal = "".join(c for c in chars if c is not None)  # none is: checked above
            self.regex = None

    def at(self, text: str, pos: int) -> bool:
        if self.literal is not None:
            return text.startswith(self.literal, pos)
        assert self.regex is not None  # no literal: a regex
        return self.regex.match(text, pos) is not None and pos + self.width <= len(text)

    def find(self, text: str, pos: int, end: int) -> int:
        """Leftmost start >= pos of this piece ending at or before `end`; -1 when none."""
        if self.literal is not None:
            return text.find(self.literal, pos, end)
        assert self.regex is not None  # no literal: a regex
        found = self.regex.search(text, pos, end)
        return found.start() if found else -1


@lru_cache(maxsize=4096)
def compile_pattern(pattern: str) -> Callable[[str], bool]:
    """A matcher for `pattern` (validated first: PatternError when it is not a valid glob)."""
    validate(pattern)
    raw = _pieces(pattern)
    pieces = [_Piece(chars) for chars in raw]
    if len(pieces) == 1:
        only = pieces[0]
        return lambda text: (
            len(text) == only.width and len(text) <= MAX_CLIENT_ID_LENGTH and only.at(text, 0)
        )
    head, middle, tail = pieces[0], pieces[1:-1], pieces[-1]
    minimum = sum(p.width for p in pieces)

    def match(text: str) -> bool:
        size = len(text)
        if size > MAX_CLIENT_ID_LENGTH or size < minimum:
            return False
        if not head.at(text, 0):
            return False
        end = size - tail.width
        if not tail.at(text, end):
            return False
        pos = head.width
        for piece in middle:
            found = piece.find(text, pos, end)
            if found < 0:
                return False
            pos = found + piece.width
        return pos <= end

    return match


def matches(pattern: str, client_id: str) -> bool:
    """True when `client_id` matches; an invalid pattern matches nothing."""
    try:
        return compile_pattern(pattern)(client_id)
    except PatternError:
        return False


_SIMPLE_REGEX = re.compile(r"(?:\\.|\.\*|\.\+|\.|[^\\.*+?()\[\]{}|^$])*")


def from_legacy_regex(regex: str) -> str | None:
    """The glob equivalent of an old regular-expression pattern when there is an exact one
    (literals, escaped characters, `.`, `.*`, `.+`, optional `^`/`$` anchors); else None."""
    body = regex
    if body.startswith("^"):
        body = body[1:]
    if body.endswith("$") and not body.endswith("\\$"):
        body = body[:-1]
    if not _SIMPLE_REGEX.fullmatch(body):
        return None
    out = []
    index = 0
    while index < len(body):
        char = body[index]
        if char == "\\":
            literal = body[index + 1]
            if literal.isalnum():  # \d, \w, \s ...: classes, not literals
                return None
            out.append("\\" + literal if literal in ESCAPABLE and literal != "." else literal)
            index += 2
        elif body.startswith(".*", index):
            out.append("*")
            index += 2
        elif body.startswith(".+", index):
            out.append("?*")
            index += 2
        elif char == ".":
            out.append("?")
            index += 1
        else:
            out.append(char)
            index += 1
    glob = "".join(out)
    try:
        validate(glob)
    except PatternError:
        return None
    return glob
