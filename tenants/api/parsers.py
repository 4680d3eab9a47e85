"""The API's JSON parser: DRF's, plus the limits Postgres and the stack need, as 400s.

Nesting deeper than `MAX_DEPTH` (a recursion error in the decoder, or rows Postgres refuses) and
NUL characters in any string or key (Postgres text and jsonb cannot hold them) are refused with
a message naming the problem instead of failing later as a server error.
"""

from __future__ import annotations

from typing import Any

from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser

MAX_DEPTH = 32


def check(value: Any, depth: int = 0) -> None:
    if depth > MAX_DEPTH:
        raise ParseError(f"JSON nested deeper than {MAX_DEPTH} levels.")
    if isinstance(value, str):
        if "\x00" in value:
            raise ParseError("NUL characters (\\u0000) are not allowed in strings.")
    elif isinstance(value, dict):
        for key, item in value.items():
            check(key, depth + 1)
            check(item, depth + 1)
    elif isinstance(value, list):
        for item in value:
            check(item, depth + 1)


class SafeJSONParser(JSONParser):
    def parse(self, stream, media_type=None, parser_context=None):
        try:
            data = super().parse(stream, media_type, parser_context)
        except RecursionError:
            raise ParseError(f"JSON nested deeper than {MAX_DEPTH} levels.") from None
        check(data)
        return data
